"""The mdevs seen on disk: a snapshot (the plain map every release has
written) and a journal of what each save changed, read back by any
process as the snapshot with every entry that follows it applied in
turn; a save costs what it changed, whatever the number of mdevs."""

from __future__ import annotations

import json
import os

import pytest

from vgpu_driver.records import journal
from vgpu_driver.records.seen import SeenMdevs
from vgpu_driver.records.store import StateStore


@pytest.fixture
def state(tmp_path):
    return tmp_path / "state"


def _seen(state):
    return SeenMdevs(StateStore(state))


def _many(n):
    return {
        f"{i:08d}-0000-4000-8000-000000000000": ("p0", "t") for i in range(n)
    }


def _journal(state):
    return state / "mdev-parents.journal"


def _snapshot(state):
    return json.loads((state / "mdev-parents.json").read_text())


@pytest.mark.parametrize("mdevs", [16, 4096])
def test_a_guests_mdev_put_on_disk_is_one_append_of_its_own_size(
    state, monkeypatch, mdevs
):
    """Where one guest's mdev is, on a host whose record holds 16 or 4096
    mdevs: one entry appended and one ``fdatasync``, of the same few
    bytes at both sizes; the snapshot is not written again."""
    seen = _seen(state)
    seen.save(_many(mdevs))  # the first save: a snapshot
    snapshot = (state / "mdev-parents.json").stat()
    synced: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(
        os, "fdatasync", lambda fd: synced.append(fd) or real(fd)
    )
    before = _journal(state).stat().st_size
    seen.remember({"new-guest-mdev": ("p1", "t")})
    added = _journal(state).stat().st_size - before
    assert len(synced) == 1 and 0 < added < 200
    assert (
        state / "mdev-parents.json"
    ).stat().st_mtime_ns == snapshot.st_mtime_ns
    assert _seen(state).get("new-guest-mdev") == ("p1", "t")


def test_a_new_process_reads_the_snapshot_and_every_entry_after_it(state):
    """Mdevs set and gone in turn, in memory and saved: another process
    reads what was saved (the changes noted in memory alone go with the
    next save)."""
    first = _seen(state)
    first.save({"a": ("p0", "t"), "b": ("p0", "t")})
    first.change({"c": ("p1", "t")}, ["a"], needed=set())  # memory alone
    assert _seen(state).snapshot() == {"a": ("p0", "t"), "b": ("p0", "t")}
    first.remember({"d": ("p1", "t")})
    first.save({"b": None})
    assert _seen(state).snapshot() == {"c": ("p1", "t"), "d": ("p1", "t")}
    assert first.snapshot() == _seen(state).snapshot()
    # the snapshot is as the first save left it
    assert _snapshot(state) == {"a": ["p0", "t"], "b": ["p0", "t"]}


def test_two_processes_take_in_each_others_saves(state):
    """Each save reads first what the other appended since (its entries
    alone), so neither undoes the other's; a change of its own not
    written yet stays."""
    one, two = _seen(state), _seen(state)
    one.save({"a": ("p0", "t")})
    two.save({"b": ("p0", "t")})  # a snapshot by the first is read whole
    one.change({"x": ("p2", "t")}, [], needed=set())  # in memory
    one.remember({"c": ("p1", "t")})
    two.save({"a": None})
    one.remember({"d": ("p1", "t")})
    expected = {
        "b": ("p0", "t"),
        "c": ("p1", "t"),
        "d": ("p1", "t"),
        "x": ("p2", "t"),
    }
    assert one.snapshot() == expected
    assert _seen(state).snapshot() == expected
    # the second took in the first's entry (its change held in memory
    # went with it), not the save after
    assert two.snapshot() == {
        "b": ("p0", "t"),
        "c": ("p1", "t"),
        "x": ("p2", "t"),
    }


def test_a_full_journal_is_emptied_by_a_snapshot_the_other_reads_whole(
    state, monkeypatch
):
    """Past the journal's limit a save writes the whole record as the
    snapshot (the plain map a release before this one reads) and empties
    the journal; the other process tells it from the snapshot's
    signature and reads it whole, keeping its own change not written."""
    monkeypatch.setattr(journal, "LIMIT", 400)
    one, two = _seen(state), _seen(state)
    one.save({"a": ("p0", "t")})
    two.change({"mine": ("p9", "t")}, [], needed=set())
    for i in range(8):
        one.remember({f"u{i}": ("p1", "t")})
    assert _journal(state).stat().st_size < 400
    assert set(_snapshot(state)) >= {"a", "u0", "u1"}  # compacted
    two.remember({"z": ("p2", "t")})
    on_disk = _seen(state).snapshot()
    assert set(on_disk) == {"a", "mine", "z"} | {f"u{i}" for i in range(8)}
    assert two.snapshot() == on_disk


def test_entries_of_an_earlier_snapshot_are_never_read(state):
    """A snapshot written and the journal's emptying lost (a crash
    between the two): the entries left follow the earlier snapshot, not
    this one, and are passed over."""
    seen = _seen(state)
    seen.save({"a": ("p0", "t")})
    seen.remember({"b": ("p0", "t")})
    left = _journal(state).read_bytes()
    other = _seen(state)
    _journal(state).unlink()  # so the save writes a snapshot
    other.file.write({"c": ("p0", "t")}, lambda: {"c": ("p0", "t")})
    _journal(state).write_bytes(left)  # its emptying lost
    assert _seen(state).snapshot() == {"c": ("p0", "t")}


def test_a_line_being_appended_is_read_once_it_is_whole(state):
    """Read without the lock as a service starts, a line half appended is
    left for the next read, which takes it whole."""
    seen = _seen(state)
    seen.save({"a": ("p0", "t")})
    seen.remember({"b": ("p0", "t")})
    text = _journal(state).read_bytes()
    cut = len(text) // 2
    _journal(state).write_bytes(text[:cut])
    reader = _seen(state)
    assert reader.snapshot() == {"a": ("p0", "t")}
    with _journal(state).open("ab") as handle:
        handle.write(text[cut:])
    reader.remember({"c": ("p0", "t")})
    assert reader.snapshot() == {
        "a": ("p0", "t"),
        "b": ("p0", "t"),
        "c": ("p0", "t"),
    }


def test_a_whole_entry_of_the_wrong_shape_moves_the_journal_aside(state):
    """An entry whose checksum holds but that is no change of the record:
    the journal is moved aside (kept), the snapshot kept; the next save
    writes a snapshot."""
    seen = _seen(state)
    seen.save({"a": ("p0", "t")})
    base = seen.file._held[1]
    assert journal.Journal(_journal(state)).append(
        base, {"set": {"b": ["p0"]}}
    )
    fresh = _seen(state)
    assert fresh.snapshot() == {"a": ("p0", "t")}
    assert not _journal(state).exists()
    assert list(state.glob("mdev-parents.journal.corrupt-*"))
    fresh.remember({"c": ("p1", "t")})
    assert _snapshot(state) == {"a": ["p0", "t"], "c": ["p1", "t"]}
    assert _journal(state).stat().st_size == 0


def test_the_record_of_a_release_before_this_one_is_read_and_kept(state):
    """A snapshot alone, as a release without the journal left it: read
    as it is; the first save writes a snapshot and makes the journal."""
    state.mkdir()
    (state / "mdev-parents.json").write_text(json.dumps({"a": ["p0", "t"]}))
    seen = _seen(state)
    assert seen.snapshot() == {"a": ("p0", "t")}
    seen.remember({"b": ("p1", "t")})
    assert _snapshot(state) == {"a": ["p0", "t"], "b": ["p1", "t"]}
    assert _journal(state).stat().st_size == 0
    seen.remember({"c": ("p1", "t")})
    assert _journal(state).stat().st_size > 0
    assert _seen(state).snapshot() == {
        "a": ("p0", "t"),
        "b": ("p1", "t"),
        "c": ("p1", "t"),
    }


def test_a_change_not_written_yet_outlives_anothers_save_of_that_mdev(state):
    """The first process noted an mdev in memory; the second saves that
    mdev elsewhere: the first's next save takes in the second's entry
    but keeps, and writes, its own (the later word), in memory as on
    disk."""
    one, two = _seen(state), _seen(state)
    one.save({"a": ("p0", "t")})
    one.change({"x": ("p2", "t")}, [], needed=set())
    two.remember({"x": ("p5", "t")})
    one.remember({"c": ("p1", "t")})
    assert one.snapshot()["x"] == ("p2", "t")
    assert _seen(state).snapshot() == one.snapshot()


def test_an_empty_snapshot_is_said_to_be_empty(state, caplog):
    """A snapshot cut to nothing (a disk that lost it): the log says it
    is empty, not a JSON parser's message."""
    _seen(state).save({"a": ("p0", "t")})
    (state / "mdev-parents.json").write_text("  \n")
    assert _seen(state).snapshot() == {}
    assert "it is empty" in caplog.text


def test_a_damaged_snapshot_goes_aside_with_its_journal(state):
    """The snapshot cannot be read: it is moved aside (kept), and its
    journal with it (its entries follow a snapshot no longer there);
    the record is rebuilt from the host, empty until then."""
    seen = _seen(state)
    seen.save({"a": ("p0", "t")})
    seen.remember({"b": ("p0", "t")})
    (state / "mdev-parents.json").write_text('{"a": ["p0"')
    assert _seen(state).snapshot() == {}
    assert list(state.glob("mdev-parents.json.corrupt-*"))
    assert list(state.glob("mdev-parents.journal.corrupt-*"))
    assert not _journal(state).exists()


def test_a_save_reads_what_the_others_appended_not_the_whole_record(
    state, monkeypatch
):
    """Another process appended: this one's next save reads the journal
    from where it left it, not the snapshot nor the journal again from
    its start; another's new snapshot is read whole, once. (Reading all
    of it every time is right too, and costs every mdev seen: it is
    what the journal saves.)"""
    from vgpu_driver.records.seen_file import SeenFile

    one, two = _seen(state), _seen(state)
    one.save(_many(64))
    reads, starts = [], []
    real_read, real_entries = SeenFile.read, journal.Journal.entries
    monkeypatch.setattr(
        SeenFile, "read", lambda self: reads.append(1) or real_read(self)
    )

    def entries(self, base, validate, start=0):
        starts.append(start)
        return real_entries(self, base, validate, start)

    monkeypatch.setattr(journal.Journal, "entries", entries)
    two.remember({"b": ("p1", "t")})  # the first's snapshot: read whole
    assert reads == [1]
    del reads[:], starts[:]
    sizes = []
    for seen, uuid in ((one, "c"), (two, "d"), (one, "e")):
        sizes.append(_journal(state).stat().st_size)
        seen.remember({uuid: ("p1", "t")})
    # each read from where it last left the journal: the first had
    # written the snapshot (an empty journal), the second its entry
    assert reads == [] and starts == [0, sizes[0], sizes[1]]
    # nobody appended since its own save: nothing to read but the end
    end = _journal(state).stat().st_size
    one.remember({"f": ("p1", "t")})
    assert reads == [] and starts[3:] == [end]
    assert one.snapshot() == _seen(state).snapshot()
    assert {"b", "c", "d", "e", "f"} <= set(one.snapshot())
    # the second takes the last entries in at its next save
    assert set(two.snapshot()) == set(one.snapshot()) - {"e", "f"}


def test_the_snapshot_is_held_open_once_however_often_it_is_read(state):
    """Each reading of the whole record holds the snapshot it read (its
    inode is never a new file's) and lets the one before go, replaced
    as it is."""
    import gc

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("no /proc/self/fd")

    def held():
        return sum(
            1
            for fd in os.listdir("/proc/self/fd")
            # (a snapshot replaced since: "mdev-parents.json (deleted)")
            if "mdev-parents.json" in os.path.realpath(f"/proc/self/fd/{fd}")
        )

    gc.collect()  # (records of other tests)
    before = held()
    one, two = _seen(state), _seen(state)
    one.save({"a": ("p0", "t")})
    for i in range(5):
        (state / "mdev-parents.journal").unlink()  # the next save: a snapshot
        one.remember({f"u{i}": ("p1", "t")})
        two.remember({f"v{i}": ("p1", "t")})  # reads one's whole
    assert held() == before + 2  # one each
