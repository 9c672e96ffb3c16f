"""A watchdog for tools/nova_functional.py: a test that hangs ends the
run with the stacks that show why, instead of stalling CI.

It runs on an OS thread even where eventlet has patched threading, so a
green thread that blocks the whole process cannot stop it. Every few
seconds it looks at the test running:

* running for ``limit`` seconds: the stacks, then exit ``HUNG``;
* Nova's fixture deadlock, seen twice in a row: the stacks, then exit
  ``FIXTURE_DEADLOCK``, which tools/nova-functional runs again once.

The fixture deadlock is in Nova 34.0.0's own test set-up, not in the
driver under test (``--baseline`` shows it too once its
``get_available_resource`` is made slower than the test's 0.5 s polling
of ``/os-migrations``). The live-migration tests stub ``migrateToURI3``
with a function that calls ``_run_periodics``: it holds the
CellDatabases fixture's read lock (``target_cell``) while
``update_available_resource`` waits for the per-node update Nova 34 runs
on its ``update_resources`` executor. The test's own poll of
``/os-migrations`` meanwhile asks for the fixture's write lock (its
scatter-gather targets each cell), and that lock makes new readers wait
behind a waiting writer; so the per-node update, reading the database
untargeted, waits for the writer, which waits for the stub, which waits
for the update. Nova 33 updates each node inline and never deadlocks.
"""

from __future__ import annotations

import gc
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, TextIO

HUNG = 1
FIXTURE_DEADLOCK = 75
# how often it looks, and how long a test runs before a deadlock is named
EVERY = 5.0
DEADLOCK_AFTER = 20.0


def _originals() -> tuple[Any, Callable[[float], None]]:
    """The threading module and sleep that eventlet has not patched."""
    if "eventlet" in sys.modules:
        from eventlet import patcher

        return patcher.original("threading"), patcher.original("time").sleep
    import threading

    return threading, time.sleep


def stacks() -> list[tuple[str, list[traceback.FrameSummary]]]:
    """The main thread's stack, and those of the other threads and green
    threads in Nova's or the library's code (idle pool workers and the
    hub left out)."""
    threading, _ = _originals()
    main = threading.main_thread().ident
    found = []

    def ours(frames: list[traceback.FrameSummary]) -> bool:
        return any(
            "/nova/" in f.filename or "vgpu_driver" in f.filename
            for f in frames
        )

    for ident, frame in sys._current_frames().items():
        frames = traceback.extract_stack(frame)
        if ident == main or ours(frames):
            found.append((f"thread {ident}", frames))
    try:
        import greenlet
    except ImportError:
        return found
    for obj in gc.get_objects():
        if isinstance(obj, greenlet.greenlet) and obj.gr_frame is not None:
            frames = traceback.extract_stack(obj.gr_frame)
            if ours(frames):
                found.append((f"green thread {obj!r}", frames))
    return found


def _calls(frames: list[traceback.FrameSummary]) -> list[str]:
    return [f.name for f in frames]


def fixture_deadlock(
    found: list[tuple[str, list[traceback.FrameSummary]]],
) -> bool:
    """The stub waiting on the per-node update inside ``_run_periodics``,
    and a reader waiting on the CellDatabases fixture's lock."""
    stub = reader = False
    for _, frames in found:
        calls = _calls(frames)
        if "_run_periodics" in calls and "update_available_resource" in calls:
            after = calls[calls.index("update_available_resource") :]
            stub = stub or "result" in after
        if "_wrap_get_context_manager" in calls and "read_lock" in calls:
            reader = True
    return stub and reader


def print_stacks(
    found: list[tuple[str, list[traceback.FrameSummary]]], out: TextIO
) -> None:
    for label, frames in found:
        print(f"--- {label}", file=out)
        print("".join(traceback.format_list(frames)), end="", file=out)


def start(
    current: Callable[[], tuple[str, float]], out: TextIO, limit: float
) -> None:
    """Watch ``current()`` (the test running, or "", and when it
    started, by ``time.monotonic``)."""
    threading, sleep = _originals()

    def stop(test: str, found: Any, why: str, code: int) -> None:
        print(f"\n=== {test}: {why}", file=out)
        print_stacks(found, out)
        print(f"{test}: {why}; the run is stopped", file=out, flush=True)
        os._exit(code)

    def watch() -> None:
        seen = ""  # the test in which the deadlock was seen last time
        while True:
            sleep(EVERY)
            test, started = current()
            running = time.monotonic() - started
            if not test:
                continue
            if running > limit:
                stop(
                    test,
                    stacks(),
                    f"still running after {running:.0f} s",
                    HUNG,
                )
            if running < DEADLOCK_AFTER:
                continue
            found = stacks()
            if not fixture_deadlock(found):
                seen = ""
            elif seen == test:
                stop(
                    test,
                    found,
                    "Nova's fixture deadlock (see tools/nova_watchdog.py)",
                    FIXTURE_DEADLOCK,
                )
            else:
                seen = test

    threading.Thread(target=watch, name="watchdog", daemon=True).start()
