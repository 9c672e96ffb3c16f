"""The pure provider tree (Nova's ProviderTree interface)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vgpu_driver.model import naming
from vgpu_driver.model.provider_tree import ProviderTree

VGPU = {
    "VGPU": {
        "total": 4,
        "reserved": 0,
        "min_unit": 1,
        "max_unit": 4,
        "step_size": 1,
        "allocation_ratio": 1.0,
    }
}


def make_tree():
    tree = ProviderTree()
    tree.new_root("node", "r0", generation=3)
    tree.new_child("node_a", "node", uuid="c1")
    tree.new_child("node_a_x", "c1", uuid="g1")
    tree.new_child("node_b", "r0", uuid="c2")
    return tree


def test_lookups_by_name_or_uuid_and_subtrees_parents_first():
    tree = make_tree()
    assert tree.exists("node_a") and tree.exists("c1")
    assert tree.data("node").generation == 3
    assert tree.data("g1").parent_uuid == "c1"
    assert tree.get_provider_uuids("node") == ["r0", "c1", "c2", "g1"]
    assert tree.get_provider_uuids_in_tree("g1") == ["r0", "c1", "c2", "g1"]
    assert [r.name for r in tree.roots()] == ["node"]


def test_remove_takes_the_subtree():
    tree = make_tree()
    tree.remove("node_a")
    assert not tree.exists("c1") and not tree.exists("g1")
    assert tree.get_provider_uuids() == ["r0", "c2"]


def test_a_root_removed_takes_its_tree_and_frees_its_names():
    """As Nova's tree does when a node goes: the root and all under it
    gone, other roots kept, the names free for a node made again (whose
    new_root returns its uuid, as Nova's does)."""
    tree = make_tree()
    assert tree.new_root("other", "r1") == "r1"
    tree.remove("node")
    assert [r.name for r in tree.roots()] == ["other"]
    assert tree.get_provider_uuids() == ["r1"]
    assert not any(tree.exists(n) for n in ("node", "node_a", "g1", "c2"))
    assert tree.new_root("node", "r0") == "r0"
    assert tree.new_child("node_a", "node", uuid="c1") == "c1"


def test_duplicate_and_unknown_providers_are_errors():
    tree = make_tree()
    with pytest.raises(ValueError, match="already exists"):
        tree.new_child("node_a", "node")
    with pytest.raises(ValueError, match="No such provider"):
        tree.data("nope")
    # a second root with a name or a uuid taken (as Nova's tree refuses)
    with pytest.raises(ValueError, match="already exists"):
        tree.new_root("node", "r1")
    with pytest.raises(ValueError, match="already exists"):
        tree.new_root("other", "r0")


def test_a_generation_given_is_taken_and_none_keeps_the_last():
    """Placement's answers carry the provider's new generation; a change
    made here without one keeps the generation last known."""
    tree = make_tree()
    tree.update_inventory("c1", VGPU, generation=5)
    assert tree.data("c1").generation == 5
    tree.update_inventory("c1", {}, generation=None)
    assert tree.data("c1").generation == 5
    tree.update_traits("c1", ["CUSTOM_A"], generation=6)
    assert tree.data("c1").generation == 6
    tree.update_traits("c1", [], generation=None)
    assert tree.data("c1").generation == 6
    tree.update_aggregates("c1", ["agg1"], generation=7)
    assert tree.data("c1").generation == 7
    tree.update_aggregates("c1", [], generation=None)
    assert tree.data("c1").generation == 7


def test_commands_report_whether_they_changed_anything():
    tree = make_tree()
    assert tree.has_inventory_changed("c1", VGPU)
    assert tree.update_inventory("c1", VGPU) is True
    assert tree.update_inventory("c1", VGPU) is False
    assert tree.update_traits("c1", ["CUSTOM_A"]) is True
    assert tree.update_traits("c1", ["CUSTOM_A"]) is False
    tree.add_traits("c1", "CUSTOM_B")
    assert tree.has_traits("c1", ["CUSTOM_A", "CUSTOM_B"])
    tree.remove_traits("c1", "CUSTOM_A")
    assert tree.have_traits_changed("c1", ["CUSTOM_A"]) is True
    assert tree.have_traits_changed("c1", ["CUSTOM_B"]) is False
    assert tree.update_aggregates("c1", ["agg1"]) is True
    assert tree.data("c1").aggregates == frozenset({"agg1"})


def test_snapshots_are_copies():
    tree = make_tree()
    tree.update_inventory("c1", VGPU)
    snapshot = tree.data("c1")
    snapshot.inventory["VGPU"]["total"] = 99
    assert tree.data("c1").inventory["VGPU"]["total"] == 4


@given(st.uuids(), st.text(st.characters(blacklist_categories=("Cs",))))
def test_child_provider_uuids_are_uuid5_of_the_root_and_the_name(root, name):
    expected = str(uuid.uuid5(root, name))
    for spelled in (str(root), str(root).upper(), root.hex, f"{{{root}}}"):
        assert naming.child_provider_uuid(spelled, name) == expected


@pytest.mark.parametrize(
    "bad", ["", "not-a-uuid", "8f0b2c1e 1d7a 4b6e 9a51 0c3f5e7d9b2"]
)
def test_a_malformed_root_uuid_is_refused_as_uuid_refuses_it(bad):
    with pytest.raises(ValueError):
        naming.child_provider_uuid(bad, "node_pci_0000_84_00_0")
