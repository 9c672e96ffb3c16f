"""Another process of the library beside a node on its host and records
(an operator's tool, a second service), and a release caught between
its record and its host change: the shapes the race tests share."""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import Callable
from typing import Any

from tests.helpers import Node
from vgpu_driver.cmd.audit import device_ids_on
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.exception import DeviceNoRoom
from vgpu_driver.model.audit import audit


def beside(n: Node, make_conf, config: str | None = None) -> VgpuDriver:
    """Another process of the library on ``n``'s host and records (an
    operator's tool), with ``n``'s configuration or ``config``."""
    conf = make_conf(textwrap.dedent(config or n.description.config))
    conf.set_override("state_path", n.conf.devices.state_path, "devices")
    return VgpuDriver(conf, n.host)


def audit_read(
    tool: VgpuDriver,
    allocations: Callable[[], dict[str, Any]] = dict,
) -> tuple[Any, dict[str, Any], list[Any]]:
    """What ``vgpu-driver audit`` reads, in its order: the host, the
    claims, then Placement's allocations (``allocations()``); and what
    it finds. Returns (the reading, the claims, the findings)."""
    inventory = tool.discover(rescan_guests=True)
    claims = tool.binder.claims()
    findings = audit(
        inventory,
        claims=claims,
        vf_types=tool.binder.vf_types,
        configured=tool.configured_types(inventory),
        device_of={},
        parent_of=device_ids_on(tool, inventory),
        allocations=allocations(),
        ours=tool.binder.owned(),
    )
    return inventory, claims, findings


def vf_types_of(n: Node) -> dict[str, int]:
    """Each VF of the host's first PF and its vGPU type now."""
    return {v.address: v.current_type for v in n.host.discover().pfs[0].vfs}


def vf_release_in_flight(make_conf, state, monkeypatch):
    """The l40-sriov host, i1 bound to a VF and released: the release
    recorded, the releasing thread not yet on to the host. Returns the
    node, the VF and that thread's next step."""
    from vgpu_driver.service import hand_back

    n = Node(make_conf, state, "l40-sriov")
    [vf] = n.driver.allocate_mdevs("i1", n.alloc(("pci_0000_41_00_0", 1)))
    late = []
    with monkeypatch.context() as patched:  # the first thread is slow
        patched.setattr(hand_back, "finish_release", lambda *a: late.append(a))
        n.driver.release_mdevs("i1")
    [step] = late
    return n, vf, lambda: hand_back.finish_release(*step)


@contextlib.contextmanager
def dies_after_recording(driver, monkeypatch):
    """Inside: the releases ``driver`` records are never carried out
    (``finish_release`` does nothing); after: its process is dead, as
    far as the records tell (its carrier's lock let go)."""
    from vgpu_driver.service import hand_back

    with monkeypatch.context() as patched:
        patched.setattr(hand_back, "finish_release", lambda *a: None)
        yield
    driver.binder.ledger.carrier.let_go()


def card_full(address: str, number: int) -> None:
    """A ``set_vf_type`` the card refuses: no room left for the type."""
    raise DeviceNoRoom(f"Cannot set vGPU type {number} on {address}: full")
