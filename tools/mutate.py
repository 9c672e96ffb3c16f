"""Mutation testing: does a test fail when the code it guards is wrong?

Each mutant is the module with one small fault planted: a comparison
flipped (``==``/``!=``, ``<``/``<=``, ``in``/``not in``, ``is``/``is
not``), ``and``/``or`` swapped, a ``not`` dropped, ``+``/``-`` swapped,
an integer moved by one, a boolean constant flipped, ``min``/``max`` or
``any``/``all`` swapped, an ``if`` forced either way, a value returned
as None. Docstrings and annotations are left alone, and a fault that
leaves the source unchanged is not a mutant.

Each mutant runs the tests given (``--tests``, the module's own, first)
then the rest (``--then``, default ``tests/unit``), stopping at the first
failure, in copies of the work tree (``--workers`` at once); or, with
``--command``, that command in each copy (a suite with its own runner,
as Nova's functional tests have: ``tools/nova_functional.py``). A mutant
no test kills is printed with its line: a test is missing, or the
fault cannot change behaviour (an equivalent mutant: say so where the
sweep is noted).

    .venv/bin/python tools/mutate.py vgpu_driver/model/trait.py \\
        --tests tests/unit/test_traits_from_the_spec.py \\
        [--workers 2] [--only 12,40]

The tests are first run with no fault planted, in a copy: if they fail
there, every mutant would count as killed, so the sweep stops (exit
status 2) and prints pytest's last lines. Exit status 1 when a mutant
survived.
"""

from __future__ import annotations

import argparse
import os
import queue
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the faults, from the module beside this one (run as a script or loaded
# from its path, as its test loads it)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutants import Fault, mutants  # noqa: E402

IGNORED = shutil.ignore_patterns(
    ".git", ".venv", ".nova-venv", "__pycache__", "*_cache", "build"
)


class BaselineFailed(Exception):
    """The tests fail in a copy of the work tree with no fault planted:
    every mutant would count as killed."""


def copy_of(root: Path, copy: Path) -> None:
    """The work tree at ``copy``, as a git clone of ``root`` (tests that
    read the history, as reno's do, find it there; nothing is written to
    ``root``'s repository) with the uncommitted changes laid over; a
    plain copy where ``root`` is not a git work tree."""
    if (root / ".git").exists():
        subprocess.run(
            ["git", "clone", "-q", "--shared", str(root), str(copy)],
            check=True,
            capture_output=True,
        )
    shutil.copytree(
        root, copy, ignore=IGNORED, symlinks=True, dirs_exist_ok=True
    )


def run_tests(
    copy: Path,
    tests: list[str],
    timeout: float,
    command: list[str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """pytest on ``tests`` in ``copy``; or ``command`` there, the copy's
    packages first on ``PYTHONPATH`` (a suite run by its own runner, as
    Nova's functional tests are, imports the copy's package, not one
    installed)."""
    env = None
    if command is None:
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-x",
            "-q",
            "-p",
            "no:cacheprovider",
            *tests,
        ]
    else:
        env = {**os.environ, "PYTHONPATH": str(copy)}
    return subprocess.run(
        command, cwd=copy, capture_output=True, timeout=timeout, env=env
    )


def baseline(
    copy: Path,
    tests: list[str],
    timeout: float,
    command: list[str] | None = None,
) -> None:
    """The tests pass in ``copy`` as it is, or :class:`BaselineFailed`
    (with pytest's last lines)."""
    done = run_tests(copy, tests, timeout, command)
    if done.returncode:
        said = done.stdout + done.stderr
        tail = said.decode(errors="replace").strip().splitlines()
        raise BaselineFailed("\n".join(tail[-12:]))


def killed(
    copy: Path,
    module: str,
    text: str,
    tests: list[str],
    timeout: float,
    command: list[str] | None = None,
) -> str:
    """'killed', 'survived' or 'timeout' (counted as killed: the fault
    hung a test)."""
    path = copy / module
    original = path.read_text()
    path.write_text(text)
    try:
        done = run_tests(copy, tests, timeout, command)
        return "killed" if done.returncode else "survived"
    except subprocess.TimeoutExpired:
        return "timeout"
    finally:
        path.write_text(original)


def sweep(
    root: Path,
    module: str,
    tests: list[str],
    workers: int,
    only: set[int] | None = None,
    timeout: float = 600,
    told: Callable[[int, Fault, int, str], None] | None = None,
    lines: set[int] | None = None,
    command: list[str] | None = None,
) -> list[tuple[int, Fault, int, str]]:
    """(number, fault, line, result) of each mutant of ``module`` (those
    numbered ``only``, on ``lines``, when given); ``told``: called with
    each as it is known; ``command``: run instead of pytest."""
    source = (root / module).read_text()
    found = mutants(source)
    chosen = [
        (n, fault, text, line)
        for n, (fault, text, line) in enumerate(found)
        if (only is None or n in only) and (lines is None or line in lines)
    ]
    copies: queue.Queue[Path] = queue.Queue()
    with tempfile.TemporaryDirectory(prefix="mutate-") as top:
        # readable by other users, as the work tree is: a test runs the
        # service as one (tests/unit/test_non_root.py)
        os.chmod(top, 0o755)
        for k in range(workers):
            copy = Path(top) / f"w{k}"
            copy_of(root, copy)
            copies.put(copy)
        # a test failing with no fault planted would "kill" every mutant
        baseline(Path(top) / "w0", tests, timeout, command)

        def one(
            item: tuple[int, Fault, str, int],
        ) -> tuple[int, Fault, int, str]:
            number, fault, text, line = item
            copy = copies.get()
            try:
                return (
                    number,
                    fault,
                    line,
                    killed(copy, module, text, tests, timeout, command),
                )
            finally:
                copies.put(copy)

        results = []
        with ThreadPoolExecutor(workers) as pool:
            for result in pool.map(one, chosen):
                if told is not None:
                    told(*result)
                results.append(result)
        return results


def _ranges(text: str) -> set[int]:
    """``40-80,120`` -> {40, ..., 80, 120}."""
    found: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        found.update(range(int(first), int(last or first) + 1))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("module", help="a path under the work tree")
    parser.add_argument(
        "--tests", nargs="*", default=[], help="the module's own tests"
    )
    parser.add_argument(
        "--then", nargs="*", default=["tests/unit"], help="the rest"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--only", help="mutant numbers, comma separated (from a sweep)"
    )
    parser.add_argument(
        "--lines", help="line ranges, as 40-80,120 (the code changed)"
    )
    parser.add_argument(
        "--command",
        help="run this in each copy instead of pytest, the copy first on "
        "PYTHONPATH (its exit status judges), e.g. Nova's functional suite: "
        "'.nova-venv/bin/python tools/nova_functional.py' (a relative "
        "first word is taken from the work tree)",
    )
    parser.add_argument(
        "--timeout", type=float, default=600, help="seconds per run"
    )
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    only = {int(n) for n in args.only.split(",")} if args.only else None
    wanted = _ranges(args.lines) if args.lines else None
    lines = (args.root / args.module).read_text().splitlines()
    started = time.monotonic()
    command = shlex.split(args.command) if args.command else None
    if command and not os.path.isabs(command[0]) and "/" in command[0]:
        command[0] = str(args.root / command[0])

    def told(number: int, fault: Fault, line: int, result: str) -> None:
        if result == "survived":
            text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
            print(f"survived #{number} line {line} {fault.kind}: {text}")
            sys.stdout.flush()

    try:
        results = sweep(
            args.root,
            args.module,
            [*args.tests, *args.then],
            max(1, args.workers),
            only,
            timeout=args.timeout,
            told=told,
            lines=wanted,
            command=command,
        )
    except BaselineFailed as exc:
        print(
            "the tests fail with no fault planted, in a copy of the work "
            f"tree: no mutant can be judged; fix them first\n{exc}"
        )
        return 2
    survived = [r for r in results if r[3] == "survived"]
    print(
        f"{args.module}: {len(results) - len(survived)} of {len(results)} "
        f"mutants killed in {time.monotonic() - started:.0f} s"
    )
    return 1 if survived else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
