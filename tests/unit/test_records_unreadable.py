"""Records on disk that cannot be read are moved aside and rebuilt, never
taken as empty and never a traceback: a byte that is not UTF-8, an mdev
seen that is no [parent, type] pair, a second damaged copy in the same
second, claims whose ids disagree with their keys, an epoch a reader
already knows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import helpers
from tests.helpers import Node
from vgpu_driver.cmd import main
from vgpu_driver.records.store import StateRecordCorrupt, StateStore

PARENT = "pci_0000_86_00_0"  # m10: nvidia-36
FREE_ON_86 = "386818c0-9f18-5b12-8c04-386dbef1b1ab"
NOT_UTF8 = b'{"epoch": 1, "claims": {}, "note": "caf\xe9"}'


@pytest.mark.parametrize("record", ["mdev-parents", "provider-traits"])
def test_a_cache_record_with_a_non_utf8_byte_is_moved_aside(
    make_conf, tmp_path, record
):
    state = tmp_path / "state"
    state.mkdir()
    (state / f"{record}.json").write_bytes(b'{"x": "\xff"}')
    n = Node(make_conf, state)  # constructs and reports
    assert n.tree.data(f"node1_{PARENT}").inventory
    [moved] = state.glob(f"{record}.json.corrupt-*")
    assert moved.read_bytes() == b'{"x": "\xff"}'


@pytest.mark.parametrize(
    "where",
    [
        ["pci_0000_86_00_0"],
        ["pci_0000_86_00_0", 36],
        [36, "nvidia-35"],
        ["a", "b", "c"],
        "86",  # two characters: a string is no pair
    ],
)
def test_an_mdev_seen_that_is_no_parent_type_pair_is_moved_aside(
    make_conf, tmp_path, where
):
    """An entry of the mdevs seen that is not a [parent, type] pair of
    strings (a hand edit): the record is moved aside and rebuilt, not
    read as half an entry or a traceback."""
    state = tmp_path / "state"
    state.mkdir()
    text = json.dumps({FREE_ON_86: where})
    (state / "mdev-parents.json").write_text(text)
    n = Node(make_conf, state)
    assert n.tree.data(f"node1_{PARENT}").inventory
    [moved] = state.glob("mdev-parents.json.corrupt-*")
    assert moved.read_text() == text


def test_a_claims_record_with_a_non_utf8_byte_is_corrupt_and_kept(
    make_conf, tmp_path
):
    state = tmp_path / "state"
    n = Node(make_conf, state)
    (state / "claims.json").write_bytes(NOT_UTF8)
    with pytest.raises(StateRecordCorrupt, match=r"claims\.json"):
        n.driver.allocate_mdevs("i1", n.alloc((PARENT, 1)))
    assert (state / "claims.json").read_bytes() == NOT_UTF8
    done = n.driver.init_host()
    [moved] = done["records_moved_aside"]
    assert Path(moved).read_bytes() == NOT_UTF8


def test_restore_moves_a_non_utf8_record_aside_without_a_traceback(
    tmp_path, capsys
):
    state = tmp_path / "state"
    state.mkdir()
    (state / "claims.json").write_bytes(NOT_UTF8)
    (state / "vf-types.json").write_bytes(b"\xfe\xff")
    conf = tmp_path / "nova.conf"
    conf.write_text(
        helpers.load("l40-sriov").config
        + f"\n[devices]\nstate_path = {state}\n"
        if "[devices]" not in helpers.load("l40-sriov").config
        else helpers.load("l40-sriov").config.replace(
            "[devices]", f"[devices]\nstate_path = {state}", 1
        )
    )
    rc = main.main(
        [
            "--config-file",
            str(conf),
            "--host-description",
            "l40-sriov",
            "restore",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "Traceback" not in out + err
    assert len(list(state.glob("claims.json.corrupt-*"))) == 1
    assert len(list(state.glob("vf-types.json.corrupt-*"))) == 1


def test_a_second_damaged_copy_in_the_same_second_keeps_the_first(tmp_path):
    store = StateStore(tmp_path)
    (tmp_path / "claims.json").write_text("first")
    first = store.quarantine("claims")
    (tmp_path / "claims.json").write_text("second")
    second = store.quarantine("claims")
    assert first is not None and second is not None
    assert first != second
    assert first.read_text() == "first"
    assert second.read_text() == "second"


def test_claims_whose_ids_disagree_with_their_keys_are_corrupt(
    make_conf, tmp_path
):
    state = tmp_path / "state"
    n = Node(make_conf, state)
    claim = {
        "kind": "mdev",
        "id": FREE_ON_86,
        "parent": PARENT,
        "type_id": "nvidia-36",
        "created": False,
        "instance": "i1",
        "purpose": "spawn",
    }
    (state / "claims.json").write_text(
        json.dumps({"epoch": 5, "claims": {"another-device": claim}})
    )
    with pytest.raises(StateRecordCorrupt, match="inconsistent"):
        n.driver.binder.claims()


def test_a_reader_never_sees_an_epoch_it_knew_after_a_record_moved_aside(
    make_conf, tmp_path
):
    """A binder read epoch 1 (what a counter would write first). The
    record is moved aside and another binder writes: the first must know
    the host changed, whatever epoch the new record starts from."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "claims.json").write_text('{"epoch": 1, "claims": {}}')
    reader = Node(make_conf, state)
    assert not reader.driver.binder.view_is_stale()
    (state / "claims.json").write_text("damaged")
    assert StateStore(state).quarantine("claims") is not None
    writer = Node(make_conf, state)
    writer.driver.allocate_mdevs("i1", writer.alloc((PARENT, 1)))
    epoch = json.loads((state / "claims.json").read_text())["epoch"]
    assert epoch != 1
    assert reader.driver.binder.view_is_stale()


def test_two_writers_of_the_placement_record_keep_the_newer_generation(
    tmp_path,
):
    """Two syncers of one node save what Placement holds: each save is
    merged into the record as it is on disk, under the lock, and for a
    provider both know the newer generation wins; other nodes' entries
    stay."""
    from vgpu_driver.records.placement import PlacementRecord

    def entry(generation):
        return {
            "name": "node1_p",
            "parent_uuid": None,
            "generation": generation,
            "inventory": {},
            "traits": [],
        }

    first = PlacementRecord(StateStore(tmp_path), "node1")
    late = PlacementRecord(StateStore(tmp_path), "node1")  # another process
    other_node = PlacementRecord(StateStore(tmp_path), "node2")
    other_node.save({"n2": entry(1)})
    first.save({"u1": entry(5)})
    late.save({"u1": entry(3), "u2": entry(1)})
    assert first.load() == {"u1": entry(5), "u2": entry(1)}
    assert other_node.load() == {"n2": entry(1)}


@pytest.mark.parametrize("dropped", ["name", "generation", "inventory"])
def test_a_placement_entry_missing_a_field_is_moved_aside(tmp_path, dropped):
    """What Placement held, cut by a hand edit: the record is moved aside
    (Placement is read again), not read into a KeyError later."""
    from vgpu_driver.records.placement import PlacementRecord

    entry = {
        "name": "node1_p",
        "parent_uuid": None,
        "generation": 1,
        "inventory": {},
        "traits": [],
    }
    del entry[dropped]
    (tmp_path / "placement.json").write_text(
        json.dumps({"node1": {"u1": entry}})
    )
    assert PlacementRecord(StateStore(tmp_path), "node1").load() == {}
    [moved] = tmp_path.glob("placement.json.corrupt-*")
    assert json.loads(moved.read_text()) == {"node1": {"u1": entry}}


@pytest.mark.parametrize("record", [[1, 2], {"an-mdev": 1}, "an-mdev"])
def test_a_made_record_that_is_not_a_list_of_ids_is_corrupt(
    make_conf, tmp_path, record
):
    """The claims list the devices this library made (never handed to
    another manager's care): a list that is not of device ids is
    refused, never taken for the ids it happens to hold, and the claims
    moved aside at init_host."""
    state = tmp_path / "state"
    n = Node(make_conf, state)
    n.driver.allocate_mdevs("i1", n.alloc((PARENT, 1)))
    written = json.loads((state / "claims.json").read_text())
    written["made"] = record
    (state / "claims.json").write_text(json.dumps(written))
    with pytest.raises(StateRecordCorrupt, match=r"claims\.json"):
        Node(make_conf, state)  # a refresh of a new driver reads it
    done = n.driver.init_host()
    moved = [p for p in done["records_moved_aside"] if "claims.json" in p]
    assert json.loads(Path(moved[0]).read_text()) == written


@pytest.mark.parametrize("record", [[1, 2], {"an-mdev": 1}, "an-mdev"])
def test_an_earlier_release_s_made_record_not_of_ids_is_corrupt(
    make_conf, tmp_path, record
):
    """Records of the release before this one list the devices made in
    ``made.json`` alone (its claims snapshot lists none): one that is
    not a list of device ids is refused and moved aside at init_host."""
    state = tmp_path / "state"
    n = Node(make_conf, state)
    n.driver.allocate_mdevs("i1", n.alloc((PARENT, 1)))
    written = json.loads((state / "claims.json").read_text())
    del written["made"]
    (state / "claims.json").write_text(json.dumps(written))
    (state / "claims.journal").write_text("")
    (state / "made.json").write_text(json.dumps(record))
    with pytest.raises(StateRecordCorrupt, match=r"made\.json"):
        Node(make_conf, state)  # a refresh of a new driver reads it
    done = n.driver.init_host()
    [moved] = done["records_moved_aside"]
    assert json.loads(Path(moved).read_text()) == record


@pytest.mark.parametrize("number", [True, 0, -1, "1150", None])
def test_a_vf_types_record_with_no_type_number_is_corrupt(
    make_conf, tmp_path, number
):
    """The VF types recorded (restored at boot) are NVIDIA vGPU type
    numbers: a flag, zero (a VF cleared is not recorded), a negative
    number or a string is refused, never written to a VF; a number is
    read."""
    state = tmp_path / "state"
    Node(make_conf, state)
    record = state / "vf-types.json"
    record.write_text(json.dumps({"0000:41:00.4": 1150}))
    Node(make_conf, state)  # read
    record.write_text(json.dumps({"0000:41:00.4": number}))
    with pytest.raises(StateRecordCorrupt, match=r"vf-types\.json"):
        Node(make_conf, state)
