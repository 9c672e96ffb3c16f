"""The claims' journal at its edges: a journal gone between two saves, a
whole entry that is not an object, the flush of its directory when it
is made, its mode (found by a sweep of records/journal.py)."""

from __future__ import annotations

import json
import os
import zlib

import pytest

from tests.records_helpers import journal_of, read_claims, save_claims
from vgpu_driver.records import journal
from vgpu_driver.records.claims import ClaimsRecord
from vgpu_driver.records.store import StateRecordCorrupt, StateStore


def test_a_save_whose_journal_is_gone_writes_a_snapshot(tmp_path):
    """The journal removed between two saves (by hand, a cleanup): the
    next save is written whole, not told done with nothing written."""
    state = tmp_path / "state"
    record = ClaimsRecord(StateStore(state))
    save_claims(record, a="i1")
    journal_of(state).unlink()
    save_claims(record, b="i2")
    assert read_claims(state) == {"b": "i2"}
    assert journal_of(state).exists()  # made again with the snapshot


@pytest.mark.parametrize(
    "entry", [[1, 2], "text", {"record": {}}, {"base": "1", "record": {}}]
)
def test_a_whole_entry_that_is_no_entry_is_corrupt(tmp_path, entry):
    """A line whose checksum holds but which is not an entry (another
    tool's write): the record is corrupt, said by name, no traceback."""
    state = tmp_path / "state"
    save_claims(ClaimsRecord(StateStore(state)), a="i1")
    text = json.dumps(entry).encode()
    with open(journal_of(state), "ab") as handle:
        handle.write(b"\n%08x %s\n" % (zlib.crc32(text), text))
    with pytest.raises(StateRecordCorrupt, match=r"claims\.journal"):
        read_claims(state)


def test_the_journal_s_directory_is_flushed_once_when_it_is_made(
    tmp_path, monkeypatch
):
    """A journal made is named on disk before any append to it is told
    saved (an append flushes the file alone); one that exists costs no
    flush of its directory."""
    flushed = []
    monkeypatch.setattr(journal, "sync_directory", flushed.append)
    path = tmp_path / "claims.journal"
    log = journal.Journal(path)
    log.empty()
    assert flushed == [tmp_path]
    assert log.append(1, {"claims": {}})
    log.empty()
    assert flushed == [tmp_path]


def test_is_empty_says_whether_an_entry_is_there(tmp_path):
    log = journal.Journal(tmp_path / "claims.journal")
    assert log.is_empty() is True  # none made yet
    log.empty()
    assert log.is_empty() is True
    assert log.append(1, {"claims": {}})
    assert log.is_empty() is False


def test_the_journal_is_the_owner_s_alone(tmp_path):
    state = tmp_path / "state"
    save_claims(ClaimsRecord(StateStore(state)), a="i1")
    mode = os.stat(journal_of(state)).st_mode & 0o777
    assert mode & 0o077 == 0, oct(mode)
