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
  both figures, as libvirt's are in the guest rows;
* **records written** (libvirt's test driver, dense mdev hosts):
  another process (``restore``, ``audit --fix``) writes the records, the
  host unchanged, then a refresh: it reads every guest again, once
  (:mod:`benchmarks.other_process`). One kind of change: every
  refresh after one is in the row.

The guest, spawn+make and mdev rows run at 64/2048/2048 and
64/4096/4096 too (but with ``--quick``): the sizes at which issue 24
found what a change adds growing with the mdevs and guests.

Each change is made outside the timing; the refresh after it is timed,
then an idle refresh of the same service (the ratio is to that one).
The two halves of each case (gone and back, typed and cleared, made and
gone) cost differently and are printed apart: the median of both
together would land between them, on whichever the sample favours.
``libvirt``: what of the refresh after the change libvirt's calls took
(the test driver formatting a domain's or a node device's XML, in C;
the modelled mdev calls): the part of what a change adds that is not
this library's. Nova beside: its periodic on the same host. In the
guest rows it reads no guest, so a change costs it nothing more: its
periodic is timed on the host as it is. In the mdev rows it runs on
the same modelled connection, after each of the same changes, in a
loop of its own: it lists and reads the mdev another manager made, as
it would on a host.

``--daemon``: the guest, spawn and mdev rows alone, on the same hosts served
by this machine's ``libvirtd`` over its UNIX socket, as a compute service's
libvirt is (every call a round trip; in process a test-driver call
costs about what a Python call does, which makes a guest's one more
call weigh more than it does on a host). CPU is the caller's; the wall
ratio is printed beside it.

``--cold``: every refresh timed (the one after the change, the idle one,
Nova's) with the CPU's caches emptied first (:mod:`benchmarks.caches`),
as a periodic task a minute after the last finds them. Back to back,
the idle refresh finds the lines the refresh before it left, and what a
change adds is measured against a refresh cheaper than any a service
runs.

    tools/nova-venv python -m benchmarks.churn [--quick] [--daemon] [--cold]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.changes import (
    COLD,
    RUNS,
    guest_churn,
    mdev_churn,
    spawn_churn,
    vf_churn,
)
from benchmarks.common import libvirt_daemon, machine, spread
from benchmarks.other_process import records_churn

SHAPES = [(1, 16, 16), (4, 128, 128), (16, 512, 512)]
# the sizes issue 24 measured a guest's event and an mdev's at (its cost
# grew with the mdevs and guests): the guest and mdev rows alone
LARGE = [(64, 2048, 2048), (64, 4096, 4096)]
CARDS = [1, 4, 16]
MAKING = ("spawn+make", "delete+remove")  # the spawn rows, mdevs made
# the same, the guest deleted behind Nova's back (its event alone)
BY_EVENT = ("spawn+make", "gone+remove")
Runner = Callable[[Path], dict[str, Any]]


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
    # of the refresh after the change, what libvirt's calls took
    inside = found["libvirt"] if half is None else found["libvirt"][half::2]
    line = (
        f"{label:>24} | {spread(changed):>18} {spread(idle):>18} "
        f"{ratio:>6.2f}x {added:>+6.2f} {statistics.median(inside):>7.2f}"
        f" | {beside:>20}"
    )
    if "changed_wall" in found and half is not None:
        wall = statistics.median(found["changed_wall"][half::2])
        line += f" | {wall / statistics.median(found['idle_wall']):>6.2f}x"
    return line


def over_daemon(shapes: list[tuple[int, int, int]]) -> list[str]:
    """The guest, spawn and mdev rows, the hosts served by this
    machine's libvirtd; the calls rows of the spawns, to print after."""
    print("libvirt: test-driver hosts served by libvirtd (UNIX socket)")
    spawns: list[str] = []
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
                    if "calls" in found:
                        spawns.append(
                            calls_row(f"{kind} {label}", found, half)
                        )
    return spawns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=RUNS[0])
    parser.add_argument(
        "--cold",
        action="store_true",
        help="every refresh timed with the CPU's caches emptied first",
    )
    parser.add_argument(
        "--daemon",
        action="store_true",
        help="the guest, spawn and mdev rows, served by this machine's "
        "libvirtd",
    )
    args = parser.parse_args()
    RUNS[0] = args.runs
    COLD[0] = args.cold
    shapes = SHAPES[:2] if args.quick else SHAPES
    large = [] if args.quick else LARGE
    cards = CARDS[:2] if args.quick else CARDS
    print(machine())
    print(
        "CPU ms min/median/max of the refresh after one change, of the "
        "idle refresh after it, their ratio, the ms the change adds and "
        "the ms libvirt's calls took in the refresh after it (medians); "
        "Nova's periodic on the same host beside"
        + (
            "; every refresh with the caches emptied first"
            if args.cold
            else ""
        )
    )
    print(
        f"{'case':>24} | {'after change':>18} {'idle':>18} {'ratio':>7} "
        f"{'added':>6} {'libvirt':>7} | {'nova periodic':>20}"
        + (f" | {'wall ratio':>7}" if args.daemon else "")
    )
    if args.daemon:
        print_calls(over_daemon(shapes))
        return
    # (the two kinds of change of a case, the host, how to run it)
    cases: list[tuple[tuple[str, ...], str, Runner]] = []
    for shape in shapes + large:
        label = "/".join(map(str, shape))
        cases.append(
            (("guest gone", "guest back"), label, partial(guest_churn, shape))
        )
    for shape in shapes:
        label = "/".join(map(str, shape))
        cases.append((("spawn", "delete"), label, partial(spawn_churn, shape)))
    for shape in shapes + large:
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
    for shape in shapes + large:
        label = "/".join(map(str, shape))
        cases.append(
            (("mdev made", "mdev gone"), label, partial(mdev_churn, shape))
        )
    for shape in shapes + large:
        label = "/".join(map(str, shape))
        cases.append(
            (("records written",), label, partial(records_churn, shape))
        )
    spawns: list[str] = []
    for kinds, label, run in cases:
        with tempfile.TemporaryDirectory() as tmp:
            found = run(Path(tmp))
        if len(kinds) == 1:  # one kind of change: every refresh after one
            print(row(f"{kinds[0]} {label}", found), flush=True)
            continue
        for half, kind in enumerate(kinds):
            print(row(f"{kind} {label}", found, half), flush=True)
            if "calls" in found:
                spawns.append(calls_row(f"{kind} {label}", found, half))
    print(
        "Nova beside the VF rows: none (its libvirt driver reports no vGPU "
        "on vendor-VFIO SR-IOV cards)"
    )
    print_calls(spawns)


def print_calls(spawns: list[str]) -> None:
    """The calls table: the library's own calls of each spawn and
    delete (see :func:`calls_row`)."""
    print(
        "the library's own calls of each spawn (allocate_mdevs, "
        "domain_event, guest_defined) and delete (domain_event, "
        "guest_undefined, release_mdevs; gone: domain_event alone), libvirt's "
        "define and undefine taken off: CPU and wall ms min/median/max, "
        "flushes to disk (fsync, fdatasync) and the CPU ms libvirt's calls "
        "took in them (the mdev made or removed; medians); Nova's spawn "
        "scans every guest (benchmarks.nova_compare, 'Nova per spawn')"
    )
    print(
        f"{'case':>24} | {'calls cpu':>18} {'calls wall':>18} "
        f"{'flushes':>7} {'libvirt':>7}"
    )
    for line in spawns:
        print(line)


def calls_row(label: str, found: dict[str, Any], half: int) -> str:
    """The library's calls of the change ``half`` (0: the spawns, 1: the
    deletes)."""
    calls = found["calls"][half::2]
    cpu, wall, flushes, inside = zip(*calls, strict=True)
    return (
        f"{label:>24} | {spread(cpu):>18} {spread(wall):>18} "
        f"{statistics.median(flushes):>7g} {statistics.median(inside):>7.2f}"
    )


if __name__ == "__main__":
    main()
