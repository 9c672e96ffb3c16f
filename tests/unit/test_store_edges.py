"""The records' store at its edges: an empty directory name, an update
that changes nothing, a record already moved aside by another process
(found by a sweep of records/store.py)."""

from __future__ import annotations

import os

import pytest

from tests.records_helpers import lock_is_free
from vgpu_driver.records.store import StateStore, StateStoreError


@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_state_path_is_refused_by_name(name):
    """Never the working directory of whoever runs the service."""
    with pytest.raises(StateStoreError, match=r"\[devices\] state_path"):
        StateStore(name)


def test_an_update_that_changes_nothing_writes_nothing(tmp_path):
    """No new file, no fsync: a pass that only reads costs no write (and
    does not fail on a full disk)."""
    store = StateStore(tmp_path / "records")
    store.save("claims", {"a": 1})
    before = os.stat(store.file("claims")).st_ino
    merged = store.update("claims", lambda current: dict(current), {})
    assert merged == {"a": 1}
    assert os.stat(store.file("claims")).st_ino == before
    store.update("claims", lambda current: {**current, "b": 2}, {})
    assert os.stat(store.file("claims")).st_ino != before


def test_a_record_another_process_moved_aside_is_not_an_error(tmp_path):
    """Two processes find the same record unreadable; the first moves it
    aside: the second finds nothing left to move and says so."""
    store = StateStore(tmp_path / "records")
    store.save("claims", {})
    first = store.quarantine("claims")
    assert first is not None and first.exists()
    assert store.quarantine("claims") is None
    assert sorted(p.name for p in store.directory.iterdir()) == [
        ".lock",
        first.name,
    ]


def test_a_nested_hold_keeps_the_lock_until_the_outermost_ends(tmp_path):
    """A save inside a held lock (as every compare-and-act is) must not
    let another process in when the save's own hold ends."""
    store = StateStore(tmp_path / "records")
    store.save("claims", {})
    with store.locked():
        store.save("claims", {"a": 1})  # takes and leaves the lock again
        assert not lock_is_free(store.directory)
    assert lock_is_free(store.directory)


def test_a_save_that_fails_leaves_no_temporary_file(tmp_path):
    store = StateStore(tmp_path / "records")
    store.save("claims", {"a": 1})
    with pytest.raises(StateStoreError, match=r"claims\.json"):
        store.save("claims", {"a": object()})  # not JSON
    assert sorted(p.name for p in store.directory.iterdir()) == [
        ".lock",
        "claims.json",
    ]
    assert store.load("claims", {}) == {"a": 1}


def test_the_lock_file_is_the_owner_s_alone(tmp_path):
    store = StateStore(tmp_path / "records")
    store.save("claims", {})
    mode = os.stat(store.directory / ".lock").st_mode & 0o777
    assert mode & 0o077 == 0, oct(mode)
