"""The claims' journal: saves appended between two snapshots, read back
by any process as the last whole entry that follows the snapshot on
disk; entries cut short, damaged or of an earlier snapshot never read."""

from __future__ import annotations

import errno
import itertools
import json
import os
import zlib
from pathlib import Path

import pytest

from tests import helpers
from tests.records_helpers import (
    claim,
    conf_with_state,
    journal_of,
    read_claims,
    save_claims,
)
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.records import journal
from vgpu_driver.records.claims import ClaimsRecord
from vgpu_driver.records.store import (
    StateRecordCorrupt,
    StateStore,
    StateStoreError,
)


@pytest.fixture
def state(tmp_path):
    return tmp_path / "state"


def test_saves_after_the_first_are_appended_and_read_by_another_process(
    state,
):
    first = ClaimsRecord(StateStore(state))
    save_claims(first, a="i1")  # a snapshot, and an empty journal
    snapshot = (state / "claims.json").read_bytes()
    assert journal_of(state).stat().st_size == 0
    save_claims(first, a="i1", b="i2")
    save_claims(first, b="i2")
    assert (state / "claims.json").read_bytes() == snapshot
    assert journal_of(state).read_bytes().count(b"\n") == 4
    assert read_claims(state) == {"b": "i2"}
    # another process appends: the first sees the records changed (one
    # look) and reads its entry
    other = ClaimsRecord(StateStore(state))
    save_claims(other, c="i3")
    assert not first.current()
    with first.locked():
        assert set(first.claims) == {"c"}
    assert first.current()


def test_an_entry_cut_short_by_a_crash_is_passed_over(state):
    record = ClaimsRecord(StateStore(state))
    save_claims(record, a="i1")
    save_claims(record, b="i2")
    save_claims(record, c="i3")
    with open(journal_of(state), "r+b") as handle:
        handle.truncate(journal_of(state).stat().st_size - 7)
    assert read_claims(state) == {"b": "i2"}
    # the next save, after the cut entry, is read whole
    save_claims(ClaimsRecord(StateStore(state)), d="i4")
    assert read_claims(state) == {"d": "i4"}


def test_a_damaged_entry_is_passed_over(state):
    record = ClaimsRecord(StateStore(state))
    save_claims(record, a="i1")
    save_claims(record, b="i2")
    save_claims(record, c="i3")
    data = bytearray(journal_of(state).read_bytes())
    data[data.rindex(b'"i3"') + 2] ^= 0x01  # "i3" -> "i2", checksum kept
    journal_of(state).write_bytes(bytes(data))
    assert read_claims(state) == {"b": "i2"}


@pytest.mark.parametrize("tail", [16, 700])
def test_the_last_entry_is_read_from_the_end_whatever_its_size(
    state, monkeypatch, tail
):
    """Read from the journal's end, in a window doubled until it holds
    a whole entry: one larger than the window, or behind one cut short,
    is read whole."""
    monkeypatch.setattr(journal, "TAIL", tail)
    record = ClaimsRecord(StateStore(state))
    save_claims(record, a="i1")
    save_claims(record, **{f"d{n}": "i2" for n in range(20)})
    assert read_claims(state) == {f"d{n}": "i2" for n in range(20)}
    save_claims(record, b="i3")
    with open(journal_of(state), "r+b") as handle:
        handle.truncate(journal_of(state).stat().st_size - 5)
    assert read_claims(state) == {f"d{n}": "i2" for n in range(20)}


def test_a_read_of_a_long_journal_costs_an_entry(state, monkeypatch):
    """Not the whole journal: a reader after another process's bind
    reads about the last entry."""
    record = ClaimsRecord(StateStore(state))
    save_claims(record, a="i1")
    for n in range(300):
        save_claims(record, **{f"d{n}": f"i{n}"})
    assert journal_of(state).stat().st_size > 4 * journal.TAIL
    read_bytes = []
    real_open = open

    class Counted:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def read(self, n=-1):
            data = self.handle.read(n)
            read_bytes.append(len(data))
            return data

        def __getattr__(self, name):
            return getattr(self.handle, name)

    monkeypatch.setattr(
        journal,
        "open",
        lambda *a, **k: Counted(real_open(*a, **k)),
        raising=False,
    )
    assert read_claims(state) == {"d299": "i299"}
    assert 0 < sum(read_bytes) <= journal.TAIL


def test_entries_of_an_earlier_snapshot_are_never_read(state, monkeypatch):
    """A snapshot written, its journal's emptying lost to a crash: the
    old entries follow an earlier snapshot."""
    record = ClaimsRecord(StateStore(state))
    save_claims(record, a="i1")
    save_claims(record, b="i2")
    before = journal_of(state).read_bytes()
    monkeypatch.setattr(journal, "LIMIT", 0)
    save_claims(record, c="i3")  # a snapshot
    monkeypatch.undo()
    journal_of(state).write_bytes(before)
    assert read_claims(state) == {"c": "i3"}
    # and appends after them are read
    save_claims(ClaimsRecord(StateStore(state)), d="i4")
    assert read_claims(state) == {"d": "i4"}


def test_a_full_journal_is_emptied_by_a_snapshot(state, monkeypatch):
    record = ClaimsRecord(StateStore(state))
    save_claims(record, a="i1")
    monkeypatch.setattr(journal, "LIMIT", 600)
    sizes = []
    for n in range(8):
        save_claims(record, **{f"d{n}": f"i{n}"})
        sizes.append(journal_of(state).stat().st_size)
        assert sizes[-1] <= 600
        assert read_claims(state) == {f"d{n}": f"i{n}"}
    # emptied by each snapshot, and appended to again after it
    assert 0 in sizes[1:]
    assert all(b > 0 for a, b in itertools.pairwise(sizes) if a == 0)
    snapshot = json.loads((state / "claims.json").read_text())
    assert list(snapshot["claims"]) != ["a"]  # written again meanwhile


def test_a_failed_flush_leaves_the_journal_and_the_records_as_they_were(
    state, monkeypatch
):
    record = ClaimsRecord(StateStore(state))
    save_claims(record, a="i1")
    save_claims(record, b="i2")
    size = journal_of(state).stat().st_size

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdatasync", full)
    with pytest.raises(StateStoreError, match=r"claims\.journal"):
        save_claims(record, c="i3")
    monkeypatch.undo()
    assert journal_of(state).stat().st_size == size
    assert read_claims(state) == {"b": "i2"}
    with record.locked():  # held as on disk
        assert set(record.claims) == {"b"}


def test_a_whole_entry_of_the_wrong_shape_is_corrupt_and_moved_aside(state):
    record = ClaimsRecord(StateStore(state))
    save_claims(record, a="i1")
    base = json.loads((state / "claims.json").read_text())["epoch"]
    text = json.dumps(
        {"base": base, "record": {"epoch": 5, "claims": {"x": {}}}}
    ).encode()
    with open(journal_of(state), "ab") as handle:
        handle.write(b"\n%08x %s\n" % (zlib.crc32(text), text))
    with pytest.raises(StateRecordCorrupt, match=r"claims\.journal"):
        read_claims(state)
    moved = ClaimsRecord(StateStore(state)).repair()
    [aside] = moved
    assert os.path.basename(aside).startswith("claims.journal.corrupt-")
    assert read_claims(state) == {"a": "i1"}  # the snapshot, kept


def test_a_journal_goes_aside_with_its_snapshot(state):
    record = ClaimsRecord(StateStore(state))
    save_claims(record, a="i1")
    save_claims(record, b="i2")
    (state / "claims.json").write_text("{ damaged")
    moved = sorted(os.path.basename(p) for p in record.repair())
    assert [m.split(".corrupt-")[0] for m in moved] == [
        "claims.journal",
        "claims.json",
    ]
    assert read_claims(state) == {}
    save_claims(record, c="i3")  # a new snapshot and journal
    assert read_claims(state) == {"c": "i3"}


def test_a_record_of_the_first_format_is_replaced_not_appended_to(state):
    """A bare mapping of claims (epoch 0): no journal entry can follow
    it, so the first save writes a snapshot."""
    state.mkdir()
    (state / "claims.json").write_text(json.dumps({"a": claim("a", "i1")}))
    assert read_claims(state) == {"a": "i1"}
    save_claims(ClaimsRecord(StateStore(state)), b="i2")
    assert "epoch" in json.loads((state / "claims.json").read_text())
    assert journal_of(state).stat().st_size == 0
    assert read_claims(state) == {"b": "i2"}


# -- a process killed while it binds and releases -----------------------


def _bind_and_release_until_killed(state, host_file, acks) -> None:
    """Bind and release one instance after another, saying each done;
    the journal kept small, so snapshots are written too. ``acks`` is a
    pipe's end: ``send`` has written to the pipe when it returns (a
    queue's ``put`` hands its item to a feeder thread a kill can beat,
    so the test saw binds done that were never said)."""

    journal.LIMIT = 4096
    host = helpers.FileBackedHost(Path(host_file))
    conf = conf_with_state(
        Path(state), helpers.load("m10").config, Path(state).parent
    )
    driver = VgpuDriver(conf, host)
    tree = helpers.new_tree()
    driver.update_provider_tree(tree, "node1")
    rp = tree.data("node1_pci_0000_86_00_0").uuid
    n = 0
    while True:
        instance = f"i{n}"
        [device] = driver.allocate_mdevs(
            instance, {rp: {"resources": {"VGPU": 1}}}
        )
        acks.send(("bound", instance, device.id))
        driver.release_mdevs(instance)
        acks.send(("released", instance, device.id))
        n += 1


@pytest.mark.parametrize("after", [7, 24, 41])
def test_a_process_killed_at_any_point_leaves_what_it_said_it_saved(
    tmp_path, after
):
    """SIGKILL at some point in a run of binds and releases: a new
    process reads the claims as the last one acknowledged left them, or
    as the one under way when it died left them; never an older state,
    never a record it cannot read."""
    import multiprocessing
    import signal
    import time

    state = tmp_path / "state"
    host_file = tmp_path / "host.pickle"
    helpers.FileBackedHost(host_file, helpers.load("m10"))
    ctx = multiprocessing.get_context("spawn")
    acks, worker_end = ctx.Pipe(duplex=False)
    worker = ctx.Process(
        target=_bind_and_release_until_killed,
        args=(str(state), str(host_file), worker_end),
    )
    worker.start()
    worker_end.close()

    def said_next():
        assert acks.poll(120), "the worker said nothing for 120 s"
        return acks.recv()

    said = [said_next() for _ in range(after)]
    time.sleep(0.001 * after)  # into the next operation, or later
    os.kill(worker.pid, signal.SIGKILL)
    worker.join(timeout=30)
    while acks.poll():  # acknowledged before it died
        try:
            said.append(acks.recv())
        except EOFError:  # the pipe's last writer is gone
            break
    kind, instance, device = said[-1]
    record = ClaimsRecord(StateStore(state))
    with record.locked():
        claims = {
            d: (c["instance"], c["purpose"]) for d, c in record.claims.items()
        }
    done = int(instance[1:])
    if kind == "bound":
        # its release may have begun (recorded first) or ended
        assert claims in (
            {device: (instance, "spawn")},
            {device: (instance, "release")},
            {},
        )
    else:
        # the next bind may have been recorded
        assert claims == {} or [owner for owner, _ in claims.values()] == [
            f"i{done + 1}"
        ]


def _refuse(monkeypatch, obj, name):
    def refused(*args, **kwargs):
        raise StateStoreError(
            action="write", path=name, reason="[Errno 28] No space left"
        )

    monkeypatch.setattr(obj, name, refused)


def test_claims_and_vf_types_are_written_whole_or_the_claims_not_at_all(
    state, monkeypatch
):
    """The claims are the commit: a save whose VF types cannot be written
    leaves the claims as they were, on disk and held; one whose claims
    cannot be written holds what is on disk (the VF types written
    before them are read again; the devices made are written with them,
    so neither is)."""
    record = ClaimsRecord(StateStore(state))
    save_claims(record, a="i1")
    _refuse(monkeypatch, record.state, "save")
    with record.locked(), pytest.raises(StateStoreError):
        record.save({"a": claim("a", "i1"), "b": claim("b", "i2")}, {"v": 7})
    monkeypatch.undo()
    assert read_claims(state) == {"a": "i1"}
    with record.locked():
        assert set(record.claims) == {"a"} and record.vf_types == {}
    _refuse(monkeypatch, record._file, "write")
    with record.locked(), pytest.raises(StateStoreError):
        record.save({"a": claim("a", "i1"), "b": claim("b", "i2")}, {"v": 7})
    monkeypatch.undo()
    assert read_claims(state) == {"a": "i1"}
    # a device made and claimed, the write refused: neither on disk
    _refuse(monkeypatch, record._file.journal, "append")
    with record.locked(), pytest.raises(StateStoreError):
        record.made.add("b")
        record.save({"a": claim("a", "i1"), "b": claim("b", "i2")})
    monkeypatch.undo()
    other = ClaimsRecord(StateStore(state))
    with other.locked():
        on_disk = (other.vf_types, other.made)
    assert "b" not in on_disk[1]
    with record.locked():
        assert set(record.claims) == {"a"}
        assert (record.vf_types, record.made) == on_disk
