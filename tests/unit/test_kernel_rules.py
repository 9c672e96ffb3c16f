"""The simulated kernel's rules, one by one (``vgpu_driver/sim/kernel.py``):
what every simulated host and the library's capacity tests are judged
against. The figures are a captured L40S's (48 GB; 4 GB types of 12 a
card, 8 GB types of 6) and a captured A2's (A2-4Q: max_instance=4)."""

from __future__ import annotations

from vgpu_driver.sim import kernel

Q4, A4, Q8, Q48 = 1150, 1151, 1160, 1170  # L40S-4Q, -4A, -8Q, -48Q
CAPACITY = {Q4: 12, A4: 12, Q8: 6, Q48: 1}
SIZES = {Q4: 4, A4: 4, Q8: 8, Q48: 48}


def test_a_homogeneous_parent_has_no_room_beside_another_type():
    room = kernel.available_instances
    assert room("nvidia-35", 16, ["nvidia-35"] * 3, homogeneous=True) == 13
    assert room("nvidia-35", 16, ["nvidia-36"], homogeneous=True) == 0
    assert room("nvidia-35", 16, ["nvidia-36"], homogeneous=False) == 16
    assert room("nvidia-35", 2, ["nvidia-35"] * 3, homogeneous=False) == 0
    both = ["nvidia-35", "nvidia-36"]
    assert room("nvidia-35", 16, both, homogeneous=True) == 0


def test_a_free_vf_of_an_unused_card_lists_every_type_it_can_hold():
    capacities = {**CAPACITY, 1180: 0}  # a type this card holds none of
    assert kernel.creatable_types(0, [0, 0], capacities) == [Q4, A4, Q8, Q48]
    assert kernel.creatable_types(Q4, [Q4, 0], capacities) == []  # typed


def test_one_type_a_card_without_sizes_known():
    """Where no size is known, a free VF beside typed ones lists their
    type while the card holds fewer than its capacity, then nothing."""
    vfs = [Q8] * 5 + [0]
    assert kernel.creatable_types(0, vfs, CAPACITY) == [Q8]
    assert kernel.creatable_types(0, [Q8] * 6 + [0], CAPACITY) == []
    # a type the card cannot hold at all (no capacity given)
    assert kernel.creatable_types(0, [1199, 0], CAPACITY) == []
    # two types placed (by hand): the one most placed
    assert kernel.creatable_types(0, [Q8, Q4, Q8, 0], CAPACITY) == [Q8]


def test_equal_size_mode_lists_every_type_of_the_placed_size():
    sizes = {t: SIZES[t] for t in CAPACITY}
    create = kernel.creatable_types
    vfs = [Q4, Q4, A4, 0]
    assert create(0, vfs, CAPACITY, equal_sizes=sizes) == [Q4, A4]
    full = [Q4] * 8 + [A4] * 4 + [0]
    assert create(0, full, CAPACITY, equal_sizes=sizes) == []
    # a placed type whose size is not known: its type alone
    unknown = {**sizes, Q4: None}
    assert create(0, [Q4, Q4, 0], CAPACITY, equal_sizes=unknown) == [Q4]
    unknown[A4] = None
    assert create(0, [Q4, Q4, 0], CAPACITY, equal_sizes=unknown) == [Q4]
    # two sizes placed (by hand): as where no size is known
    assert create(0, [Q8, Q4, Q8, 0], CAPACITY, equal_sizes=sizes) == [Q8]


def test_mixed_size_mode_fills_the_framebuffer_and_32_vgpus_at_most():
    create = kernel.creatable_types
    # 40 GB placed: an 8 GB type still fits exactly, 48 GB does not
    vfs = [Q8] * 4 + [Q4] * 2 + [0]
    assert create(0, vfs, CAPACITY, sizes=SIZES, board_gb=48) == [Q4, A4, Q8]
    vfs = [Q8] * 5 + [Q4] * 2 + [0]  # 48 GB placed: nothing fits
    assert create(0, vfs, CAPACITY, sizes=SIZES, board_gb=48) == []
    # a type of no size never fits
    assert create(0, [0], {1190: 4}, sizes={1190: 0}, board_gb=48) == []
    # 32 time-sliced vGPUs are the most a card runs, whatever is free
    small = {1195: 64}
    many = [1195] * 32 + [0]
    assert create(0, many, small, sizes={1195: 1}, board_gb=96) == []
    assert create(0, many[1:], small, sizes={1195: 1}, board_gb=96) == [1195]
    # a type at its capacity, framebuffer to spare
    two = [1195, 1195, 0]
    assert create(0, two, {1195: 2}, sizes={1195: 1}, board_gb=96) == []


def test_an_ampere_gpu_holds_one_size_up_to_its_max_instance():
    q4 = "num_heads=4, framebuffer=4096M, max_instance=4"
    descriptions = {
        "nvidia-746": q4,
        "nvidia-750": q4.replace("num_heads=4", "num_heads=1"),
        "nvidia-747": "framebuffer=8192M, max_instance=2",
    }
    room = kernel.gpu_room
    assert room("nvidia-746", q4, ["nvidia-750"] * 3, descriptions) == 1
    assert room("nvidia-746", q4, ["nvidia-747"], descriptions) == 0
    mixed = ["nvidia-746", "nvidia-747"]
    assert room("nvidia-746", q4, mixed, descriptions) == 0
    assert room("nvidia-746", q4, ["nvidia-746"] * 5, descriptions) == 0
    # a type whose description says no max_instance: no room
    assert room("nvidia-746", "framebuffer=4096M", [], descriptions) == 0
