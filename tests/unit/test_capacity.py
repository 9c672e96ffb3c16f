"""A provider never promises more vGPUs than the card can hold.

The figures a card can really hold are NVIDIA's ("maximum vGPUs per
GPU"), which the shipped simulated hosts carry as each type's capacity;
the library must not exceed them, whatever the VF count says."""

from __future__ import annotations

import dataclasses

import pytest

from tests import helpers
from tests.capacity_helpers import Q4, l40s, total_of
from vgpu_driver.model import capacity, naming
from vgpu_driver.model.device import (
    HostInventory,
    PhysicalFunction,
    SriovType,
    remember_types,
)
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim.simulated import SimulatedHost


def sriov_cases() -> list[tuple[str, int, int]]:
    return [
        (name, i, spec.id)
        for name in hostdesc.shipped_names()
        for i, pf in enumerate(hostdesc.load(name).pfs)
        for spec in pf.types
    ]


@pytest.mark.parametrize(("host", "pf_index", "number"), sriov_cases())
def test_no_shipped_card_is_promised_more_than_nvidia_figure(
    host, pf_index, number
):
    """Each type of each shipped SR-IOV card, enabled alone, on the card
    as shipped and emptied: its total never exceeds the vendor's figure."""
    description = hostdesc.load(host)
    spec = description.pfs[pf_index]
    figure = {t.id: t.capacity for t in spec.types}[number]
    empty = description.copy()
    empty.pfs[pf_index].vf_types.clear()
    empty.guests = []
    for state in (description, empty):
        inventory = SimulatedHost(state).discover()
        total, _ = total_of(inventory, naming.sriov_type_id(number), spec.name)
        assert total <= figure, (host, number, total, figure)


RTX = "pci_0001_c8_00_0"


@pytest.mark.parametrize(
    ("number", "figure"),
    [(1521, 24), (1540, 2), (1518, 32), (1523, 16), (1519, 32)],
)
def test_rtx_pro_6000_blackwell_gets_nvidia_figures_not_its_48_vfs(
    number, figure
):
    empty = helpers.load("rtx6000")
    empty.pfs[0].vf_types.clear()
    empty.guests = []
    inventory = SimulatedHost(empty).discover()
    assert len(inventory.pfs[0].vfs) == 48
    assert total_of(inventory, f"nvidia-{number}", RTX) == (figure, None)


def test_a_placed_vgpu_counts_and_the_total_stays_the_card_figure():
    inventory = helpers.simulated_host("rtx6000").discover()
    assert total_of(inventory, "nvidia-1521", RTX) == (24, None)


Q24 = SriovType(1155, "NVIDIA L40S-24Q")


def test_mixed_size_counts_the_framebuffer_other_types_hold():
    """An L40S with a 24Q and a 4Q placed holds 5 more 4Q (6 in all),
    not 12."""
    pf = l40s((1155, Q24.name), (1150, Q4.name), free=(Q4,))
    rooms, notes = capacity.sriov_room(pf)
    assert rooms["nvidia-1150"] == 5 and not notes
    inventory = HostInventory(pfs=(pf,))
    assert total_of(inventory, "nvidia-1150", pf.name) == (6, None)


def test_a_placed_type_no_vf_lists_any_more_is_remembered():
    """Once placed, a type may be listed by no VF; its size still counts,
    from what the card listed before."""
    memory: dict[str, dict[int, SriovType]] = {}
    before = l40s(free=(Q4, Q24))
    remember_types(before, memory)
    after = l40s((1155, ""), free=(Q4,))
    after = dataclasses.replace(after, seen_types=())
    rooms, notes = capacity.sriov_room(remember_types(after, memory))
    assert rooms["nvidia-1150"] == 6 and not notes
    # without the memory, the 24Q's size is unknown: one at a time, and
    # the reason names the placed type, not the 4Q (its name says 4 GB)
    rooms, notes = capacity.sriov_room(after)
    assert rooms["nvidia-1150"] == 1
    assert "nvidia-1155" in notes["nvidia-1150"]
    assert "framebuffer" in notes["nvidia-1150"]
    assert "L40S-4Q" not in notes["nvidia-1150"]


def test_a_type_whose_name_gives_no_size_is_named_in_the_reason():
    odd = SriovType(1190, "NVIDIA L40S-custom")
    rooms, notes = capacity.sriov_room(l40s(free=(odd, Q4)))
    assert (rooms["nvidia-1190"], rooms["nvidia-1150"]) == (1, 12)
    assert "L40S-custom" in notes["nvidia-1190"]
    assert "nvidia-1150" not in notes  # sized: nothing to say
    # placed, its size unknown: what is free is unknown for every type
    rooms, notes = capacity.sriov_room(l40s((1190, odd.name), free=(Q4,)))
    assert rooms["nvidia-1150"] == 1
    assert "nvidia-1190 ('NVIDIA L40S-custom'" in notes["nvidia-1150"]


def test_a_card_full_by_framebuffer_offers_none_whatever_vfs_list():
    """Two 24Q fill the 48 GB: a 4Q the driver still lists (its word
    overstated, as on the dumps that showed 2x-24x) gets no room."""
    pf = l40s((1155, Q24.name), (1155, Q24.name), free=(Q4,))
    rooms, notes = capacity.sriov_room(pf)
    assert rooms["nvidia-1150"] == 0 and not notes  # proven: no reason
    assert total_of(HostInventory(pfs=(pf,)), "nvidia-1150", pf.name)[0] == 0


def unknown_board(free: tuple[SriovType, ...]) -> PhysicalFunction:
    return dataclasses.replace(l40s(free=free), product_id="0x9999")


def test_a_board_nobody_can_size_offers_one_more_and_says_why():
    pf = unknown_board((Q4,))
    inventory = HostInventory(pfs=(pf,))
    total, why = total_of(inventory, "nvidia-1150", pf.name)
    assert total == 1
    assert why is not None and "0x10de:0x9999" in why
    assert "max_instances" in why


def test_max_instances_vouches_for_a_board_nobody_can_size():
    pf = unknown_board((Q4,))
    inventory = HostInventory(pfs=(pf,))
    assert total_of(inventory, "nvidia-1150", pf.name, max_instances=12) == (
        12,
        None,
    )


def test_time_sliced_vgpus_stop_at_32_per_gpu_whatever_the_framebuffer():
    small = SriovType(1145, "NVIDIA L40S-1B")
    pf = l40s(free=(small,))
    rooms, _ = capacity.sriov_room(
        dataclasses.replace(pf, vfs=pf.vfs * 2)  # 64 VFs listing it
    )
    assert rooms["nvidia-1145"] == 32
    # the vGPUs placed count against the 32, whatever their type
    placed = l40s(*[(1145, small.name)] * 10, free=(small,), count=64)
    rooms, _ = capacity.sriov_room(placed)
    assert rooms["nvidia-1145"] == 22


def test_a_vouched_board_past_32_time_sliced_offers_none():
    small = SriovType(1145, "NVIDIA L40S-1B")
    pf = dataclasses.replace(
        l40s(*[(1145, small.name)] * 32, free=(small,), count=64),
        product_id="0x9999",
    )
    rooms, notes = capacity.sriov_room(pf, vouched={"nvidia-1145"})
    assert rooms["nvidia-1145"] == 0 and not notes


def test_what_the_empty_card_holds_leaves_out_what_it_cannot_size():
    """``card_max`` (what a share is of): by the board and each type's
    size, at most 32 time-sliced; never a MIG-backed type, nor one whose
    name gives no size."""
    mig = SriovType(1546, "NVIDIA RTX Pro 6000 Blackwell DC-1-2Q")
    odd = SriovType(1190, "NVIDIA L40S-custom")
    small = SriovType(1145, "NVIDIA L40S-1B")
    pf = l40s(free=(Q4, Q24, small, mig, odd))
    assert capacity.card_max(pf) == {
        "nvidia-1150": 12,
        "nvidia-1155": 2,
        "nvidia-1145": 32,
    }
    assert capacity.card_max(unknown_board((Q4,))) == {}


def test_vf_parents_past_their_max_instance_offer_none():
    assert capacity.gpu_room("gpu", "nvidia-744", 5, 4) == (0, None)
    assert capacity.gpu_room("gpu", "nvidia-744", 3, 4) == (1, None)


def test_a_mig_backed_type_is_never_sized_by_framebuffer_division():
    mig = SriovType(700, "NVIDIA A100D-1-10C")
    pf = dataclasses.replace(l40s(free=(mig,)), product_id="0x20b5")
    rooms, notes = capacity.sriov_room(pf)
    assert rooms["nvidia-700"] == 1
    assert "MIG-backed" in notes["nvidia-700"]


@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("NVIDIA L40S-4Q", capacity.TypeSize(4, False)),
        ("NVIDIA RTX Pro 6000 Blackwell DC-48Q", capacity.TypeSize(48, False)),
        ("NVIDIA A100D-1-10C", capacity.TypeSize(10, True)),
        (
            "NVIDIA RTX Pro 6000 Blackwell DC-2-24Q",
            capacity.TypeSize(24, True),
        ),
        ("NVIDIA L40S-1B", capacity.TypeSize(1, False)),
        ("mystery", None),
    ],
)
def test_type_sizes_are_read_from_nvidia_names(name, size):
    assert capacity.type_size(name) == size


def test_mixed_size_on_the_simulated_card_follows_the_same_rule():
    """The simulated RTX PRO 6000 in mixed-size mode, with a DC-48Q
    placed beside the DC-4Q: 44 GB are left, so DC-4Q's total is 1 + 11
    (the VF count says 47), and after 11 more no VF lists anything."""
    description = helpers.load("rtx6000")
    description.pfs[0].mixed_size = True
    host = SimulatedHost(description)
    host.discover()  # the card listed DC-48Q: its size is known
    host.set_vf_type("0001:c8:00.5", 1540)
    inventory = host.discover()
    assert total_of(inventory, "nvidia-1521", RTX) == (12, None)
    free = [vf.address for vf in inventory.pfs[0].vfs if vf.creatable]
    for vf in free[:11]:
        host.set_vf_type(vf, 1521)
    assert not any(vf.creatable for vf in host.discover().pfs[0].vfs)


def test_the_service_warns_once_why_it_offers_less(
    make_conf, tmp_path, caplog
):
    """Through the whole refresh: the provider of a board nobody can size
    gets one more than in use, and the log says why, once."""
    description = helpers.load("rtx6000")
    description.pfs[0].product_id = "0x9999"
    node = helpers.Node(
        make_conf, tmp_path, "rtx6000", host=SimulatedHost(description)
    )
    provider = node.tree.data(f"node1_{RTX}")
    assert provider.inventory["VGPU"]["total"] == 2
    node.host.set_vf_type("0001:c8:00.5", 1521)  # the tree changes
    node.update()
    provider = node.tree.data(f"node1_{RTX}")
    assert provider.inventory["VGPU"]["total"] == 3
    warnings = [r for r in caplog.records if "what it can prove" in r.message]
    assert len(warnings) == 1 and "0x10de:0x9999" in warnings[0].message


def test_the_board_table_is_keyed_as_sysfs_spells_product_ids():
    """``/sys/bus/pci/devices/<PF>/device`` reads ``0x26ba``: a key spelt
    otherwise would never match, and its board would be unsized."""
    import re

    for product_id, board in capacity.BOARDS.items():
        assert re.fullmatch(r"0x[0-9a-f]{4}", product_id), product_id
        assert board.framebuffer_gb > 0
    l20 = dataclasses.replace(
        l40s(free=(SriovType(1150, "NVIDIA L20-4Q"),)), product_id="0x26BA"
    )
    rooms, notes = capacity.sriov_room(l20)
    assert rooms["nvidia-1150"] == 12 and not notes
