"""Rules a bind and a release keep, each with a test that fails when the
rule is taken out: nothing given twice, nothing kept that is free."""

from __future__ import annotations

import pytest

from tests.helpers import Node
from vgpu_driver.exception import ClaimConflict, ProviderUnknown
from vgpu_driver.model.device import Guest

P84, P85, P86 = "pci_0000_84_00_0", "pci_0000_85_00_0", "pci_0000_86_00_0"
FREE_ON_86 = "386818c0-9f18-5b12-8c04-386dbef1b1ab"


@pytest.fixture
def n(make_conf, tmp_path):
    return Node(make_conf, tmp_path / "state")


def test_the_same_bind_again_returns_what_it_claimed(n):
    first = n.driver.allocate_mdevs("i1", n.alloc((P85, 1)))
    assert n.driver.allocate_mdevs("i1", n.alloc((P85, 1))) == first


def test_a_bind_with_another_allocation_than_its_claims_is_refused(n):
    [held] = n.driver.allocate_mdevs("i1", n.alloc((P85, 1)))
    with pytest.raises(ClaimConflict) as caught:
        n.driver.allocate_mdevs("i1", n.alloc((P86, 1)))
    message = str(caught.value)
    assert "i1" in message and P85 in message and P86 in message
    # nothing changed: the old claim stays, nothing was made on 86
    assert n.driver.binder.claims()[held.id]["parent"] == P85
    with pytest.raises(ClaimConflict):
        n.driver.allocate_mdevs("i1", n.alloc((P85, 2)))


def test_a_bind_checks_the_allocation_s_class_against_the_provider_s(
    make_conf, tmp_path
):
    """VGPU asked of a CUSTOM_MLX5 provider: the allocation does not
    match what the provider stands for."""
    m = Node(make_conf, tmp_path / "mlx5", "mlx5")
    rp = m.rp("pci_0000_3b_00_0")
    with pytest.raises(ProviderUnknown):
        m.driver.allocate_mdevs("i2", {rp: {"resources": {"VGPU": 1}}})
    assert m.driver.binder.claims() == {}
    [device] = m.driver.allocate_mdevs(
        "i2", {rp: {"resources": {"CUSTOM_MLX5": 1}}}
    )
    assert device.parent == "pci_0000_3b_00_0"


def test_free_mdevs_never_lists_claimed_ones(n, make_conf, tmp_path):
    """Claimed here, or by another process of the host (whose claims
    this driver's view of the host does not show yet)."""
    other = Node(make_conf, tmp_path / "state", host=n.host)
    assert FREE_ON_86 in n.driver.free_mdevs(P86)
    [device] = other.driver.allocate_mdevs("i1", other.alloc((P86, 1)))
    assert device.id == FREE_ON_86
    assert FREE_ON_86 not in n.driver.free_mdevs()
    assert FREE_ON_86 not in n.driver.free_mdevs(P86, ["nvidia-36"])
    assert FREE_ON_86 not in other.driver.free_mdevs()


def test_release_hands_back_the_devices_the_guest_uses(n):
    [device] = n.driver.allocate_mdevs("i1", n.alloc((P86, 1)))
    n.host.note_guest(Guest("i1", "instance-1", (device.id,)))
    n.driver.guest_defined("i1")
    assert device.id not in n.driver.binder.claims()  # the domain holds it
    assert device.id not in n.driver.free_mdevs()
    assert device.id in n.driver.release_mdevs("i1")
    n.host.forget_guest("i1")
    assert device.id in n.driver.free_mdevs(P86)


def test_a_claim_on_a_device_the_guest_uses_is_counted_once(n):
    """A hard reboot claims the devices its guest has: what the plan
    counts as held is the same before and after."""
    inventory = n.driver.discover(rescan_guests=True)
    before = n.driver.held_devices(inventory)
    assert before[P86]["nvidia-36"] == 1
    assert n.driver.hold_devices("b44f0287-605d-58a1-9156-fbe199207c05")
    assert n.driver.held_devices(inventory) == before


def test_units_of_one_bind_count_the_room_the_earlier_ones_took():
    """Two units of one parent whose room is one new mdev and one free
    mdev: the free one, then one made; a third finds no room (the one
    made counts), before anything is made."""
    from vgpu_driver.exception import DeviceCapacityExhausted
    from vgpu_driver.model.binding import ParentView, choose

    parent = ParentView("p", {"t": 1}, {"t": ["free-1"]})
    picked = choose([("p", "t", 2)], {"p": parent}, {}, busy=set())
    assert [(d.id == "free-1", d.created) for d in picked] == [
        (True, False),
        (False, True),
    ]
    with pytest.raises(DeviceCapacityExhausted):
        choose([("p", "t", 3)], {"p": parent}, {}, busy=set())
    with pytest.raises(DeviceCapacityExhausted):
        choose([("p", "t", 1), ("p", "t", 2)], {"p": parent}, {}, set())


def test_what_a_claim_takes_from_the_view_is_given_back_once():
    """The binder's view, after a claim dropped: a new mdev's room comes
    back one for one, a typed VF is free again (its type cleared, the
    type creatable on it); a VF the host refused back stays typed."""
    from vgpu_driver.model.binding import BoundDevice, ParentView, PfView
    from vgpu_driver.model.device_view import DeviceView

    parent = ParentView("p", {"t": 2}, {"t": []})
    pf = PfView("pf", {"vf1": 0}, {"vf1": {7}})
    view = DeviceView({"p": parent}, {}, {"pf": pf}, {}, {})
    made = BoundDevice("mdev", "u1", "p", "t", True)
    view.claimed(made)
    assert parent.available["t"] == 1
    view.returned(made, made=True)
    assert parent.available["t"] == 2
    typed = BoundDevice("vf", "vf1", "pf", "nvidia-7", True)
    view.claimed(typed)
    assert pf.vfs["vf1"] == 7
    view.returned(typed, made=True)
    assert pf.vfs["vf1"] == 0
    view.claimed(typed)
    view.released(typed, done=False)  # the host kept its type
    assert pf.vfs["vf1"] == 7
    view.released(typed, done=True)
    assert pf.vfs["vf1"] == 0 and 7 in pf.creatable["vf1"]
    view.claimed(made)
    view.released(made, done=True)  # made, then removed at release
    assert parent.available["t"] == 2


def test_units_on_the_root_go_to_free_mdevs_first_then_the_most_room():
    """Units allocated on the compute node's own provider (before a
    reshape): a parent with a free mdev first, then the one with the
    most room left, each unit counted off; more than all hold, refused
    naming the parents."""
    from vgpu_driver.exception import DeviceCapacityExhausted
    from vgpu_driver.model.binding import spread

    candidates = {"a": "t1", "b": "t1", "c": "t2"}
    room = {"a": [0, 3], "b": [1, 1], "c": [0, 5]}
    assert spread("VGPU", 4, candidates, room) == [
        ("b", "t1", 1),
        ("c", "t2", 1),
        ("c", "t2", 1),
        ("a", "t1", 1),  # 3 each left: the first in name order
    ]
    assert room["b"] == [1, 1]  # the caller's counts are left alone
    assert len(spread("VGPU", 10, candidates, room)) == 10
    with pytest.raises(DeviceCapacityExhausted, match="a, b, c"):
        spread("VGPU", 11, candidates, room)


def test_the_view_counts_free_mdevs_and_room_per_type_and_group():
    """``room``: a GPU's VF parents summed, of the type asked, the busy
    left out; ``free_mdevs`` of the types asked; handing a VF back
    changes the host only when it holds a type."""
    from vgpu_driver.model.binding import BoundDevice, ParentView, PfView
    from vgpu_driver.model.device_view import DeviceView

    parents = {
        "vf1": ParentView("vf1", {"t": 1, "u": 4}, {"t": ["m1", "m2"]}),
        "vf2": ParentView("vf2", {"t": 0}, {"t": ["m3"], "u": ["m4"]}),
        "p": ParentView("p", {"t": 3}, {}),
    }
    pf = PfView("pf", {"typed": 7, "free": 0}, {})
    view = DeviceView(parents, {}, {"pf": pf}, {}, {})
    view.groups = {"gpu": ("vf1", "vf2")}
    room = view.room({"gpu": "t", "p": "t", "gone": "t"}, busy={"m2"})
    assert room == {"gpu": [2, 1], "p": [0, 3]}
    assert view.free_mdevs(None, ["u"], set()) == {"m4"}
    assert view.free_mdevs("vf1", None, {"m1"}) == {"m2"}
    assert view.changes_host(BoundDevice("vf", "typed", "pf", "x"), False)
    assert not view.changes_host(BoundDevice("vf", "free", "pf", "x"), False)
