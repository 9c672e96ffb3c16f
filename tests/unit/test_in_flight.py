"""A damaged claims record must not lose a spawn in flight: after the
record is moved aside, Placement's allocations without a guest keep
their devices from being handed out (#20, item 4)."""

from __future__ import annotations

import textwrap

from tests.helpers import Node, load
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.model.claims import deal_in_flight
from vgpu_driver.model.device import Guest

PARENT = "pci_0000_86_00_0"  # m10: nvidia-36, one free mdev, room for more
PF = "pci_0000_41_00_0"  # l40-sriov


def _lose_claims(state):
    (state / "claims.json").write_text("{ not json")


def _restart(make_conf, state, host, name="m10"):
    """The service starts again: init_host first (it moves the damaged
    record aside), then its refreshes."""
    conf = make_conf(textwrap.dedent(load(name).config))
    conf.set_override("state_path", str(state), "devices")
    done = VgpuDriver(conf, host).init_host()
    assert any("claims" in p for p in done["records_moved_aside"])
    restarted = Node(make_conf, state, name, host=host)
    assert restarted.driver.binder.claims() == {}
    return restarted


def test_a_spawn_in_flight_keeps_its_mdev_after_the_claims_are_lost(
    make_conf, tmp_path
):
    state = tmp_path / "state"
    n = Node(make_conf, state)
    [mine] = n.driver.allocate_mdevs("i1", n.alloc((PARENT, 1)))
    spare = n.driver.create_free_mdev(PARENT)
    _lose_claims(state)
    restarted = _restart(make_conf, state, n.host)
    held = restarted.driver.hold_in_flight({"i1": {PARENT: 1}})
    # which of the two is i1's is not known: both are held
    assert sorted(held["i1"]) == sorted([mine.id, spare])
    # no other bind, in this process or another, is given i1's mdev
    other = Node(make_conf, state, host=n.host)
    for i in range(3):
        [got] = other.driver.allocate_mdevs(f"o{i}", other.alloc((PARENT, 1)))
        assert got.id != mine.id
    # i1's guest is defined with its mdev: what was held beside it goes
    n.host.note_guest(Guest("i1", "instance-1", (mine.id,)))
    restarted.driver.guest_defined("i1")
    assert "i1" not in {
        c["instance"] for c in restarted.driver.binder.claims().values()
    }
    assert spare in restarted.driver.free_mdevs(PARENT)


def test_without_the_hold_the_next_bind_takes_the_spawn_s_mdev(
    make_conf, tmp_path
):
    """What the hold prevents (the bug as it was)."""
    state = tmp_path / "state"
    n = Node(make_conf, state)
    [mine] = n.driver.allocate_mdevs("i1", n.alloc((PARENT, 1)))
    _lose_claims(state)
    restarted = _restart(make_conf, state, n.host)
    [got] = restarted.driver.allocate_mdevs("i2", restarted.alloc((PARENT, 1)))
    assert got.id == mine.id


def test_consumers_with_a_guest_or_claims_are_not_in_flight(
    make_conf, tmp_path
):
    state = tmp_path / "state"
    n = Node(make_conf, state)
    guests = {g.uuid for g in n.host.discover().guests}
    [bound] = n.driver.allocate_mdevs("i3", n.alloc((PARENT, 1)))
    spare = n.driver.create_free_mdev(PARENT)
    some_guest = sorted(guests)[0]
    held = n.driver.hold_in_flight(
        {some_guest: {PARENT: 1}, "i3": {PARENT: 1}}
    )
    assert held == {}
    assert set(n.driver.binder.claims()) == {bound.id}
    assert spare in n.driver.free_mdevs(PARENT)


def test_the_instance_binding_again_chooses_afresh(make_conf, tmp_path):
    """A held guess is not a bind: the instance's next bind (a retry of
    its spawn) drops it and chooses what its allocations ask for."""
    state = tmp_path / "state"
    n = Node(make_conf, state)
    n.driver.allocate_mdevs("i1", n.alloc((PARENT, 1)))
    n.driver.allocate_mdevs("i2", n.alloc((PARENT, 1)))
    _lose_claims(state)
    restarted = _restart(make_conf, state, n.host)
    held = restarted.driver.hold_in_flight({"i1": {PARENT: 1}})
    assert len(held["i1"]) == 2  # both free mdevs: which is i1's is unknown
    [again] = restarted.driver.allocate_mdevs(
        "i1", restarted.alloc((PARENT, 1))
    )
    claims = restarted.driver.binder.claims()
    assert [c["instance"] for c in claims.values()] == ["i1"]
    assert set(claims) == {again.id}
    assert not claims[again.id].get("in_flight")


def test_a_typed_vf_of_a_spawn_in_flight_is_held(make_conf, tmp_path):
    state = tmp_path / "state"
    n = Node(make_conf, state, "l40-sriov")
    [vf] = n.driver.allocate_mdevs("i1", n.alloc((PF, 1)))
    _lose_claims(state)
    restarted = _restart(make_conf, state, n.host, "l40-sriov")
    held = restarted.driver.hold_in_flight({"i1": {PF: 1}})
    assert vf.id in held["i1"]
    [got] = restarted.driver.allocate_mdevs("i2", restarted.alloc((PF, 1)))
    assert got.id != vf.id


def test_free_devices_are_dealt_units_first_then_in_turn():
    dealt = deal_in_flight(
        {"a": {"p": 2}, "b": {"p": 1}, "c": {"q": 1}},
        {"p": ["d1", "d2", "d3", "d4", "d5"], "q": []},
    )
    assert dealt == {"d1": "a", "d2": "a", "d3": "b", "d4": "b", "d5": "a"}
