"""What a compute service does, timed beside Nova doing the same, with
this library's records on (as a service always runs it).

For each host size (pGPUs / mdevs / guests, every mdev in use by one
guest), in one process, on libvirt's test driver:

* **start**: a restarted service's ``init_host`` (which reads every
  guest and rebuilds who uses what) plus its first
  ``update_provider_tree``, on the records the last run left, a
  connection of its own (as a new process opens) and the providers as
  Placement holds them (Nova reads them back before its first
  refresh); beside
  Nova's periodic plus the guest scan Nova makes at every spawn
  (``_get_all_assigned_mediated_devices``), both timed after a garbage
  collection, as a start finds its process, and each on a connection
  of its own opened before, as a restarted process opens one (Nova's
  also timed without either, right after its last run: **nova warm**);
  and ours on a host with no records yet (**first start**: every
  record written and fsynced);
* **idle**: a steady refresh when nothing changed; beside Nova's
  periodic (which never reads guests);
* **guest event**: one guest stopped, undefined and defined again per
  refresh, told through ``domain_event`` as the Nova integration's
  lifecycle callback does; the ratio to idle is what a busy host pays;
* **bind**: one bind of a free mdev, records on (a durable write),
  wall time; beside Nova's ``_allocate_mdevs`` on the same host (which
  scans every guest to find a free mdev);
* **cold**: idle and guest event again, each refresh (ours and Nova's)
  timed with the CPU's caches emptied first (:mod:`benchmarks.caches`),
  as a periodic task a minute after the last finds them: back to back,
  a refresh finds the lines the one before left, and is cheaper than
  any a service runs.

CPU and wall ms, min/median/max; each comparison timed in turn within
every repetition. Nova's side needs the virtualenv ``tools/nova-venv``
builds::

    tools/nova-venv python -m benchmarks.service [--quick] [--runs N]

Without Nova it prints this library's figures only.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import tempfile
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import conf_for, dense, event_loop, machine
from benchmarks.nova_compare import warm_up
from benchmarks.nova_side import ROOT, Nova, nova_driver, timed
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.model.provider_tree import ProviderTree
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim import guest_xml

SHAPES = [(1, 16, 16), (4, 128, 128), (16, 512, 512), (64, 2048, 2048)]
QUICK = SHAPES[:2]
FREE = 8  # free mdevs on top, for binds to reuse


def dump(tree: Any) -> list[dict[str, Any]]:
    """The providers of ``tree`` (parents first) as Placement holds them
    after the refreshes that wrote ``tree``: what a restarted service is
    handed (Nova reads them back at a restart)."""
    found = []
    for key in tree.get_provider_uuids():
        data = tree.data(key)
        found.append(
            {
                "name": data.name,
                "uuid": key,
                "parent": data.parent_uuid,
                "generation": data.generation,
                "inventory": dict(data.inventory),
                "traits": sorted(data.traits),
                "aggregates": sorted(data.aggregates),
            }
        )
    return found


def rebuild(tree: Any, providers: list[dict[str, Any]]) -> Any:
    """``tree`` (empty, of either side's class) holding ``providers``."""
    for p in providers:
        if p["parent"] is None:
            tree.new_root(p["name"], p["uuid"], p["generation"])
        else:
            tree.new_child(p["name"], p["parent"], p["uuid"], p["generation"])
        tree.update_inventory(p["uuid"], p["inventory"])
        tree.update_traits(p["uuid"], p["traits"])
        tree.update_aggregates(p["uuid"], p["aggregates"])
    return tree


def held(tree: Any) -> ProviderTree:
    """A copy of ``tree`` as Placement holds it (see :func:`dump`)."""
    copy: ProviderTree = rebuild(ProviderTree(), dump(tree))
    return copy


class Service:
    """This library as a compute service runs it: records on, and
    libvirt's event loop running (as Nova's ``Host`` runs it) with the
    node-device events watched, as the Nova integration watches them."""

    def __init__(
        self, uri: str, sysfs: Path, conf: Any, tmp: Path, conn: Any = None
    ) -> None:
        """``conn``: the connection to use (one to ``uri`` by default)."""
        import libvirt

        libvirt.registerErrorHandler(lambda *_: None, None)
        event_loop()
        self.uri, self.sysfs, self.conf, self.tmp = uri, sysfs, conf, tmp
        self.conn = conn if conn is not None else libvirt.open(uri)
        self.driver, self.tree = self._new()
        self.guests = [d.UUIDString() for d in self.conn.listAllDomains()]
        self.driver.init_host(self.guests)
        self.driver.update_provider_tree(self.tree, "bench")
        self._starts = 0

    def _new(
        self, state: Path | None = None, conn: Any = None
    ) -> tuple[VgpuDriver, Any]:
        host = LibvirtHost(
            sysfs_root=self.sysfs,
            connection=conn if conn is not None else self.conn,
        )
        host.watch_node_device_events()  # as the Nova integration does
        tree = ProviderTree()
        tree.new_root("bench", ROOT)
        driver = VgpuDriver(
            self.conf, host, state_path=str(state) if state else None
        )
        return driver, tree

    def start(self) -> tuple[float, float]:
        """A restart: init_host + first refresh of a new service on the
        records the last one left (the host unchanged meanwhile), given
        the providers as Placement holds them (Nova reads them back
        from Placement at a restart, before the first refresh)."""
        return self._started(None, held(self.tree))

    def first_start(self) -> tuple[float, float]:
        """The same on a host with no records yet and no provider in
        Placement (its first start)."""
        self._starts += 1
        return self._started(self.tmp / f"start-{self._starts}", None)

    def _started(self, state: Path | None, tree: Any) -> tuple[float, float]:
        """init_host + first refresh of a new service, timed, on a
        connection of its own opened before (as a restarted process
        opens one): libvirt refuses a second node-device callback of
        the same kind on one connection, so a new service on this
        one's would read every parent again at its first refresh, as
        no started service does. Starts are timed before any change
        to the host, whose file the new connection reads."""
        import libvirt

        conn = libvirt.open(self.uri)
        try:
            driver, fresh = self._new(state, conn)
            tree = fresh if tree is None else tree

            def run() -> None:
                driver.init_host(self.guests)
                driver.update_provider_tree(tree, "bench")

            return timed(run, collect=True)
        finally:
            conn.close()

    def idle(self, cold: bool = False) -> tuple[float, float]:
        """A refresh (``cold``: the caches emptied first)."""
        return timed(
            lambda: self.driver.update_provider_tree(self.tree, "bench"),
            cold=cold,
        )

    def guest_event(self, cold: bool = False) -> tuple[float, float]:
        """One guest stopped, undefined and defined again (outside the
        timing, as libvirt does it), told as events; then the refresh,
        timed (``cold``: the caches emptied first)."""
        guest = self.conn.lookupByUUIDString(self.guests[0])
        xml = guest.XMLDesc(0)
        guest_xml.delete(guest)
        self.driver.domain_event(self.guests[0], False)
        self.conn.defineXML(xml)
        self.driver.domain_event(self.guests[0], True)
        return self.idle(cold)

    def bind(self) -> tuple[float, float]:
        """One bind of a free mdev (records on), then its release."""
        plans = self.driver.last_plans
        free = [p for p in plans if p.total > p.reserved]
        rp = self.tree.data(free[0].name).uuid
        instance = str(uuid.uuid4())
        cost = timed(
            lambda: self.driver.allocate_mdevs(
                instance, {rp: {"resources": {"VGPU": 1}}}
            )
        )
        self.driver.release_mdevs(instance)
        return cost


class NovaBind:
    """Nova's own ``_allocate_mdevs`` for one VGPU on the same host, on
    the provider of a pGPU that has a free mdev (the test driver cannot
    create one)."""

    def __init__(self, nova: Nova, parent: str) -> None:
        self.nova = nova
        nova.periodic()
        self.rp = nova.tree.data(f"bench_{parent}").uuid
        nova.driver.provider_tree = nova.tree

    def bind(self) -> tuple[float, float]:
        return timed(
            lambda: self.nova.driver._allocate_mdevs(
                {self.rp: {"resources": {"VGPU": 1}}}
            )
        )


def measure(
    parents: int, mdevs: int, guests: int, runs: int = 15
) -> dict[str, Any]:
    """``runs``: repetitions up to 512 mdevs (5 above)."""
    description = dense(parents, mdevs + FREE, guests)
    runs = runs if mdevs <= 512 else 5
    with tempfile.TemporaryDirectory() as tmp:
        uri, sysfs = hostdesc.materialize(description, Path(tmp))
        conf = conf_for(description.config, Path(tmp))
        ours = Service(uri, sysfs, conf, Path(tmp))
        try:
            nova: Nova | None = Nova(uri)
        except ImportError:
            nova = None
        free = sorted(ours.driver.free_mdevs(None))
        parent = ours.driver.seen_mdevs()[free[0]][0]
        nova_bind = NovaBind(nova, parent) if nova else None
        samples: dict[str, list[float]] = collections.defaultdict(list)

        def nova_start(collect: bool) -> tuple[float, float]:
            """Nova's periodic and its spawn's guest scan, timed as
            one; ``collect``: as a start is (and as ours is timed), the
            garbage collected first, so neither side runs warm, and on
            a driver set up on a connection of its own opened before,
            as ours is and as a restarted nova-compute opens one; else
            Nova's driver of every other figure, on its connection used
            since."""
            assert nova is not None
            import libvirt

            conn = libvirt.open(uri) if collect else None
            driver = nova_driver(uri, False, conn)[0] if conn else nova.driver

            def run() -> None:
                driver._update_provider_tree_for_vgpu(nova.tree, "bench")
                driver._get_all_assigned_mediated_devices()

            try:
                return timed(run, collect=collect)
            finally:
                if conn is not None:
                    conn.close()

        pairs: list[list[tuple[str, Any]]] = [
            [
                ("start", ours.start),
                ("nova_start", nova and (lambda: nova_start(True))),
                ("nova_warm", nova and (lambda: nova_start(False))),
            ],
            [("first_start", ours.first_start)],
            [("idle", ours.idle), ("nova_idle", nova and nova.periodic)],
            [("event", ours.guest_event), ("idle_again", ours.idle)],
            # the same with the caches emptied before each (as a periodic
            # task a minute after the last finds them)
            [
                ("idle_cold", lambda: ours.idle(True)),
                ("nova_idle_cold", nova and (lambda: nova.periodic(True))),
            ],
            [
                ("event_cold", lambda: ours.guest_event(True)),
                ("idle_cold_again", lambda: ours.idle(True)),
            ],
            [("bind", ours.bind), ("nova_bind", nova_bind and nova_bind.bind)],
        ]
        for pair in pairs:
            for _ in range(runs):
                for key, timer in pair:
                    if timer is None:
                        continue
                    cpu, wall = timer()
                    samples[key].append(cpu)
                    samples[key + "_wall"].append(wall)
        return {"shape": (parents, mdevs, guests), "samples": samples}


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return (
        f"{min(values):.2f}/{statistics.median(values):.2f}/{max(values):.2f}"
    )


def ratio(a: list[float], b: list[float]) -> str:
    if not a or not b:
        return "-"
    return f"{statistics.median(a) / statistics.median(b):.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--runs",
        type=int,
        default=15,
        help="repetitions on hosts of up to 512 mdevs (5 above), each "
        "comparison timed in turn within each",
    )
    args = parser.parse_args()
    print(machine())
    print(f"warm-up (one-time costs of the process): {warm_up():.1f} CPU ms")
    print(
        "ms min/median/max; records on; ratios of medians. start = "
        "init_host + first refresh (Nova: periodic + the guest scan of "
        "every spawn), each after a garbage collection, as a start is "
        "(nova warm: Nova's without it, right after its last run); event = refresh after one guest stopped, undefined and "
        "defined again; bind = wall ms of one bind (records fsynced)"
    )
    header = (
        f"{'host':>13} | {'start cpu':>20} {'nova start':>20} {'ratio':>6} "
        f"{'nova warm':>18} "
        f"{'first start':>20} | "
        f"{'idle cpu':>18} {'nova idle':>18} {'nova/us':>7} | "
        f"{'event cpu':>18} {'event/idle':>10} | "
        f"{'bind wall':>18} {'nova bind wall':>20}"
    )
    print(header)
    cold = []
    for shape in QUICK if args.quick else SHAPES:
        s = measure(*shape, runs=args.runs)["samples"]
        label = "/".join(str(n) for n in shape)
        print(
            f"{label:>13} | {spread(s['start']):>20} "
            f"{spread(s['nova_start']):>20} "
            f"{ratio(s['start'], s['nova_start']):>6} "
            f"{spread(s['nova_warm']):>18} "
            f"{spread(s['first_start']):>20} | "
            f"{spread(s['idle']):>18} {spread(s['nova_idle']):>18} "
            f"{ratio(s['nova_idle'], s['idle']):>7} | "
            f"{spread(s['event']):>18} "
            f"{ratio(s['event'], s['idle_again']):>10} | "
            f"{spread(s['bind_wall']):>18} "
            f"{spread(s['nova_bind_wall']):>20}",
            flush=True,
        )
        cold.append(
            f"{label:>13} | {spread(s['idle_cold']):>18} "
            f"{spread(s['nova_idle_cold']):>18} "
            f"{ratio(s['nova_idle_cold'], s['idle_cold']):>7} | "
            f"{spread(s['event_cold']):>18} "
            f"{ratio(s['event_cold'], s['idle_cold_again']):>10}"
        )
    print(
        "cold: the same refreshes with the CPU's caches emptied before each "
        "(benchmarks.caches), as a periodic task a minute after the last "
        "finds them"
    )
    print(
        f"{'host':>13} | {'idle cpu':>18} {'nova idle':>18} {'nova/us':>7} | "
        f"{'event cpu':>18} {'event/idle':>10}"
    )
    print("\n".join(cold))


if __name__ == "__main__":
    main()
