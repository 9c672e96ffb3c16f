"""Two versions of the library timed in turn on this machine.

This VM's medians move by up to 2x between runs and between hours, for
any code: a figure of one commit beside one taken earlier of another
says more of the machine than of the code. This times both versions in
the same minutes, round after round (A then B, then B then A, ...), each
round a new process per version, on one simulated host made once by the
work tree's simulator and with the work tree's ``benchmarks/``: only the
``vgpu_driver`` package differs, taken from each version with ``git
archive`` (the work tree itself for ``.``; a directory holding a
``vgpu_driver`` as it is, for a change tried out). It prints each round's
medians (CPU ms) and the ratio B/A of the medians of the rounds'
medians, with the least and the most of the rounds' ratios::

    .venv/bin/python tools/ab.py 9680102 . --case start --host 1/16/16

Cases, as ``benchmarks/service.py`` times them: ``start`` (a restart:
``init_host`` and the first refresh, on its own connection and the
providers as Placement holds them), ``idle`` (a steady refresh),
``guest`` (the refresh after one guest undefined and defined again,
told as events), ``mdev`` (the refresh after another manager made an
mdev on the first pGPU through libvirt's API, or removed it, as
``benchmarks/churn.py`` times it: on a host of its own, made alike in
each round's process), and ``restart`` (a start as ``benchmarks/
restart.py`` times it: each timing a new process, on a copy of the
records a service left; ``start`` runs many in one process, so what a
process pays once, a regular expression compiled at its first use,
shows only there). What a new process pays once depends on what it
imported: ``tools/nova-venv python tools/ab.py ... --case restart``
times it with the modules Nova's virtualenv brings, as
``benchmarks/restart.py`` does (a first ``isinstance`` against
``Mapping`` walks more subclasses there). A version whose package the
work tree's benchmarks cannot drive (an older API) fails its round with
its traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CASES = ("start", "idle", "guest", "mdev", "restart")


def _run(command: list[str], **kwargs: Any) -> Any:
    """``command`` run, its output kept, its status left to the caller."""
    return subprocess.run(command, capture_output=True, check=False, **kwargs)


def package(version: str, into: Path) -> Path:
    """A directory holding ``vgpu_driver`` as ``version`` has it (a
    directory holding one already: itself)."""
    if version == ".":
        return ROOT
    if (Path(version) / "vgpu_driver" / "__init__.py").is_file():
        return Path(version).resolve()
    into.mkdir(parents=True)
    archive = _run(["git", "archive", version, "vgpu_driver"], cwd=ROOT)
    if archive.returncode != 0:
        raise SystemExit(
            f"ab: no version {version!r} in this repository: "
            f"{archive.stderr.decode(errors='replace').strip()}"
        )
    subprocess.run(
        ["tar", "-x", "-C", str(into)], input=archive.stdout, check=True
    )
    return into


def host(shape: str, where: Path) -> dict[str, str]:
    """The simulated host, made once (as ``benchmarks/service.py`` makes
    it: every mdev in use by a guest, 8 free)."""
    from benchmarks.common import dense
    from benchmarks.service import FREE
    from vgpu_driver.sim import description as hostdesc

    parents, mdevs, guests = (int(n) for n in shape.split("/"))
    description = dense(parents, mdevs + FREE, guests)
    uri, sysfs = hostdesc.materialize(description, where)
    return {
        "uri": uri,
        "sysfs": str(sysfs),
        "config": description.config,
        "shape": shape,
    }


def restarted_host(shape: str, where: Path) -> dict[str, Any]:
    """The host with a service of the work tree's package run on it once,
    its records and providers written (as ``benchmarks/restart.py``
    makes it)."""
    from benchmarks.restart import host as service_ran

    parents, mdevs, guests = (int(n) for n in shape.split("/"))
    return {**service_ran((parents, mdevs, guests), where), "shape": shape}


def child(
    case: str, runs: int, made: dict[str, Any], state: Path
) -> list[float]:
    """In a process of its own: ``runs`` timings of ``case`` (CPU ms),
    after a few untimed ones."""
    from benchmarks.common import conf_for
    from benchmarks.service import Service

    if case == "mdev":
        return _mdev_made_or_gone(runs, made["shape"], state)
    if case == "restart":
        return [_restarted(made, state)]
    conf = conf_for(made["config"], state)
    service = Service(made["uri"], Path(made["sysfs"]), conf, state)
    timer = {
        "start": service.start,
        "idle": service.idle,
        "guest": service.guest_event,
    }[case]
    for _ in range(3):
        timer()
    return [timer()[0] for _ in range(runs)]


def _mdev_made_or_gone(runs: int, shape: str, state: Path) -> list[float]:
    """The refreshes after another manager's mdev made or removed, in
    turn (the modelled connection of :func:`benchmarks.changes.
    modelled` makes them; it needs a host of its own)."""
    from benchmarks.changes import another_manager, modelled

    sizes = tuple(int(n) for n in shape.split("/"))
    _uri, conn, service = modelled((sizes[0], sizes[1], sizes[2]), state, None)
    parent = service.driver.discover().parents[0]
    make = another_manager(conn, parent, [])
    times = []
    for step in range(runs + 4):
        make(step)
        times.append(service.idle()[0])
        service.idle()  # (as churn times it: an idle one between)
    return times[4:]


def _restarted(made: dict[str, Any], state: Path) -> float:
    """A start in this new process (:func:`benchmarks.restart.ours`), on
    a copy of the records the host's service left."""
    from benchmarks.restart import ours

    shutil.copytree(Path(made["tmp"]) / "vgpu-state", state / "vgpu-state")
    return ours({**made, "tmp": str(state)})["start"]


def one_round(
    source: Path, case: str, runs: int, made: dict[str, Any], tmp: Path
) -> list[float]:
    """The timings of one process running the package in ``source``
    (of ``runs`` new processes for ``restart``)."""
    if case == "restart":
        return [
            t
            for _ in range(runs)
            for t in _process(source, case, 1, made, tmp)
        ]
    return _process(source, case, runs, made, tmp)


def _process(
    source: Path, case: str, runs: int, made: dict[str, Any], tmp: Path
) -> list[float]:
    state = Path(tempfile.mkdtemp(dir=tmp))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(source), str(ROOT)])
    done = _run(
        [sys.executable, __file__, "--child", case, str(runs), str(state)],
        input=json.dumps(made),
        text=True,
        env=env,
    )
    if done.returncode != 0:
        raise SystemExit(
            f"ab: a round of {source} failed:\n{done.stderr[-3000:]}"
        )
    return [float(x) for x in json.loads(done.stdout.splitlines()[-1])]


def compare(
    a: list[list[float]], b: list[list[float]]
) -> tuple[float, float, float, float, float]:
    """(A's median of its rounds' medians, B's, B/A of those, the least
    and the most of the rounds' own B/A). A round hit by a burst of the
    machine's noise moves one median of several, not the figure."""
    ratios = [
        statistics.median(y) / statistics.median(x)
        for x, y in zip(a, b, strict=True)
    ]
    whole_a = statistics.median([statistics.median(r) for r in a])
    whole_b = statistics.median([statistics.median(r) for r in b])
    return whole_a, whole_b, whole_b / whole_a, min(ratios), max(ratios)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        case, runs, state = sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
        made = json.loads(sys.stdin.read())
        print(json.dumps(child(case, runs, made, state)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "a",
        help="a commit, . for the work tree, or a directory holding a "
        "vgpu_driver package (a change tried out)",
    )
    parser.add_argument("b", nargs="?", default=".", help="the same (.)")
    parser.add_argument("--case", choices=CASES, default="start")
    parser.add_argument("--host", default="1/16/16", help="pGPUs/mdevs/guests")
    parser.add_argument("--runs", type=int, default=30, help="per round")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        sources = {
            name: package(version, tmp / name)
            for name, version in (("a", args.a), ("b", args.b))
        }
        where = tmp / "host"
        made = (
            restarted_host(args.host, where)
            if args.case == "restart"
            else host(args.host, where)
        )
        timings: dict[str, list[list[float]]] = {"a": [], "b": []}
        print(
            f"{args.case} on {args.host}, CPU ms, medians of {args.runs} "
            f"per round: A = {args.a}, B = {args.b}"
        )
        for number in range(args.rounds):
            order = ("a", "b") if number % 2 == 0 else ("b", "a")
            for name in order:
                timings[name].append(
                    one_round(sources[name], args.case, args.runs, made, tmp)
                )
            a, b = timings["a"][-1], timings["b"][-1]
            print(
                f"round {number + 1}: A {statistics.median(a):.3f}  "
                f"B {statistics.median(b):.3f}  "
                f"B/A {statistics.median(b) / statistics.median(a):.3f}"
            )
        whole_a, whole_b, ratio, least, most = compare(
            timings["a"], timings["b"]
        )
        print(
            f"all rounds: A {whole_a:.3f}  B {whole_b:.3f}  B/A {ratio:.3f} "
            f"(rounds {least:.3f} to {most:.3f})"
        )


if __name__ == "__main__":
    main()
