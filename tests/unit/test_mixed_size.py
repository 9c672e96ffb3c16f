"""An NVIDIA SR-IOV card in mixed-size mode serves several enabled types,
a provider each: the first type's provider is named after the card, the
others ``<card>__<type>``, children of it (none holds another's
allocations; the card's stays while any is under it, with no inventory
when its own type has no room). Each
total is what is placed of the type plus what still fits beside what is
placed. The host is ``rtx6000-nvml``: an RTX PRO 6000 (96 GB) with the
figures of a captured ``nvidia-smi vgpu -s -v`` (DC-4Q: 24, DC-48Q: 2).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import helpers
from tests.mixed_size_host import (
    CARD,
    CONFIG,
    SECOND,
    mixed_card,
    planned,
)
from vgpu_driver.exception import DeviceCapacityExhausted
from vgpu_driver.model import check


@pytest.fixture
def card(make_conf, tmp_path):
    return mixed_card(make_conf, tmp_path)


def totals(node):
    return planned(node, "total", "resource_class")


def test_each_type_a_provider_with_what_fits(card):
    assert totals(card) == {
        CARD: (24, "VGPU"),
        SECOND: (2, "CUSTOM_DC_48Q"),
    }
    root = card.tree.data("node1").uuid
    under = card.tree.data(f"node1_{CARD}")
    assert under.parent_uuid == root
    # the second type's provider is under the card's
    assert card.tree.data(f"node1_{SECOND}").parent_uuid == under.uuid
    assert "CUSTOM_NVIDIA_1540" in card.tree.data(f"node1_{SECOND}").traits


def test_a_bind_of_the_second_type_shrinks_the_first(card):
    rp = card.tree.data(f"node1_{SECOND}").uuid
    [vf] = card.driver.allocate_mdevs(
        "i1", {rp: {"resources": {"CUSTOM_DC_48Q": 1}}}
    )
    assert (vf.kind, vf.type_id, vf.parent) == ("vf", "nvidia-1540", CARD)
    # 48 GB placed: 48 GB left, 12 x DC-4Q (not 24), 1 more DC-48Q
    assert totals(card) == {
        CARD: (12, "VGPU"),
        SECOND: (2, "CUSTOM_DC_48Q"),
    }


def test_a_bind_that_no_longer_fits_fails_before_the_host_changes(card):
    """Two schedulers' picks within one refresh: the second DC-48Q fits,
    a third finds no VF that takes it and writes nothing."""
    rp = card.tree.data(f"node1_{SECOND}").uuid
    wanted = {rp: {"resources": {"CUSTOM_DC_48Q": 1}}}
    card.driver.allocate_mdevs("i1", wanted)
    card.driver.allocate_mdevs("i2", wanted)
    before = card.host.discover()
    with pytest.raises(DeviceCapacityExhausted):
        card.driver.allocate_mdevs("i3", wanted)
    assert card.host.discover() == before
    # a full card is not a failing one: its providers are not reserved
    # for a failure, and the first type's has nothing left to offer
    found = planned(card)
    # nothing of DC-4Q fits, none in use: the card's provider stays with
    # no inventory, holding the DC-48Q provider under it
    assert found[CARD].total == 0
    assert card.tree.data(f"node1_{CARD}").inventory == {}
    assert (found[SECOND].total, found[SECOND].reserved) == (2, 0)
    assert (
        card.tree.data(f"node1_{SECOND}").parent_uuid
        == card.tree.data(f"node1_{CARD}").uuid
    )


def test_an_mdev_parent_named_for_two_types_serves_the_first():
    from tests.capacity_helpers import enabled
    from vgpu_driver.model.config import DeviceConfig

    inventory = helpers.simulated_host("demo").discover()
    a = enabled("nvidia-35", addresses=("0000:84:00.0",)).types[0]
    b = enabled("nvidia-36", addresses=("0000:84:00.0",)).types[0]
    config = DeviceConfig((a, b))
    [problem] = [
        p
        for p in check.host_problems(config, inventory)
        if "serves one" in str(p)
    ]
    assert problem.severity == "error" and "nvidia-35" in str(problem)
    # it names the section and the address to remove there
    assert (problem.section, problem.option, problem.value) == (
        b.group,
        "device_addresses",
        "0000:84:00.0",
    )
    from vgpu_driver.model.inventory import plan_providers

    plans = plan_providers("cn", config, inventory, held={})
    assert {p.type_id for p in plans if p.device == "pci_0000_84_00_0"} == {
        "nvidia-35"
    }


def test_the_host_adapter_refuses_a_type_the_vf_no_longer_lists(tmp_path):
    """Read through sysfs: a VF whose creatable list lacks the type is
    not written (DeviceNoRoom: a full card, not a failing one)."""
    from vgpu_driver.exception import DeviceNoRoom
    from vgpu_driver.host.sysfs import SysfsTree

    _uri, sysfs = helpers.hostdesc.materialize(
        helpers.load("l40-sriov"), tmp_path
    )
    vf = sysfs / "bus/pci/devices/0000:41:04.3/nvidia"
    (vf / "creatable_vgpu_types").write_text("ID    : vGPU Name\n")
    with pytest.raises(DeviceNoRoom, match="creatable"):
        SysfsTree(str(sysfs)).set_vf_type("0000:41:04.3", 1150)
    assert (vf / "current_vgpu_type").read_text().strip() == "0"


@pytest.mark.parametrize(
    ("short", "found"),
    [
        ("pci_0001_c8_00_0", ("pci_0001_c8_00_0", None)),
        ("pci_0001_c8_00_0__nvidia-1540", ("pci_0001_c8_00_0", "nvidia-1540")),
        ("mtty__mtty-2", ("mtty", "mtty-2")),
    ],
)
def test_a_provider_name_says_its_device_and_type(short, found):
    """What audit and the kept-while-in-use rule read back from a
    provider's name (the type's own providers count as the device's)."""
    from vgpu_driver.model import naming

    assert naming.provider_device(short) == found
    device, type_id = found
    if type_id:
        assert naming.type_provider_name("n", device, type_id) == f"n_{short}"


def test_a_type_dropped_while_in_use_is_kept_on_its_own_provider(card):
    """DC-48Q (both types in VGPU here) removed from the configuration
    while a guest's VF has it: its provider stays, reserved, holding that
    one; the card's own provider goes on offering DC-4Q beside it."""
    card.conf.set_override("mdev_class", "VGPU", "mdev_nvidia-1540")
    card.driver.reload_config()
    card.update()
    rp = card.tree.data(f"node1_{SECOND}").uuid
    card.driver.allocate_mdevs("i1", {rp: {"resources": {"VGPU": 1}}})
    card.conf.set_override("enabled_mdev_types", ["nvidia-1521"], "devices")
    card.driver.reload_config()
    found = planned(card, "total", "reserved", "type_id")
    assert found == {
        CARD: (12, 0, "nvidia-1521"),
        SECOND: (1, 1, "nvidia-1540"),
    }
    assert planned(card)[SECOND].reason == (
        "its device no longer serves an enabled type but 1 device(s) are "
        "still in use"
    )
    # still under the card's provider
    assert planned(card)[SECOND].parent == f"node1_{CARD}"
    assert (
        card.tree.data(f"node1_{SECOND}").parent_uuid
        == card.tree.data(f"node1_{CARD}").uuid
    )


def test_a_type_dropped_while_in_use_keeps_its_class(card):
    """DC-48Q in CUSTOM_DC_48Q, dropped while in use: its provider keeps
    that class (the allocation Placement holds is of it), not VGPU."""
    rp = card.tree.data(f"node1_{SECOND}").uuid
    card.driver.allocate_mdevs("i1", {rp: {"resources": {"CUSTOM_DC_48Q": 1}}})
    card.conf.set_override("enabled_mdev_types", ["nvidia-1521"], "devices")
    card.driver.reload_config()
    found = planned(card, "total", "reserved", "type_id", "resource_class")
    assert found[SECOND] == (1, 1, "nvidia-1540", "CUSTOM_DC_48Q")
    inventory = card.tree.data(f"node1_{SECOND}").inventory
    assert inventory["CUSTOM_DC_48Q"]["reserved"] == 1


def test_the_first_type_dropped_keeps_the_cards_provider_over_the_rest(
    card,
):
    """The card's own type no longer enabled, a DC-48Q in use under it:
    the card's provider stays (no inventory) so its child is not
    orphaned; the second type dropped too, nothing in use, both go,
    the child first."""
    rp = card.tree.data(f"node1_{SECOND}").uuid
    card.driver.allocate_mdevs("i1", {rp: {"resources": {"CUSTOM_DC_48Q": 1}}})
    card.conf.set_override("enabled_mdev_types", ["nvidia-1540"], "devices")
    card.conf.set_override(
        "device_addresses", ["0002:00:00.0"], "mdev_nvidia-1521"
    )
    card.driver.reload_config()
    found = planned(card, "total", "reserved")
    assert found[SECOND] == (2, 0)
    assert found[CARD] == (0, 0)
    assert card.tree.data(f"node1_{CARD}").inventory == {}
    assert (
        card.tree.data(f"node1_{SECOND}").parent_uuid
        == card.tree.data(f"node1_{CARD}").uuid
    )
    card.driver.release_mdevs("i1")
    card.conf.set_override(  # DC-48Q served elsewhere: the card nothing
        "device_addresses", ["0002:00:00.0"], "mdev_nvidia-1540"
    )
    card.driver.reload_config()
    card.driver.update_provider_tree(card.tree, "node1")
    assert not card.tree.exists(f"node1_{SECOND}")
    assert not card.tree.exists(f"node1_{CARD}")


def test_a_new_enabled_order_leaves_each_type_on_its_provider(card):
    """DC-48Q listed first after a guest got one on its own provider: it
    stays there (where the allocation is), the card's provider keeps
    DC-4Q (its trait). The card is offered no more DC-48Q than it holds:
    the unit in use is not counted on a second provider."""
    rp = card.tree.data(f"node1_{SECOND}").uuid
    card.driver.allocate_mdevs("i1", {rp: {"resources": {"CUSTOM_DC_48Q": 1}}})
    card.conf.set_override(
        "enabled_mdev_types", ["nvidia-1540", "nvidia-1521"], "devices"
    )
    card.driver.reload_config()
    found = planned(card, "total", "reserved", "type_id")
    assert found == {
        CARD: (12, 0, "nvidia-1521"),
        SECOND: (2, 0, "nvidia-1540"),
    }


def test_a_type_enabled_first_leaves_the_cards_type_on_the_card(card):
    """DC-6Q enabled before the two, on the same card, while a guest has
    a DC-4Q on the card's provider: DC-4Q stays there (the trait it
    carries says so), DC-6Q gets a provider of its own under it."""
    rp = card.tree.data(f"node1_{CARD}").uuid
    card.driver.allocate_mdevs("i1", {rp: {"resources": {"VGPU": 1}}})
    [path] = card.conf.config_file
    Path(path).write_text(
        CONFIG.replace("= nvidia-1521,", "= nvidia-1523, nvidia-1521,")
        + "[mdev_nvidia-1523]\ndevice_addresses = 0001:c8:00.0\n"
    )
    card.conf.reload_config_files()
    card.driver.reload_config()
    found = planned(card, "type_id", "parent")
    assert found == {
        CARD: ("nvidia-1521", None),
        SECOND: ("nvidia-1540", f"node1_{CARD}"),
        f"{CARD}__nvidia-1523": ("nvidia-1523", f"node1_{CARD}"),
    }


def test_the_inventory_table_shows_the_other_types_under_the_card(
    card, capsys
):
    """``vgpu-driver inventory``: the DC-48Q provider indented under the
    card's, which, full of DC-48Q, is listed with no inventory."""
    from vgpu_driver.cmd import inventory as inventory_cmd

    rp = card.tree.data(f"node1_{SECOND}").uuid
    for guest in ("i1", "i2"):
        card.driver.allocate_mdevs(
            guest, {rp: {"resources": {"CUSTOM_DC_48Q": 1}}}
        )
    card.update()
    inventory_cmd.print_table(inventory_cmd.tree_report(card.tree, "node1"))
    lines = capsys.readouterr().out.splitlines()
    [own] = [line for line in lines if line.startswith(f"node1_{CARD} ")]
    assert own.split()[1:4] == ["-", "0", "0"]
    [child] = [line for line in lines if SECOND in line]
    assert child.startswith(f"  └ node1_{SECOND}")
    assert child.split()[2:5] == ["CUSTOM_DC_48Q", "2", "0"]


def test_the_shipped_mixed_size_host_reports_both_types_split(capsys):
    """``--host-description rtx6000-mixed``: a DC-4Q in use, DC-4Q and
    DC-48Q at half the card each; DC-48Q's provider under the card's."""
    import json

    from vgpu_driver.cmd import main as cli

    argv = ["--host-description", "rtx6000-mixed", "inventory"]
    assert cli.main([*argv, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    found = {
        p["name"].removeprefix("rtx6000-mixed_"): (
            p["parent"],
            p["inventories"],
        )
        for p in report["providers"][1:]
    }
    card, second = found[CARD], found[SECOND]
    assert card[0] == "rtx6000-mixed"
    # 1 in use + 23 that fit; its half is 12, so 11 more are offered
    assert (card[1]["VGPU"]["total"], card[1]["VGPU"]["reserved"]) == (24, 12)
    assert second[0] == f"rtx6000-mixed_{CARD}"
    # 92 GB free: one DC-48Q fits, its half of the card's two
    dc48 = second[1]["CUSTOM_DC_48Q"]
    assert (dc48["total"], dc48["reserved"]) == (1, 0)


def test_a_class_changed_in_use_is_offered_once_released(card):
    """DC-48Q moved from CUSTOM_DC_48Q to CUSTOM_BIG while a guest holds
    one: kept in CUSTOM_DC_48Q, all reserved, on a running service; the
    guest released, the next pass offers CUSTOM_BIG."""
    rp = card.tree.data(f"node1_{SECOND}").uuid
    card.driver.allocate_mdevs("i1", {rp: {"resources": {"CUSTOM_DC_48Q": 1}}})
    card.conf.set_override("mdev_class", "CUSTOM_BIG", "mdev_nvidia-1540")
    card.driver.reload_config()
    fields = ("total", "reserved", "resource_class")
    assert planned(card, *fields)[SECOND] == (1, 1, "CUSTOM_DC_48Q")
    assert planned(card, *fields)[SECOND] == (1, 1, "CUSTOM_DC_48Q")
    card.driver.release_mdevs("i1")
    assert planned(card, *fields)[SECOND] == (2, 0, "CUSTOM_BIG")
    assert list(card.tree.data(f"node1_{SECOND}").inventory) == ["CUSTOM_BIG"]


def test_a_class_change_waits_for_what_is_in_use_or_allocated():
    from vgpu_driver.model.kept import class_changed

    # guests use two, or Placement holds two of the old class
    assert class_changed("CUSTOM_BIG", ["VGPU"], 2, {}) == ("VGPU", 2)
    assert class_changed("CUSTOM_BIG", ["VGPU"], 0, {"VGPU": 2}) == (
        "VGPU",
        2,
    )
    assert class_changed("CUSTOM_BIG", ["VGPU"], 0, {"CUSTOM_BIG": 2}) is None
    assert class_changed("CUSTOM_BIG", ["VGPU"], 0, {}) is None  # free
    assert class_changed("VGPU", ["VGPU"], 3, {}) is None  # unchanged
    assert class_changed("VGPU", [], 3, {}) is None  # nothing of its own
    # it offers the new class already: nothing to wait for
    assert class_changed("CUSTOM_BIG", ["VGPU", "CUSTOM_BIG"], 2, {}) is None
