"""tools/nova_watchdog.py names Nova's fixture deadlock only where both
halves of it are waiting: the live-migration stub on the per-node update
inside ``_run_periodics``, and a reader on the CellDatabases lock."""

from __future__ import annotations

import traceback

from tests import helpers


def tool():
    return helpers.tool("nova_watchdog")


def stack(*calls: str) -> list[traceback.FrameSummary]:
    return [
        traceback.FrameSummary(f"/site-packages/nova/{name}.py", 1, name)
        for name in calls
    ]


STUB = stack(
    "_migrate_stub",
    "_run_periodics",
    "update_available_resource",
    "result",
    "wait",
    "acquire",
)
READER = stack(
    "_update_available_resource_for_node",
    "bdms_by_instance_uuid",
    "_wrap_get_context_manager",
    "read_lock",
    "_acquire_read_lock",
    "wait",
)


def test_the_deadlock_needs_the_stub_waiting_and_a_reader_waiting():
    w = tool()
    assert w.fixture_deadlock([("a", STUB), ("b", READER)])
    assert not w.fixture_deadlock([("a", STUB)])
    assert not w.fixture_deadlock([("b", READER)])


def test_a_stub_running_the_update_itself_is_no_deadlock():
    w = tool()
    # the periodics running (not waiting on the executor's result)
    running = stack(
        "_migrate_stub",
        "_run_periodics",
        "update_available_resource",
        "_get_disk_over_committed_size_total",
    )
    assert not w.fixture_deadlock([("a", running), ("b", READER)])
    # a wait on a result elsewhere than in the update
    elsewhere = stack("_run_periodics", "result", "update_available_resource")
    assert not w.fixture_deadlock([("a", elsewhere), ("b", READER)])


def test_the_stacks_include_the_main_thread():
    w = tool()
    labels = [label for label, _ in w.stacks()]
    import threading

    assert f"thread {threading.main_thread().ident}" in labels
