"""Spawns and deletes in several threads beside the periodic refresh on
NVIDIA SR-IOV cards (each vGPU a VF the bind types through sysfs), as
nova-compute runs them: an L40 (one type), an RTX PRO 6000 in mixed-size
mode (two types sharing the card), and a host with mdev parents beside a
card; on each, some runs with ``restore`` run again and again beside
the service, on the same records, which must never fail (a VF it finds
recorded and untyped has room, or a bind is typing it). No VF or mdev
goes to two live instances; once all is quiet the view has each
instance use what its guest has, a plan of the whole host is the plan
the refreshes kept, and every VF type the records keep is one the VF
has or a claim is making (a type recorded for a VF nobody uses,
``restore`` would type again)."""

from __future__ import annotations

import functools
import random

import pytest

from benchmarks.common import sriov
from tests.helpers import Node, load, new_tree
from tests.stress import Threads, auditing, run, spawned
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.model.device import Guest
from vgpu_driver.sim.simulated import SimulatedHost

WORKERS, ROUNDS = 3, 80
HOSTS = {
    "l40": lambda: sriov(2, used_per_card=4),
    "mixed": lambda: load("rtx6000-mixed"),
    "demo": lambda: load("demo"),
}


class VfStress(Threads):
    rounds = ROUNDS

    def __init__(self, node: Node, seed: int) -> None:
        super().__init__(seed)
        self.node = node
        self.driver, self.host = node.driver, node.host
        self.providers = {
            p.name: node.tree.data(p.name).uuid for p in self.driver.last_plans
        }
        # provider -> what its card holds of its one type (the total at
        # rest; a card of several types holds more of one as the others
        # are freed: left unchecked)
        self.holds: dict[str, int] = {}

    def refresher(self) -> None:
        """The periodic refresh; no total above what the card holds."""
        with self.failing():
            while not self.stop.is_set():
                self.node.update()
                self.held_to_card("service", self.driver.last_plans)

    def held_to_card(self, who: str, plans) -> None:
        for plan in plans:
            if plan.total > self.holds.get(plan.name, plan.total):
                self.errors.append(
                    f"{who}: {plan.name} total {plan.total} above the card"
                    f" ({self.holds[plan.name]})"
                )

    def tool(self, make_conf) -> VgpuDriver:
        """Another process on the same records and host."""
        conf = make_conf(self.node.description.config)
        state = self.node.conf.devices.state_path
        conf.set_override("state_path", state, "devices")
        return VgpuDriver(conf, self.host)

    def restorer(self, make_conf) -> None:
        """``vgpu-driver restore`` again and again."""
        with self.failing():
            while not self.stop.is_set():
                tool = self.tool(make_conf)
                reading = tool.discover(rescan_guests=True)
                done = tool.binder.recover(reading, tool.seen_mdevs())
                tool.binder.ledger.carrier.let_go()
                if done["failed"]:  # (a VF it could not type, say)
                    self.errors.append(f"restore failed: {done['failed']}")

    def syncer(self, make_conf) -> None:
        """``vgpu-driver sync --periodic`` again and again (started again
        every tenth pass): told of no guest's change, its readings tear
        as the service changes the host; no total above the card."""
        with self.failing():
            tool, tree, passes = self.tool(make_conf), new_tree("n"), 0
            while not self.stop.is_set():
                if passes and passes % 10 == 0:  # (started again)
                    tool.binder.ledger.carrier.let_go()
                    tool, tree = self.tool(make_conf), new_tree("n")
                tool.update_provider_tree(tree, "n")
                passes += 1
                self.held_to_card("sync", tool.last_plans)
            tool.binder.ledger.carrier.let_go()

    def auditor(self, make_conf, once: bool = False) -> None:
        """``vgpu-driver audit --fix`` beside the service (see
        :func:`tests.stress.auditing`)."""
        auditing(self, lambda: self.tool(make_conf), once)

    def spawn(self, rng: random.Random, mine: list[str]) -> None:
        found = spawned(self, rng)
        if found is None:
            return
        instance, devices = found
        mine.append(instance)
        self.host.note_guest(
            Guest(
                instance,
                instance[:8],
                mdevs=tuple(d.id for d in devices if d.kind == "mdev"),
                pci_devices=tuple(d.id for d in devices if d.kind != "mdev"),
            )
        )
        self.driver.domain_event(instance, True)
        self.driver.guest_defined(instance)

    def delete(self, instance: str) -> None:
        with self.lock:
            del self.live[instance]
        self.host.forget_guest(instance)
        self.driver.domain_event(instance, False)
        self.driver.guest_undefined(instance)
        self.driver.release_mdevs(instance)
        with self.lock:
            self.allocated.discard(instance)


@pytest.mark.parametrize(
    ("host", "seed", "beside"),
    [
        ("l40", 0, None),
        ("l40", 1, None),
        ("mixed", 0, None),
        ("mixed", 1, None),
        ("l40", 2, "restorer"),
        ("mixed", 2, "restorer"),
        ("demo", 0, "restorer"),
        ("demo", 1, "restorer"),
        ("l40", 3, "auditor"),
        ("mixed", 3, "auditor"),
        *[("l40", seed, "syncer") for seed in range(4, 8)],
    ],
)
def test_spawns_and_deletes_of_vfs_in_threads_beside_the_refresh(
    make_conf, tmp_path, host, seed, beside
):
    """``beside``: a tool run again and again beside the service
    (``restore``; ``audit --fix``, with one spawn in ten dying after its
    bind: their claims must all be dropped, none of a live one; ``sync
    --periodic``). On the L40, no total the service or the sync reports
    is above what the card holds."""
    description = HOSTS[host]()
    node = Node(
        make_conf,
        tmp_path,
        config=description.config,
        host=SimulatedHost(description),
    )
    stress = VfStress(node, seed)
    if host == "l40":
        stress.holds = {p.name: p.total for p in node.driver.last_plans}
    tools = []
    if beside is not None:
        stress.dying = 0.1 if beside == "auditor" else 0.0
        tools.append(functools.partial(getattr(stress, beside), make_conf))
    run(stress, [stress.refresher, *tools], WORKERS)
    driver = node.driver
    node.update()
    # (the host's own guests, there before the stress, left out)
    before = {g.uuid for g in description.guests}
    in_use = {
        instance: sorted(held["in_use"])
        for instance, held in driver.instance_devices().items()
        if held["in_use"] and instance not in before
    }
    assert in_use == {i: sorted(ids) for i, ids in stress.live.items()}
    claims = driver.binder.claims()
    for address, number in driver.binder.vf_types.items():
        assert node.host.vf_type(address) == number or address in claims
    plans = list(driver.last_plans)
    driver._refresher._fingerprint = None  # plan the whole host
    node.update()
    assert driver.last_plans == plans
    if beside == "auditor":  # the claims of spawns that died, dropped
        stress.auditor(make_conf, once=True)
        node.update()
        assert driver.binder.claims() == {}
