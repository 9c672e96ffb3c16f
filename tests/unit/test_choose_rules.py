"""What a bind picks (``binding.choose`` and ``spread``, pure): a VF typed
only when it is free and takes the type, a free mdev on any VF parent
of a GPU before a new one, nothing made of a type a parent does not
list, and a device the view does not know refused by name."""

from __future__ import annotations

import pytest

from vgpu_driver.exception import DeviceCapacityExhausted
from vgpu_driver.model.binding import ParentView, PfView, choose


def _picked(chosen):
    return [(d.kind, d.id, d.parent, d.created) for d in chosen]


def test_a_vf_is_typed_only_when_free_and_able_to_take_the_type():
    """nvidia-7 asked of a card whose VFs are: one of another type, one
    of the type a guest has, one untyped that does not list the type, and
    one untyped that does. The last is typed; a second unit finds no
    VF."""
    pf = PfView(
        "pf",
        {"0:1": 5, "0:2": 7, "0:3": 0, "0:4": 0},
        {"0:1": set(), "0:2": set(), "0:3": {5}, "0:4": {5, 7}},
    )
    chosen = choose([("pf", "nvidia-7", 1)], {}, {"pf": pf}, busy={"0:2"})
    assert _picked(chosen) == [("vf", "0:4", "pf", True)]
    with pytest.raises(DeviceCapacityExhausted):
        choose([("pf", "nvidia-7", 2)], {}, {"pf": pf}, busy={"0:2"})


def test_a_vf_already_of_the_type_is_given_before_one_is_typed():
    pf = PfView("pf", {"0:1": 0, "0:2": 7}, {"0:1": {7}, "0:2": set()})
    chosen = choose([("pf", "nvidia-7", 2)], {}, {"pf": pf}, busy=set())
    assert _picked(chosen) == [
        ("vf", "0:2", "pf", False),
        ("vf", "0:1", "pf", True),
    ]


def test_a_free_mdev_on_any_vf_parent_of_a_gpu_comes_before_a_new_one():
    """The GPU's first VF parent has room and no free mdev, its second a
    free mdev: the free one is given first, then one is made on the
    first."""
    parents = {
        "vf1": ParentView("vf1", {"t": 1}, {"t": []}),
        "vf2": ParentView("vf2", {"t": 0}, {"t": ["m2"]}),
    }
    groups = {"gpu": ("vf1", "vf2")}
    chosen = choose([("gpu", "t", 2)], parents, {}, set(), groups)
    assert [(d.id == "m2", d.parent, d.created) for d in chosen] == [
        (True, "vf2", False),
        (False, "vf1", True),
    ]


def test_no_mdev_is_made_of_a_type_the_parent_does_not_list():
    parents = {"p": ParentView("p", {"u": 4}, {})}
    with pytest.raises(DeviceCapacityExhausted):
        choose([("p", "t", 1)], parents, {}, set())


def test_a_device_the_view_does_not_know_is_refused_by_name():
    """A provider whose parent is gone from the host (a stale
    target): refused as capacity exhausted there, not a crash."""
    with pytest.raises(DeviceCapacityExhausted, match="pci_gone"):
        choose([("pci_gone", "t", 1)], {}, {}, set())
