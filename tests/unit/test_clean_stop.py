"""A clean stop writes the records with a journal (the claims with the
devices made, the mdevs seen) whole as new snapshots, their journals
emptied: a release that reads the snapshots alone (a downgrade) finds
every claim, every device made and every mdev seen, where before it
missed what was appended since the last snapshot (the devices made
since were then taken as another manager's and reserved for good)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests import helpers
from tests.records_helpers import claim, claims_on_disk, made_on_disk
from vgpu_driver.records.claims import ClaimsRecord
from vgpu_driver.records.seen import SeenMdevs
from vgpu_driver.records.store import StateStore, StateStoreError

PARENT = "pci_0000_84_00_0"


def _journals(state):
    return {
        name: (state / name).stat().st_size
        for name in ("claims.journal", "mdev-parents.journal")
        if (state / name).exists()
    }


def _as_an_earlier_release_reads(state):
    """(claims, devices made, mdevs seen) from the snapshots alone."""
    claims = json.loads((state / "claims.json").read_text())
    made = json.loads((state / "made.json").read_text())
    seen = json.loads((state / "mdev-parents.json").read_text())
    assert set(claims["made"]) == set(made)
    return (
        set(claims["claims"]),
        set(made),
        {u: tuple(w) for u, w in seen.items()},
    )


@pytest.fixture
def node(make_conf, tmp_path):
    """The M10 host with three binds made, each one making its mdev
    (unused mdevs removed: none waits free), the guests not defined yet:
    the claims have entries in their journal, the mdevs made are seen in
    memory alone (free mdevs: written with the next guest's)."""
    node = helpers.Node(
        make_conf,
        tmp_path / "state",
        "m10",
        extra="[devices]\nremove_unused_mdevs = true\n",
    )
    for i in range(3):
        node.driver.allocate_mdevs(f"inst{i}", node.alloc((PARENT, 1)))
    node.update()
    return node


def test_a_clean_stop_leaves_snapshots_a_release_before_reads_whole(node):
    state = Path(node.conf.devices.state_path)
    assert _journals(state)["claims.journal"]
    claims, made = claims_on_disk(state), made_on_disk(state)
    assert len(claims) == 3 and made
    seen = node.driver.seen_mdevs()
    assert _as_an_earlier_release_reads(state) != (set(claims), made, seen)
    assert node.driver.cleanup_host() == ["claims", "mdevs seen"]
    assert not any(_journals(state).values())
    assert _as_an_earlier_release_reads(state) == (set(claims), made, seen)
    # nothing appended since: nothing written again
    assert node.driver.cleanup_host() == []
    # the service going on (a stop refused), or the next start, appends
    # to the new snapshots' journals as before
    node.driver.allocate_mdevs("inst9", node.alloc((PARENT, 1)))
    assert len(claims_on_disk(state)) == 4


def test_a_stop_takes_in_what_another_process_appended(tmp_path):
    """``audit --fix`` or ``restore`` saved after the service last read:
    the snapshot the stop writes holds their change too (read under the
    lock, then written)."""
    state = tmp_path / "state"
    service, tool = (
        ClaimsRecord(StateStore(state)),
        ClaimsRecord(StateStore(state)),
    )
    with service.locked():
        service.save({"a": claim("a", "i1")})
    with service.locked():
        service.save({"a": claim("a", "i1"), "b": claim("b", "i2")})
    with tool.locked():
        tool.made.add("m1")
        tool.save({**tool.claims, "c": claim("c", "i3")})
    assert service.compact()
    claims = json.loads((state / "claims.json").read_text())
    assert set(claims["claims"]) == {"a", "b", "c"}
    assert claims["made"] == ["m1"]
    seen, other = SeenMdevs(StateStore(state)), SeenMdevs(StateStore(state))
    seen.remember({"u1": ("p0", "t")})
    seen.remember({"u2": ("p0", "t")})
    other.remember({"u3": ("p1", "t")})
    assert seen.compact()
    assert json.loads((state / "mdev-parents.json").read_text()) == {
        "u1": ["p0", "t"],
        "u2": ["p0", "t"],
        "u3": ["p1", "t"],
    }
    assert (state / "mdev-parents.journal").stat().st_size == 0


def test_a_free_mdev_held_in_memory_alone_goes_into_the_snapshot(tmp_path):
    """A free mdev made or gone is held in memory until a guest's mdev
    needs a write: a stop writes it too (the next start would have seen
    it on the host; a release before this one reads it at once)."""
    state = tmp_path / "state"
    seen = SeenMdevs(StateStore(state))
    seen.remember({"u1": ("p0", "t")})
    seen.change({"free": ("p0", "t")}, [], needed=set())
    assert "free" not in json.loads((state / "mdev-parents.json").read_text())
    assert seen.compact()
    assert json.loads((state / "mdev-parents.json").read_text()) == {
        "u1": ["p0", "t"],
        "free": ["p0", "t"],
    }
    assert SeenMdevs(StateStore(state)).snapshot() == seen.snapshot()
    assert not seen.compact()


def test_a_stop_that_cannot_write_says_so_and_leaves_the_records(
    node, monkeypatch, caplog
):
    """A full disk at stop: each record is left as it was (its journal
    is read at the next start), the stop goes on, the log says which
    record and why."""
    state = Path(node.conf.devices.state_path)
    before = {p.name: p.read_bytes() for p in state.iterdir() if p.is_file()}
    real = StateStore.save

    def full(self, key, value):
        raise StateStoreError(action="write", path=key, reason="disk full")

    monkeypatch.setattr(StateStore, "save", full)
    caplog.set_level(logging.WARNING, logger="vgpu_driver")
    assert node.driver.cleanup_host() == []
    told = [r.getMessage() for r in caplog.records if "at stop" in r.message]
    assert len(told) == 2
    assert "claims" in told[0] and "mdevs seen" in told[1]
    assert all("disk full" in line for line in told)
    after = {p.name: p.read_bytes() for p in state.iterdir() if p.is_file()}
    assert after == before
    monkeypatch.setattr(StateStore, "save", real)
    assert node.driver.cleanup_host() == ["claims", "mdevs seen"]
