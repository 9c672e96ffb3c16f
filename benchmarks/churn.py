"""Refreshes on a host that changes, beside an idle refresh of the same
service (records on, as a service runs it).

* **guest gone / back** (libvirt's test driver, dense mdev hosts): one
  guest undefined, told through ``domain_event``, then a refresh; then
  defined again and a refresh. Both are real changes: its mdev is free,
  then in use again;
* **VF typed / cleared** (libvirt's test driver, L40 SR-IOV hosts): one
  free VF given the enabled type in sysfs (by another manager), then a
  refresh; cleared again, then a refresh;
* **mdev created / removed** (the in-process simulated host: libvirt's
  test driver cannot create node devices): one mdev made on a pGPU
  outside the service, then a refresh; removed, then a refresh. The
  simulated host builds its whole reading at every call, changed or
  not (a stand-in for libvirt and the kernel, slower than the libvirt
  adapter's idle reading): its time is left out of both figures, which
  are the library's own. (Like libvirt's adapter, it says which parents
  changed; the adapter's own calls for such a change are counted by
  ``tests/unit/test_mdev_changes.py``.)

Each change is made outside the timing; the refresh after it is timed,
then an idle refresh of the same service (the ratio is to that one).
The two halves of each case (gone and back, typed and cleared, made and
gone) cost differently and are printed apart: the median of both
together would land between them, on whichever the sample favours.
Nova beside: its periodic on the same host (it reads no guest and no
mdev of anyone else, so a change costs it nothing more).

``--daemon``: the guest rows alone, on the same hosts served by this
machine's ``libvirtd`` over its UNIX socket, as a compute service's
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
import time
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
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.model.provider_tree import ProviderTree
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim.simulated import SimulatedHost

SHAPES = [(1, 16, 16), (4, 128, 128), (16, 512, 512)]
CARDS = [1, 4, 16]
RUNS = [15]  # repetitions of each change (--runs)
# wall ms of the last pairs() run: after each change, then idle, in turn
WALL: list[float] = []
Runner = Callable[[Path], dict[str, Any]]


def spread(values: list[float]) -> str:
    return (
        f"{min(values):.2f}/{statistics.median(values):.2f}/{max(values):.2f}"
    )


def pairs(
    change: Callable[[int], None],
    refresh: Callable[[], Any],
    host_share: Callable[[], float] = lambda: 0.0,
) -> tuple[list[float], list[float]]:
    """(CPU ms of the refresh after each change, of the idle one after),
    less ``host_share()``: the CPU ms the host spent answering during
    the refresh just timed. Their wall ms go to ``WALL``."""
    changed, idle = [], []
    WALL.clear()
    for step in range(2 * RUNS[0]):
        change(step)
        cpu, wall = timed(refresh)
        changed.append(cpu - host_share())
        WALL.append(wall)
        cpu, wall = timed(refresh)
        idle.append(cpu - host_share())
        WALL.append(wall)
    return changed, idle


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
            service.conn.lookupByUUIDString(guest).undefine()
        else:
            service.conn.defineXML(xml)
        service.driver.domain_event(guest, step % 2 == 1)

    changed, idle = pairs(change, service.idle)
    wall = (
        {"changed_wall": WALL[0::2], "idle_wall": WALL[1::2]}
        if remote is not None
        else {}
    )
    return {"changed": changed, "idle": idle, "nova": nova_idle(uri), **wall}


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


def mdev_churn(shape: tuple[int, int, int], tmp: Path) -> dict[str, Any]:
    description = dense(shape[0], shape[1] + FREE, shape[2])
    host = SimulatedHost(description)
    driver = VgpuDriver(conf_for(description.config, tmp), host)
    tree = ProviderTree()
    tree.new_root("bench", str(uuid.uuid4()))
    driver.init_host([g.uuid for g in description.guests])
    driver.update_provider_tree(tree, "bench")
    parent = host.discover().parents[0]
    made: list[Any] = []
    # the simulated host builds its whole reading at every discover, even
    # when nothing changed (libvirt's adapter reads the parents alone):
    # its time stands in for libvirt's and the kernel's and is left out,
    # so the figures are the library's own (both the changed and idle)
    answering = [0.0]
    discover = host.discover

    def answered(**kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return discover(**kwargs)
        finally:
            answering[0] += (time.process_time() - start) * 1000

    host.discover = answered  # type: ignore[method-assign]

    def refresh() -> None:
        answering[0] = 0.0
        driver.update_provider_tree(tree, "bench")

    def change(step: int) -> None:
        if step % 2 == 0:
            made.append(
                host.create_mdev(parent, parent.types[0].id, str(uuid.uuid4()))
            )
        else:
            host.remove_mdev(made.pop())

    changed, idle = pairs(change, refresh, lambda: answering[0])
    return {"changed": changed, "idle": idle, "nova": None}


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
    beside = spread(nova) if nova else "-"
    line = (
        f"{label:>22} | {spread(changed):>18} {spread(idle):>18} "
        f"{ratio:>6.2f}x | {beside:>20}"
    )
    if "changed_wall" in found and half is not None:
        wall = statistics.median(found["changed_wall"][half::2])
        line += f" | {wall / statistics.median(found['idle_wall']):>6.2f}x"
    return line


def guests_over_daemon(shapes: list[tuple[int, int, int]]) -> None:
    """The guest rows, the hosts served by this machine's libvirtd."""
    print("libvirt: test-driver hosts served by libvirtd (UNIX socket)")
    with (
        tempfile.TemporaryDirectory() as top,
        libvirt_daemon(Path(top)) as remote,
    ):
        for shape in shapes:
            with tempfile.TemporaryDirectory(dir=top) as tmp:
                found = guest_churn(shape, Path(tmp), remote)
            label = "/".join(map(str, shape))
            for half, kind in enumerate(("guest gone", "guest back")):
                print(row(f"{kind} {label}", found, half), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=RUNS[0])
    parser.add_argument(
        "--daemon",
        action="store_true",
        help="the guest rows alone, served by this machine's libvirtd",
    )
    args = parser.parse_args()
    RUNS[0] = args.runs
    shapes = SHAPES[:2] if args.quick else SHAPES
    cards = CARDS[:2] if args.quick else CARDS
    print(machine())
    print(
        "CPU ms min/median/max of the refresh after one change, of the "
        "idle refresh after it, their ratio (medians); Nova's periodic "
        "on the same host beside"
    )
    print(
        f"{'case':>22} | {'after change':>18} {'idle':>18} {'ratio':>7} | "
        f"{'nova periodic':>20}"
        + (f" | {'wall ratio':>7}" if args.daemon else "")
    )
    if args.daemon:
        guests_over_daemon(shapes)
        return
    # (the two kinds of change of a case, the host, how to run it)
    cases: list[tuple[tuple[str, str], str, Runner]] = []
    for shape in shapes:
        label = "/".join(map(str, shape))
        cases.append(
            (("guest gone", "guest back"), label, partial(guest_churn, shape))
        )
    for n in cards:
        cases.append(
            (("VF typed", "VF cleared"), f"{n}x32", partial(vf_churn, n))
        )
    for shape in shapes:
        label = "/".join(map(str, shape)) + "*"
        cases.append(
            (("mdev made", "mdev gone"), label, partial(mdev_churn, shape))
        )
    for kinds, label, run in cases:
        with tempfile.TemporaryDirectory() as tmp:
            found = run(Path(tmp))
        for half, kind in enumerate(kinds):
            print(row(f"{kind} {label}", found, half), flush=True)
    print(
        "* on the in-process simulated host, its own answering time left "
        "out (see the module's doc)"
    )
    print(
        "Nova beside the VF rows: none (its libvirt driver reports no vGPU "
        "on vendor-VFIO SR-IOV cards)"
    )


if __name__ == "__main__":
    main()
