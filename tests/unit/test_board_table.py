"""The board table the capacity rules size a card by
(:data:`vgpu_driver.model.capacity.BOARDS`) against what real cards of
those boards printed (the shipped captures, each naming its source).

A board whose figure is off by a gigabyte still passes every test that
divides it by a type's size; held to the captures, it does not. The
boards with no capture shipped are held to NVIDIA's type tables alone
(their figures are facts copied, not tested here). Where NVML is read,
its word replaces the table's."""

from __future__ import annotations

import dataclasses
import re

from tests.capacity_helpers import Q4, l40s
from vgpu_driver.model import capacity, nvml
from vgpu_driver.model.device import (
    SriovType,
)
from vgpu_driver.sim import captures

_MIG_PROFILE = re.compile(r"MIG +\d+g\.(\d+)gb ")
_MDEV_FIGURES = re.compile(r"framebuffer=(\d+)M, .*max_instance=(\d+)")


def _gb(product_id: str) -> int:
    board = capacity.board_of(product_id)
    assert board is not None, product_id
    return board.framebuffer_gb


def test_rtx_pro_6000_is_what_its_nvidia_smi_said():
    """10de:2bb5: the framebuffer its time-sliced types share (size
    times ``Max Instances``), and what the table makes of each type's
    size is NVIDIA's own ``Max Instances``."""
    said = captures.vgpu_types(captures.read("rtx-pro-6000-vgpu-s-v.txt"))
    sliced = [t for t in said if t.gi_profile is None]
    assert sliced
    whole_mib = max(t.framebuffer_mib * t.max_instances for t in sliced)
    assert _gb("0x2bb5") * 1024 == whole_mib
    for t in sliced:
        size = capacity.type_size(t.name)
        assert size is not None and size.framebuffer_gb * 1024 == (
            t.framebuffer_mib
        )
        assert t.max_instances == min(
            _gb("0x2bb5") // size.framebuffer_gb, capacity.MAX_TIME_SLICED
        ), t.name


def test_l40s_is_its_largest_type_listed_on_a_free_vf():
    """10de:26b9: a free VF lists the 1:1 type, the whole board."""
    listed = captures.creatable(captures.read("l40s-creatable-vgpu-types.txt"))
    sizes = [capacity.type_size(name) for _id, name in listed]
    whole = max(s.framebuffer_gb for s in sizes if s and not s.mig_backed)
    assert _gb("0x26b9") == whole


def test_a2_is_each_type_times_its_max_instance():
    """10de:25b6: every type's framebuffer times its ``max_instance``
    (its mdev description) is the board's."""
    text = captures.read("a2-vf-mdev-supported-types.txt")
    figures = {
        int(mib) * int(count) for mib, count in _MDEV_FIGURES.findall(text)
    }
    assert figures == {_gb("0x25b6") * 1024}


def test_h100_nvl_is_its_whole_gpu_instance():
    """10de:2321: the GPU instance profile of all seven slices."""
    text = captures.read("h100-nvl-mig.txt")
    profiles = [int(gb) for gb in _MIG_PROFILE.findall(text)]
    assert profiles and _gb("0x2321") == max(profiles)


# NVML's word, where it is read, replaces the table's.

_MIG = SriovType(1160, "NVIDIA L40S-1-12C")  # a MIG-backed name


def _gpu(*types: nvml.NvmlType, mig: bool = False) -> nvml.NvmlGpu:
    return nvml.NvmlGpu(
        "0000:41:00.0",
        types=types,
        creatable=frozenset(t.type_id for t in types),
        mig=mig,
    )


def test_what_the_empty_card_holds_is_nvml_max_instances_when_read():
    """The table makes 12 of a 4 GB type on a 48 GB board; a manager
    whose NVML says 10 is believed, and its MIG-backed type is no
    share of the card."""
    pf = l40s(free=(Q4,), count=4)
    assert capacity.card_max(pf) == {"nvidia-1150": 12}
    said = _gpu(
        nvml.NvmlType(1150, Q4.name, 4096, 10),
        nvml.NvmlType(1160, _MIG.name, 12288, 4, gi_profile=19),
    )
    assert capacity.card_max(pf, said) == {"nvidia-1150": 10}


def test_nvml_room_says_why_only_when_it_limits():
    """A type NVML lets fit on every VF that lists it: no note. A
    MIG-backed type with MIG off: no room, and the note says what to
    do."""
    pf = l40s(free=(Q4, _MIG), count=4)
    rooms, notes = capacity.sriov_room(
        pf,
        gpu=_gpu(
            nvml.NvmlType(1150, Q4.name, 4096, 12),
            nvml.NvmlType(1160, _MIG.name, 12288, 4, gi_profile=19),
        ),
    )
    assert rooms == {"nvidia-1150": 4, "nvidia-1160": 0}
    assert list(notes) == ["nvidia-1160"]
    assert "enable MIG" in notes["nvidia-1160"]
    # NVML's word that no more fits now (not creatable): no room, and
    # nothing to explain
    full = dataclasses.replace(
        _gpu(nvml.NvmlType(1150, Q4.name, 4096, 12)), creatable=frozenset()
    )
    assert capacity.sriov_room(l40s(free=(Q4,), count=4), gpu=full) == (
        {"nvidia-1150": 0},
        {},
    )


def test_a_board_not_in_the_table_is_said_only_where_it_costs_room():
    """An unknown board offers one more than in use: with three VFs
    listing the type that is less than they offer, and said; with one,
    it is all they offer, and nothing is hidden to say."""
    for count, noted in ((3, True), (1, False)):
        pf = dataclasses.replace(
            l40s(free=(Q4,), count=count), product_id="0x9999"
        )
        rooms, notes = capacity.sriov_room(pf)
        assert rooms == {"nvidia-1150": 1}
        assert ("nvidia-1150" in notes) is noted, count
        assert (
            not noted or "not in the library's table" in notes["nvidia-1150"]
        )
