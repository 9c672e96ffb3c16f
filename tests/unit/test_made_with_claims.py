"""The devices the library made travel with the claims: listed in each
snapshot, and each journal entry says which were made and removed since
it. Records of the release before (``made.json`` alone) are read and
replaced by a snapshot; a lost claims snapshot keeps the devices made."""

from __future__ import annotations

import json

import pytest

from tests.records_helpers import claim, journal_of
from vgpu_driver.records.claims import ClaimsRecord, made_on_disk
from vgpu_driver.records.journal import Journal
from vgpu_driver.records.store import StateStore


@pytest.fixture
def state(tmp_path):
    return tmp_path / "state"


def _made(state, made: set[str], **claims: str) -> None:
    """Record ``made`` and ``claims`` (device -> instance), as a bind or
    a release does."""
    record = ClaimsRecord(StateStore(state))
    with record.locked():
        record.made = set(made)
        record.save({d: claim(d, i) for d, i in claims.items()})


def _read_made(state) -> set[str]:
    record = ClaimsRecord(StateStore(state))
    with record.locked():
        assert record.made_known
        return set(record.made)


def _entries(state) -> list[dict]:
    lines = journal_of(state).read_bytes().split(b"\n")
    return [json.loads(line[9:])["record"] for line in lines if line]


def test_devices_made_are_appended_as_what_changed_since_the_snapshot(
    state,
):
    _made(state, {"a", "b"})  # the first save: a snapshot
    snapshot = json.loads((state / "claims.json").read_text())
    assert snapshot["made"] == ["a", "b"]
    assert json.loads((state / "made.json").read_text()) == ["a", "b"]
    _made(state, {"a", "b", "c"}, c="i1")
    _made(state, {"b", "c", "d"}, c="i1", d="i2")
    assert [e["made_since"] for e in _entries(state)] == [
        {"added": ["c"], "removed": []},
        {"added": ["c", "d"], "removed": ["a"]},
    ]
    # the snapshot and its copy for an earlier release are not rewritten
    assert json.loads((state / "claims.json").read_text()) == snapshot
    assert json.loads((state / "made.json").read_text()) == ["a", "b"]
    assert _read_made(state) == {"b", "c", "d"}
    assert made_on_disk(StateStore(state)) == {"b", "c", "d"}


def test_records_of_the_release_before_are_read_then_replaced(state):
    """Its claims snapshot lists no device made, its entries say none
    changed: ``made.json`` says which. The first save writes a snapshot
    listing them, not an entry (an entry's changes need a snapshot's
    list to follow)."""
    state.mkdir()
    (state / "claims.json").write_text(
        json.dumps({"epoch": 7, "claims": {"x": claim("x", "i9")}})
    )
    (state / "claims.journal").write_text("")
    (state / "made.json").write_text(json.dumps(["x", "y"]))
    assert _read_made(state) == {"x", "y"}
    assert made_on_disk(StateStore(state)) == {"x", "y"}
    record = ClaimsRecord(StateStore(state))
    with record.locked():
        record.made.add("z")
        record.save()
    assert journal_of(state).read_text() == ""  # a snapshot, not an entry
    snapshot = json.loads((state / "claims.json").read_text())
    assert snapshot["made"] == ["x", "y", "z"]
    assert set(snapshot["claims"]) == {"x"}
    assert json.loads((state / "made.json").read_text()) == ["x", "y", "z"]


def test_a_lost_claims_snapshot_keeps_the_devices_made(state):
    """The snapshot cannot be read: ``made.json`` (written with it) with
    the changes the journal's last entry says since are kept, before
    both are moved aside; the claims are rebuilt from the host."""
    _made(state, {"a", "b"})
    _made(state, {"b", "c"}, c="i1")
    (state / "claims.json").write_text("{ not json")
    moved = ClaimsRecord(StateStore(state)).repair()
    assert any("claims.json" in p for p in moved)
    assert any("claims.journal" in p for p in moved)
    assert _read_made(state) == {"b", "c"}


def test_a_made_json_newer_than_the_journal_is_kept_as_it_is(state):
    """A save that wrote ``made.json`` for its snapshot, then stopped
    before the snapshot (a crash, a full disk): the journal's entries
    follow the snapshot before, whose changes ``made.json`` already
    holds. Lost then, the snapshot leaves ``made.json`` as it is."""
    _made(state, {"a", "b"})
    _made(state, {"b", "c"}, c="i1")
    newer = ["b", "c", "d"]  # the next save's, with "d" made
    (state / "made.json").write_text(json.dumps(newer))
    (state / "claims.json").write_text("{ not json")
    ClaimsRecord(StateStore(state)).repair()
    assert _read_made(state) == set(newer)


def test_an_entry_is_read_whatever_snapshot_it_follows_only_to_repair(
    state,
):
    """:meth:`Journal.last` gives the last whole entry with the epoch of
    the snapshot it follows; :meth:`Journal.latest` only if it follows
    the one asked for."""
    _made(state, {"a"})
    _made(state, {"a", "b"}, b="i1")
    base = json.loads((state / "claims.json").read_text())["epoch"]
    found = Journal(journal_of(state)).last(lambda record: None)
    assert found is not None and found[0] == base
    assert found[1]["made_since"] == {"added": ["b"], "removed": []}
    assert Journal(journal_of(state)).latest(base + 1, lambda r: None) is None


def test_entries_of_the_release_before_say_no_device_changed(state):
    """That release appended the claims alone: its entries follow a
    snapshot that lists no device made, whose ``made.json`` says which
    (and an entry saying none changed since a snapshot that lists them
    leaves them as listed)."""
    from vgpu_driver.records.claims_file import made_after

    _made(state, {"a"})
    snapshot = json.loads((state / "claims.json").read_text())
    del snapshot["made"]
    (state / "claims.json").write_text(json.dumps(snapshot))
    (state / "made.json").write_text(json.dumps(["a", "b"]))
    entry = {"epoch": 9, "claims": {"b": claim("b", "i1")}}
    Journal(journal_of(state)).append(snapshot["epoch"], entry)
    assert _read_made(state) == {"a", "b"}
    assert made_on_disk(StateStore(state)) == {"a", "b"}
    record = ClaimsRecord(StateStore(state))
    with record.locked():
        assert set(record.claims) == {"b"}
    assert made_after(frozenset({"a"}), entry) == {"a"}
    assert (
        made_after(None, {"made_since": {"added": ["x"], "removed": []}})
        is None
    )


@pytest.mark.parametrize(
    "since",
    [
        ["a"],
        {"added": ["a"]},
        {"added": "a", "removed": []},
        {"added": [], "removed": [1]},
    ],
)
def test_an_entry_whose_changes_are_not_lists_of_ids_is_corrupt(state, since):
    """An entry's devices made and removed since its snapshot are lists
    of device ids, both: anything else is refused (moved aside at a
    repair), never taken for the ids it happens to hold."""
    from vgpu_driver.records.store import StateRecordCorrupt

    _made(state, {"a"})
    base = json.loads((state / "claims.json").read_text())["epoch"]
    entry = {"epoch": 5, "claims": {}, "made_since": since}
    Journal(journal_of(state)).append(base, entry)
    with pytest.raises(StateRecordCorrupt, match="made_since"):
        _read_made(state)


@pytest.mark.parametrize(
    "record",
    [
        {"epoch": 1, "claims": ["a"]},
        {"epoch": "1", "claims": {}},
        {"epoch": 1, "claims": {}, "made": "a"},
    ],
)
def test_a_snapshot_not_of_the_claims_shape_is_corrupt(state, record):
    from vgpu_driver.records.store import StateRecordCorrupt

    state.mkdir()
    (state / "claims.json").write_text(json.dumps(record))
    with pytest.raises(StateRecordCorrupt, match=r"claims\.json"):
        _read_made(state)


def test_an_operation_undone_reads_the_claims_again_not_the_rest(state):
    """An operation changed what is held and did not save (it failed):
    the next lock reads the claims again, and takes the VF types and the
    devices made as they were written, not read again (the claims'
    epoch says they did not change)."""
    record = ClaimsRecord(StateStore(state))
    with record.locked():
        record.made = {"a"}
        record.save({"a": claim("a", "i1")}, {"0000:41:00.6": 1150})
    with record.locked():
        record.claims["b"] = claim("b", "i2")  # changed, never saved
        record.made.add("b")
    (state / "vf-types.json").write_text("not read again")
    with record.locked():
        assert set(record.claims) == {"a"}
        assert record.vf_types == {"0000:41:00.6": 1150}
        assert record.made == {"a"} and record.made_known
