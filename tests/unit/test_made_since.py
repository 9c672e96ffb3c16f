"""The devices made as the claims' journal entries carry them: what was
made and removed since the snapshot, from the changes since the last
write alone (a bind on a host of thousands of devices made costs its
own device, not a comparison of every one), read back by any process as
the devices made are."""

from __future__ import annotations

import json

import pytest

from tests.records_helpers import claim, made_on_disk
from vgpu_driver.records import claims_file
from vgpu_driver.records.claims import ClaimsRecord
from vgpu_driver.records.store import StateStore


@pytest.fixture
def state(tmp_path):
    return tmp_path / "state"


def _save(record, **changes):
    """Under the lock: each device added (True) or discarded (False) from
    the devices made, then the claims saved."""
    with record.locked():
        for device, made in changes.items():
            (record.made.add if made else record.made.discard)(device)
        record.save({"c": claim("c", "i1")})


def _comparisons(monkeypatch):
    """From now on, one item per save that compared every device made."""
    compared: list[int] = []
    real = claims_file.compared
    monkeypatch.setattr(
        claims_file,
        "compared",
        lambda made, base: compared.append(1) or real(made, base),
    )
    return compared


def _last_entry(state):
    line = (state / "claims.journal").read_text().strip().splitlines()[-1]
    return json.loads(line.split(" ", 1)[1])["record"]["made_since"]


def test_the_entries_follow_the_changes_without_comparing_every_device(
    state, monkeypatch
):
    """Devices made, removed, made again and removed again between the
    saves: each entry says what differs from the snapshot, as comparing
    every device would (the first save after a snapshot compares them,
    no later one), and a new process reads the devices made."""
    record = ClaimsRecord(StateStore(state))
    start = {f"m{i}": True for i in range(100)}
    _save(record, **start)  # the snapshot
    _save(record, new1=True)  # the first entry: compared
    compared = _comparisons(monkeypatch)
    steps = [
        {"new2": True, "m1": False},
        {"m1": True},  # in the snapshot again
        {"new1": False, "m2": False, "m3": False},
        {"new1": True, "m3": True},
    ]
    expected = set(start) | {"new1"}
    for step in steps:
        _save(record, **step)
        expected |= {d for d, made in step.items() if made}
        expected -= {d for d, made in step.items() if not made}
        since = _last_entry(state)
        assert set(since["added"]) == expected - set(start)
        assert set(since["removed"]) == set(start) - expected
        assert made_on_disk(state) == expected
    assert compared == []


def test_a_set_of_devices_made_read_again_is_compared_once(state, monkeypatch):
    """Another process saved: the devices made are read again as a new
    set, and the next entry is made by comparing every device, then from
    the changes again."""
    record = ClaimsRecord(StateStore(state))
    _save(record, a=True, b=True)
    _save(record, c=True)
    other = ClaimsRecord(StateStore(state))
    _save(other, d=True)
    compared = _comparisons(monkeypatch)
    _save(record, a=False)  # reads the other's save first
    _save(record, e=True)
    assert compared == [1]
    assert made_on_disk(state) == {"b", "c", "d", "e"}
    assert _last_entry(state) == {"added": ["c", "d", "e"], "removed": ["a"]}


def test_a_new_snapshot_starts_the_changes_again(state, monkeypatch):
    """A device made after one snapshot, in the next one (the journal
    was full), then removed: the entry after says it is removed, and
    nothing says it was made since."""
    from vgpu_driver.records import journal

    record = ClaimsRecord(StateStore(state))
    _save(record, a=True)
    _save(record, x=True)  # an entry: x made since
    monkeypatch.setattr(journal, "LIMIT", 0)
    _save(record, y=True)  # no room: a snapshot with x and y
    monkeypatch.undo()
    _save(record, x=False)
    assert _last_entry(state) == {"added": [], "removed": ["x"]}
    assert made_on_disk(state) == {"a", "y"}
