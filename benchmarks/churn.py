"""Refreshes on a host that changes, beside an idle refresh of the same
service (records on, as a service runs it).

* **guest gone / back** (libvirt's test driver, dense mdev hosts): one
  guest stopped and undefined (as Nova deletes one), told through
  ``domain_event``, then a refresh; then defined again and a refresh.
  Both are real changes: its mdev is free, then in use again;
* **spawn / delete** (libvirt's test driver, dense mdev hosts): an
  instance spawned as Nova's integration does it (``allocate_mdevs`` on
  a pGPU's provider, a free mdev reused; its guest defined, told through
  ``domain_event`` and ``guest_defined``), then a refresh; deleted again
  (undefined, told, ``guest_undefined`` and ``release_mdevs``), then a
  refresh. The change every compute host sees most;
* **spawn, mdev made / delete, mdev removed** (the same, on hosts with
  no free mdev and ``remove_unused_mdevs``): each bind makes its mdev,
  each release removes it: a node device and a guest changed between
  two refreshes, as on a host filling up;
* **gone, mdev removed** (the same hosts): the guest of the spawn
  above deleted behind Nova's back, told by its event alone: the
  refresh lets go of its mdev and removes it (two durable writes of the
  records, the decision before the host is touched, and libvirt's
  calls), then reads the host again; one parent is planned. (Its
  spawn half is printed again beside it.)
* **VF typed / cleared** (libvirt's test driver, L40 SR-IOV hosts): one
  free VF given the enabled type in sysfs (by another manager), then a
  refresh; cleared again, then a refresh;
* **mdev made / gone** (libvirt's test driver, dense mdev hosts): one
  mdev another manager makes on a pGPU through libvirt's API (as
  ``mdevctl`` or libvirt >= 7.3 does), then a refresh; removed, then a
  refresh. The test driver cannot make node devices, so
  :mod:`vgpu_driver.sim.mdev_libvirt` answers those calls as libvirt and
  the kernel do (the mdev listed and looked up, its directory in sysfs,
  its parent's ``availableInstances``); the adapter reads the rest from
  the test driver, as it reads the guests' hosts. Its answers are in
  both figures, as libvirt's are in the guest rows.

Each change is made outside the timing; the refresh after it is timed,
then an idle refresh of the same service (the ratio is to that one).
The two halves of each case (gone and back, typed and cleared, made and
gone) cost differently and are printed apart: the median of both
together would land between them, on whichever the sample favours.
Nova beside: its periodic on the same host. In the guest rows it reads
no guest, so a change costs it nothing more: its periodic is timed on
the host as it is. In the mdev rows it runs on the same modelled
connection, after each of the same changes, in a loop of its own: it
lists and reads the mdev another manager made, as it would on a host.

``--daemon``: the guest, spawn and mdev rows alone, on the same hosts served
by this machine's ``libvirtd`` over its UNIX socket, as a compute service's
libvirt is (every call a round trip; in process a test-driver call
costs about what a Python call does, which makes a guest's one more
call weigh more than it does on a host). CPU is the caller's; the wall
ratio is printed beside it.

    tools/nova-venv python -m benchmarks.churn [--quick] [--daemon]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import (
    conf_for,
    dense,
    libvirt_daemon,
    machine,
    readable_by_daemon,
    sriov,
)
from benchmarks.nova_compare import Nova, timed
from benchmarks.service import FREE, Service
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim import guest_xml
from vgpu_driver.sim.mdev_libvirt import MdevConnection, mdev_xml
from vgpu_driver.sim.specs import GuestSpec

SHAPES = [(1, 16, 16), (4, 128, 128), (16, 512, 512)]
CARDS = [1, 4, 16]
RUNS = [15]  # repetitions of each change (--runs)
MAKING = ("spawn+make", "delete+remove")  # the spawn rows, mdevs made
# the same, the guest deleted behind Nova's back (its event alone)
BY_EVENT = ("spawn+make", "gone+remove")
# wall ms of the last pairs() run: after each change, then idle, in turn
WALL: list[float] = []
Runner = Callable[[Path], dict[str, Any]]


def spread(values: list[float]) -> str:
    return (
        f"{min(values):.2f}/{statistics.median(values):.2f}/{max(values):.2f}"
    )


def pairs(
    change: Callable[[int], None], refresh: Callable[[], Any]
) -> tuple[list[float], list[float]]:
    """(CPU ms of the refresh after each change, of the idle one after);
    their wall ms go to ``WALL``."""
    changed, idle = [], []
    WALL.clear()
    for step in range(2 * RUNS[0]):
        change(step)
        for times in (changed, idle):
            cpu, wall = timed(refresh)
            times.append(cpu)
            WALL.append(wall)
    return changed, idle


def walls() -> dict[str, list[float]]:
    """The wall ms of the last :func:`pairs` run, after each change and
    idle."""
    return {"changed_wall": WALL[0::2], "idle_wall": WALL[1::2]}


def guest_churn(
    shape: tuple[int, int, int],
    tmp: Path,
    remote: Callable[[str], str] | None = None,
) -> dict[str, Any]:
    """``remote``: served by a daemon, at the URI it gives."""
    description = dense(shape[0], shape[1] + FREE, shape[2])
    uri, sysfs = hostdesc.materialize(description, tmp)
    if remote is not None:
        readable_by_daemon(tmp)
        uri = remote(uri)
    service = Service(uri, sysfs, conf_for(description.config, tmp), tmp)
    guest = service.guests[0]
    xml = service.conn.lookupByUUIDString(guest).XMLDesc(0)

    def change(step: int) -> None:
        if step % 2 == 0:
            guest_xml.delete(service.conn.lookupByUUIDString(guest))
        else:
            service.conn.defineXML(xml)
        service.driver.domain_event(guest, step % 2 == 1)

    changed, idle = pairs(change, service.idle)
    wall = walls() if remote is not None else {}
    return {"changed": changed, "idle": idle, "nova": nova_idle(uri), **wall}


def modelled(
    shape: tuple[int, int, int],
    tmp: Path,
    remote: Callable[[str], str] | None,
    making: bool = False,
) -> tuple[str, MdevConnection, Service]:
    """A dense host on a connection that makes and removes mdevs as
    libvirt and the kernel do (:class:`~vgpu_driver.sim.mdev_libvirt.
    MdevConnection`; served by a daemon at the URI ``remote`` gives),
    and this library on it as a service runs it. ``making``: no free
    mdev, unused ones removed (each bind makes its mdev)."""
    description = dense(shape[0], shape[1] + (0 if making else FREE), shape[2])
    uri, sysfs = hostdesc.materialize(description, tmp)
    if remote is not None:
        readable_by_daemon(tmp)
        uri = remote(uri)
    conn = MdevConnection(uri, description, sysfs=Path(sysfs))
    conf = conf_for(description.config, tmp)
    if making:
        conf.set_override("remove_unused_mdevs", True, "devices")
    return uri, conn, Service(uri, sysfs, conf, tmp, conn=conn)


def spawn_churn(
    shape: tuple[int, int, int],
    tmp: Path,
    remote: Callable[[str], str] | None = None,
    making: bool = False,
    by_event: bool = False,
) -> dict[str, Any]:
    """Nova's own change: an instance spawned (its devices bound, its
    guest defined) and deleted, through the calls the Nova integration
    makes, on the modelled connection (a bind finding no free mdev makes
    one; ``making``: none waits, and a release removes it). ``by_event``:
    the guest deleted behind Nova's back instead, told by its event
    alone (the refresh lets go of its mdev, and removes it when
    ``making``). ``remote``: served by a daemon, at the URI it gives."""
    uri, conn, service = modelled(shape, tmp, remote, making)
    driver, tree = service.driver, service.tree
    instance = str(uuid.uuid4())
    # the devices each spawn was given, and the free mdevs after each
    # refresh timed: the refreshes followed real spawns and deletes
    bound: list[list[str]] = []
    free_after: list[int] = []

    def change(step: int) -> None:
        if step:
            free_after.append(len(driver.free_mdevs()))
        if step % 2 == 0:
            free = next(p for p in driver.last_plans if p.total > p.reserved)
            wanted = {tree.data(free.name).uuid: {"resources": {"VGPU": 1}}}
            devices = [d.id for d in driver.allocate_mdevs(instance, wanted)]
            bound.append(devices)
            spec = GuestSpec(uuid=instance, name="spawned", mdevs=devices)
            conn.defineXML(guest_xml.render_guest(spec))
            driver.domain_event(instance, True)
            driver.guest_defined(instance)
        else:
            guest_xml.delete(conn.lookupByUUIDString(instance))
            driver.domain_event(instance, False)
            if not by_event:
                driver.guest_undefined(instance)
                driver.release_mdevs(instance)

    changed, idle = pairs(change, service.idle)
    free_after.append(len(driver.free_mdevs()))
    wall = walls() if remote is not None else {}
    return {
        "changed": changed,
        "idle": idle,
        **wall,
        "nova": nova_idle(uri),
        "bound": bound,
        "free": free_after,
    }


def vf_churn(cards: int, tmp: Path) -> dict[str, Any]:
    description = sriov(cards)
    uri, sysfs = hostdesc.materialize(description, tmp)
    service = Service(uri, sysfs, conf_for(description.config, tmp), tmp)
    vf = description.pfs[0].vf_addresses[-1]  # a free VF
    path = Path(sysfs) / "bus/pci/devices" / vf / "nvidia/current_vgpu_type"

    def change(step: int) -> None:
        path.write_text("1157\n" if step % 2 == 0 else "0\n")

    changed, idle = pairs(change, service.idle)
    # Nova's libvirt driver reports no vGPU on these cards (vendor VFIO
    # VFs have no mdev type): nothing to time beside
    return {"changed": changed, "idle": idle, "nova": None}


def mdev_churn(
    shape: tuple[int, int, int],
    tmp: Path,
    remote: Callable[[str], str] | None = None,
) -> dict[str, Any]:
    """An mdev another manager makes on the first pGPU, then removes,
    through libvirt's API as ``mdevctl`` or libvirt >= 7.3 would: the
    test driver cannot, so :class:`~vgpu_driver.sim.mdev_libvirt.
    MdevConnection` answers those calls as libvirt and the kernel do
    (its sysfs directory, its parent's room) and the adapter reads the
    rest from the test driver."""
    uri, conn, service = modelled(shape, tmp, remote)
    parent = service.driver.discover().parents[0]
    made: list[str] = []
    # the first pGPU's reserved units after each change (another
    # manager's free mdevs are reserved): the refreshes saw real changes
    reserved: list[int] = []

    def reserved_now() -> int:
        plans = service.driver.last_plans
        return sum(p.reserved for p in plans if p.device == parent.name)

    def make(step: int) -> None:
        if step % 2 == 0:
            xml = mdev_xml(parent.name, parent.types[0].id, str(uuid.uuid4()))
            made.append(conn.nodeDeviceCreateXML(xml, 0).name())
        else:
            conn.gone.add(made.pop())

    def change(step: int) -> None:
        if step:
            reserved.append(reserved_now())
        make(step)

    changed, idle = pairs(change, service.idle)
    reserved.append(reserved_now())
    wall = walls() if remote is not None else {}
    nova = nova_after(uri, conn, make)
    return {
        "changed": changed,
        "idle": idle,
        "nova": nova[0] if nova else None,
        **wall,
        "reserved": reserved,
        "nova_listed": nova[1] if nova else [],
    }


def nova_after(
    uri: str, conn: MdevConnection, make: Callable[[int], None]
) -> tuple[list[float], list[int]] | None:
    """Nova's periodic after each of the same changes, on the same
    modelled connection (it lists and reads the mdevs another manager
    makes, as on a host), and the mdevs it listed then. Timed in a loop
    of its own: run between the service's refreshes, it left them a
    cold cache that an idle refresh, timed right after, did not pay."""
    try:
        nova = Nova(uri, conn)
    except ImportError:
        return None
    times, listed = [], []
    for step in range(2 * RUNS[0]):
        make(step)
        times.append(nova.periodic()[0])
        listed.append(len(nova.driver._host.list_mediated_devices()))
    return times, listed


def nova_idle(uri: str) -> list[float] | None:
    try:
        nova = Nova(uri)
    except ImportError:
        return None
    return [nova.periodic()[0] for _ in range(RUNS[0])]


def row(label: str, found: dict[str, Any], half: int | None = None) -> str:
    """One printed row; ``half``: the refreshes after the first kind of
    change of the case (0: gone, typed, made) or the second (1), not
    both."""
    changed, idle, nova = found["changed"], found["idle"], found["nova"]
    if half is not None:
        changed = changed[half::2]
    ratio = statistics.median(changed) / statistics.median(idle)
    # what the change adds to an idle refresh: flat if the change costs
    # what it touches, not what the host holds
    added = statistics.median(changed) - statistics.median(idle)
    beside = spread(nova) if nova else "-"
    line = (
        f"{label:>24} | {spread(changed):>18} {spread(idle):>18} "
        f"{ratio:>6.2f}x {added:>+6.2f} | {beside:>20}"
    )
    if "changed_wall" in found and half is not None:
        wall = statistics.median(found["changed_wall"][half::2])
        line += f" | {wall / statistics.median(found['idle_wall']):>6.2f}x"
    return line


def over_daemon(shapes: list[tuple[int, int, int]]) -> None:
    """The guest, spawn and mdev rows, the hosts served by this
    machine's libvirtd."""
    print("libvirt: test-driver hosts served by libvirtd (UNIX socket)")
    with (
        tempfile.TemporaryDirectory() as top,
        libvirt_daemon(Path(top)) as remote,
    ):
        for kinds, run in (
            (("guest gone", "guest back"), guest_churn),
            (("spawn", "delete"), spawn_churn),
            (MAKING, partial(spawn_churn, making=True)),
            (BY_EVENT, partial(spawn_churn, making=True, by_event=True)),
            (("mdev made", "mdev gone"), mdev_churn),
        ):
            for shape in shapes:
                with tempfile.TemporaryDirectory(dir=top) as tmp:
                    found = run(shape, Path(tmp), remote)
                label = "/".join(map(str, shape))
                for half, kind in enumerate(kinds):
                    print(row(f"{kind} {label}", found, half), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=RUNS[0])
    parser.add_argument(
        "--daemon",
        action="store_true",
        help="the guest, spawn and mdev rows, served by this machine's "
        "libvirtd",
    )
    args = parser.parse_args()
    RUNS[0] = args.runs
    shapes = SHAPES[:2] if args.quick else SHAPES
    cards = CARDS[:2] if args.quick else CARDS
    print(machine())
    print(
        "CPU ms min/median/max of the refresh after one change, of the "
        "idle refresh after it, their ratio and the ms the change adds "
        "(medians); Nova's periodic on the same host beside"
    )
    print(
        f"{'case':>24} | {'after change':>18} {'idle':>18} {'ratio':>7} "
        f"{'added':>6} | {'nova periodic':>20}"
        + (f" | {'wall ratio':>7}" if args.daemon else "")
    )
    if args.daemon:
        over_daemon(shapes)
        return
    # (the two kinds of change of a case, the host, how to run it)
    cases: list[tuple[tuple[str, str], str, Runner]] = []
    for shape in shapes:
        label = "/".join(map(str, shape))
        cases.append(
            (("guest gone", "guest back"), label, partial(guest_churn, shape))
        )
    for shape in shapes:
        label = "/".join(map(str, shape))
        cases.append((("spawn", "delete"), label, partial(spawn_churn, shape)))
    for shape in shapes:
        label = "/".join(map(str, shape))
        making = partial(spawn_churn, shape, making=True)
        cases.append((MAKING, label, making))
    for shape in shapes:
        label = "/".join(map(str, shape))
        by_event = partial(spawn_churn, shape, making=True, by_event=True)
        cases.append((BY_EVENT, label, by_event))
    for n in cards:
        cases.append(
            (("VF typed", "VF cleared"), f"{n}x32", partial(vf_churn, n))
        )
    for shape in shapes:
        label = "/".join(map(str, shape))
        cases.append(
            (("mdev made", "mdev gone"), label, partial(mdev_churn, shape))
        )
    for kinds, label, run in cases:
        with tempfile.TemporaryDirectory() as tmp:
            found = run(Path(tmp))
        for half, kind in enumerate(kinds):
            print(row(f"{kind} {label}", found, half), flush=True)
    print(
        "Nova beside the VF rows: none (its libvirt driver reports no vGPU "
        "on vendor-VFIO SR-IOV cards)"
    )


if __name__ == "__main__":
    main()
