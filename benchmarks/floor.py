"""What a refresh after one change cannot do without, beside what it
costs: issue 24's 2x goal against the host's own answer.

For the guest and mdev rows of :mod:`benchmarks.churn` (the same hosts,
the same changes, records on), each repetition times, in turn:

* **after**: the refresh after the change (the library as a service
  runs it);
* **idle**: the refresh after that one, nothing changed;
* **bare**: the least any implementation must ask libvirt after that
  change, with no code of this library: the changed device looked up
  and its XML read, and for an mdev its parent's too (its
  ``availableInstances`` moved, and on NVIDIA every other type's with
  it). A device gone costs its failed lookup. The same calls on the
  same connection, after the same change; reading what the XML says is
  left to the implementation (the library reads a domain's devices
  without parsing the whole document). The mdev calls are those
  :mod:`vgpu_driver.sim.mdev_libvirt` answers as libvirt would (the test
  driver cannot make node devices), in the after and bare figures
  alike.

and prints per row: the three, the ratio after/idle now, the least
ratio any implementation could reach ((idle + bare) / idle), and
**room**: the µs a refresh at 2x an idle one leaves for everything that
is not libvirt's answer (idle - bare): deciding what changed, taking it
into the binder's view and the mdevs seen, planning the parent's
provider again and writing what changed. **parse**: what of the room
the library's own parsers of that XML take (its regular-shape readers,
``parse_guest``, ``parse_mdev``, ``read_parent``); **left**: what is
then left for all the rest.

    .venv/bin/python -m benchmarks.floor [--quick] [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.changes import another_manager, guest_host, modelled
from benchmarks.common import machine, spread
from benchmarks.service import Service
from vgpu_driver.host.domain_xml import parse_guest
from vgpu_driver.host.nodedev_xml import parse_mdev, read_parent

SHAPES = [(1, 16, 16), (4, 128, 128), (16, 512, 512), (64, 2048, 2048)]
RUNS = [60]  # repetitions of each change (--runs); cheap, so many
# the change, made outside the timing; the bare reading after it (the
# XML it read, as (parser, text)); the library's parser of each
Read = list[tuple[Callable[[str], object], str]]
Case = tuple[Callable[[int], None], Callable[[int], Read]]


def cpu_ms(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return (time.process_time() - start) * 1000


def looked_up(lookup: Callable[[str], Any], name: str) -> Any | None:
    """``lookup(name)``, or None where libvirt has no such device (the
    error a refresh also pays for a device gone)."""
    import libvirt

    try:
        return lookup(name)
    except libvirt.libvirtError:
        return None


def read_xml(found: Any | None) -> str | None:
    return None if found is None else str(found.XMLDesc(0))


def bare_then_parsed(
    bare: Callable[[int], Read], step: int
) -> tuple[float, float]:
    """CPU ms of the bare reading after change ``step``, then of the
    library's parsers of what it read (none where it read nothing: the
    clock's own reads are no parse)."""
    texts: Read = []
    read = cpu_ms(lambda: texts.extend(bare(step)))
    if not texts:
        return read, 0.0
    return read, cpu_ms(lambda: [parse(text) for parse, text in texts])


def timings(service: Service, case: Case) -> dict[str, list[list[float]]]:
    """CPU ms of each refresh after a change, the idle one after it and
    the bare reading, split by the change's half (0: gone or made, 1:
    back or removed)."""
    change, bare = case

    def refresh() -> None:
        service.driver.update_provider_tree(service.tree, "bench")

    found: dict[str, list[list[float]]] = {
        kind: [[], []] for kind in ("after", "idle", "bare", "parse")
    }
    for step in range(2 * RUNS[0]):
        change(step)
        half = step % 2
        found["after"][half].append(cpu_ms(refresh))
        found["idle"][half].append(cpu_ms(refresh))
        bare_ms, parse_ms = bare_then_parsed(bare, step)
        found["bare"][half].append(bare_ms)
        found["parse"][half].append(parse_ms)
    return found


def guest_case(shape: tuple[int, int, int], tmp: Path) -> tuple[Service, Case]:
    """One guest stopped and undefined, then defined again, told through
    ``domain_event`` (the change of :func:`benchmarks.changes.
    guest_churn`)."""
    _uri, service, change = guest_host(shape, tmp)
    conn, guest = service.conn, service.guests[0]

    def bare(_step: int) -> Read:
        text = read_xml(looked_up(conn.lookupByUUIDString, guest))
        return [] if text is None else [(parse_guest, text)]

    return service, (change, bare)


def mdev_case(shape: tuple[int, int, int], tmp: Path) -> tuple[Service, Case]:
    """One mdev another manager makes on the first pGPU through libvirt,
    then removes (as :func:`benchmarks.changes.mdev_churn`)."""
    _uri, conn, service = modelled(shape, tmp, None)
    parent = service.driver.discover().parents[0]
    made: list[str] = []

    change = another_manager(conn, parent, made)
    gone: list[str] = []

    def bare(step: int) -> Read:
        name = made[-1] if step % 2 == 0 else gone[-1]
        mdev = read_xml(looked_up(conn.nodeDeviceLookupByName, name))
        texts: Read = [
            (
                read_parent,
                str(read_xml(conn.nodeDeviceLookupByName(parent.name))),
            )
        ]
        return texts if mdev is None else [(parse_mdev, mdev), *texts]

    def change_noted(step: int) -> None:
        if step % 2 == 1:
            gone.append(made[-1])
        change(step)

    return service, (change_noted, bare)


KINDS = {
    ("guest gone", "guest back"): guest_case,
    ("mdev made", "mdev gone"): mdev_case,
}


def row(label: str, found: dict[str, list[list[float]]], half: int) -> str:
    after, idle, bare = (found[k][half] for k in ("after", "idle", "bare"))
    a, i, b, p = map(
        statistics.median, (after, idle, bare, found["parse"][half])
    )
    room = (i - b) * 1000
    return (
        f"{label:>24} | {spread(after):>17} {spread(idle):>17} "
        f"{spread(bare):>17} | {a / i:>6.2f}x {(i + b) / i:>6.2f}x "
        f"{room:>+7.0f} {p * 1000:>6.0f} {room - p * 1000:>+6.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=RUNS[0])
    args = parser.parse_args()
    RUNS[0] = args.runs
    shapes = SHAPES[:2] if args.quick else SHAPES
    print(machine())
    print(
        "CPU ms min/median/max, records on, libvirt's test driver in "
        "process: the refresh after one change, the idle refresh after "
        "it, the bare reading of that change (no code of this library); "
        "the ratio now, the least any implementation could reach, the µs "
        "a 2x refresh leaves for all but libvirt's answer, what the "
        "library's parsers take of that XML, and what is left (medians)"
    )
    print(
        f"{'case':>24} | {'after':>17} {'idle':>17} {'bare':>17} | "
        f"{'now':>7} {'least':>7} {'room µs':>7} {'parse':>6} {'left':>6}"
    )
    for kinds, make in KINDS.items():
        for shape in shapes:
            with tempfile.TemporaryDirectory() as tmp:
                service, case = make(shape, Path(tmp))
                found = timings(service, case)
            label = "/".join(map(str, shape))
            for half, kind in enumerate(kinds):
                print(row(f"{kind} {label}", found, half), flush=True)


if __name__ == "__main__":
    main()
