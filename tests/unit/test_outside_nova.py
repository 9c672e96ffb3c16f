"""A guest outside Nova (a domain without Nova's ``nova:instance``
metadata, defined by hand or by another tool) uses devices Placement
holds no allocation for: they are reserved on their provider, however
the refresh learns of it (a guest's event, with a device change in the
same pass, a full pass)."""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections import Counter

from tests.domains import hand_made_domain_xml
from tests.random_host import RandomHost, tree_figures
from vgpu_driver.model.device import Guest
from vgpu_driver.model.foreign import unaccounted
from vgpu_driver.sim import guest_xml


def _free_on(host, parent):
    seen = host.driver.seen_mdevs()
    return sorted(u for u in host.driver.free_mdevs() if seen[u][0] == parent)


def _define(host, mdevs, nova):
    guest = str(uuid.uuid4())
    xml = hand_made_domain_xml(guest, guest[:8], mdevs, nova=nova)
    host.conn.defineXML(xml)
    host.driver.domain_event(guest, True)
    return guest


def _plan(host, parent):
    [plan] = [p for p in host.driver.last_plans if p.device == parent]
    return plan


def _on_first_parent(seed, tmp_path):
    """A host, its tree, its first parent, that parent's plan and an
    allocation of one unit on its provider."""
    host = RandomHost(random.Random(seed), tmp_path)
    tree = host.service.tree
    parent = host.parents[0].name
    before = _plan(host, parent)
    provider = tree.data(before.name).uuid
    wanted = {provider: {"resources": {before.resource_class: 1}}}
    return host, tree, parent, before, wanted


def _full_pass_agrees(host):
    plans, providers = (
        list(host.driver.last_plans),
        tree_figures(host.service.tree),
    )
    host.driver._refresher._fingerprint = None  # plan the whole host
    host.driver.update_provider_tree(host.service.tree, "bench")
    assert host.driver.last_plans == plans
    assert tree_figures(host.service.tree) == providers


def test_what_a_guest_outside_nova_uses_is_reserved(tmp_path):

    host = RandomHost(random.Random(0), tmp_path)
    tree = host.service.tree
    parent = host.parents[0].name
    before = _plan(host, parent)
    free = _free_on(host, parent)
    # a Nova instance's devices are in its Placement allocation
    _define(host, free[:1], nova=True)
    host.driver.update_provider_tree(tree, "bench")
    assert _plan(host, parent).reserved == before.reserved
    # a guest outside Nova: reserved, told by its event alone
    theirs = _define(host, free[1:3], nova=False)
    host.driver.update_provider_tree(tree, "bench")
    assert _plan(host, parent).reserved == before.reserved + 2
    assert _plan(host, parent).total == before.total
    _full_pass_agrees(host)
    guest_xml.delete(host.conn.lookupByUUIDString(theirs))
    host.driver.domain_event(theirs, False)
    host.driver.update_provider_tree(tree, "bench")
    assert _plan(host, parent) == before


def test_a_provider_held_whole_outside_nova_says_so():
    """(reserved, reason) of a provider of 4 once what Placement does not
    count is reserved: another manager's free mdevs are named first."""
    assert unaccounted("nvidia-35", 4, (0, None), 0, 1) == (1, None)
    reserved, reason = unaccounted("nvidia-35", 4, (1, None), 0, 3)
    assert reserved == 4 and "used by guests outside Nova" in reason
    reserved, reason = unaccounted("nvidia-35", 4, (0, None), 2, 2)
    assert reserved == 4 and "made by another manager" in reason
    # a reason the plan gave stays (a failing device: all reserved)
    assert unaccounted("nvidia-35", 4, (4, "failing"), 1, 1) == (4, "failing")
    # a provider with no room is given no reason here, whether or not
    # something Placement does not count is there
    assert unaccounted("nvidia-35", 0, (0, None), 0, 0) == (0, None)
    assert unaccounted("nvidia-35", 0, (0, None), 1, 0) == (0, None)


def test_a_guest_outside_nova_and_a_device_change_in_one_pass(tmp_path):
    """A guest outside Nova takes a free mdev of one parent while another
    manager makes an mdev on the other, between two refreshes: the pass
    that plans the parent changed alone would miss the first."""
    from vgpu_driver.sim.mdev_devices import mdev_xml

    host = RandomHost(random.Random(1), tmp_path)
    tree = host.service.tree
    first, second = (p.name for p in host.parents[:2])
    before = _plan(host, first)
    _define(host, _free_on(host, first)[:1], nova=False)
    other = next(p for p in host.parents if p.name == second)
    host.conn.nodeDeviceCreateXML(
        mdev_xml(second, other.types[0].id, str(uuid.uuid4())), 0
    )
    host.driver.update_provider_tree(tree, "bench")
    assert _plan(host, first).reserved == before.reserved + 1
    _full_pass_agrees(host)


def test_a_vf_a_guest_outside_nova_is_given_is_reserved(node):
    """A plain SR-IOV GPU (Intel, VFs given as they are): a VF in a guest
    outside Nova is reserved on the GPU's provider; a Nova instance's
    VF is in its allocation."""

    n = node("intel-igpu-sriov")
    [plan] = n.update().values()
    vfs = n.description.other_gpus[0].vf_addresses
    n.host.note_guest(Guest("nova-vm", "instance-1", (), (vfs[0],)))
    n.driver.domain_event("nova-vm", True)
    assert n.update()[plan.device].reserved == plan.reserved
    theirs = Guest("theirs", "by-hand", (), (vfs[1],), nova=False)
    n.host.note_guest(theirs)
    n.driver.domain_event("theirs", True)
    after = n.update()[plan.device]
    assert after == dataclasses.replace(plan, reserved=plan.reserved + 1)


def test_an_nvidia_vf_a_guest_outside_nova_uses_is_reserved(
    make_conf, tmp_path
):
    """An NVIDIA SR-IOV card (L40): a typed VF in a guest outside Nova
    (described so, read so) is reserved on the card's provider."""

    from tests.helpers import Node, load
    from vgpu_driver.sim.simulated import SimulatedHost

    l40 = load("l40-sriov")
    assert l40.guests and l40.guests[0].pci
    first, *rest = l40.guests
    outside = dataclasses.replace(
        l40, guests=[dataclasses.replace(first, nova=False), *rest]
    )
    nova = Node(make_conf, tmp_path / "a", "l40-sriov")
    theirs = Node(
        make_conf, tmp_path / "b", "l40-sriov", host=SimulatedHost(outside)
    )
    [(device, plan)] = nova.update().items()
    assert theirs.update()[device] == dataclasses.replace(
        plan, reserved=plan.reserved + 1
    )


def test_a_guest_without_metadata_the_caller_names_is_nova_s(
    tmp_path, monkeypatch
):
    """Nova's own test doubles write no metadata in a domain: a guest
    the caller bound devices for, defined a guest for or listed at start
    is Nova's whatever its XML says (its event plans nothing); one it
    names after it was counted outside Nova is given back at the next
    refresh."""
    from tests.dense_service import counting
    from vgpu_driver.service import whole_host

    host, tree, parent, before, wanted = _on_first_parent(2, tmp_path)
    instance = str(uuid.uuid4())
    [device] = host.driver.allocate_mdevs(instance, wanted)
    host.driver.update_provider_tree(tree, "bench")
    plans: Counter[str] = Counter()
    counting(monkeypatch, whole_host, "plan_providers", plans)
    xml = hand_made_domain_xml(instance, instance[:8], [device.id])
    host.conn.defineXML(xml)  # as Nova's fake libvirt keeps it
    host.driver.domain_event(instance, True)
    host.driver.update_provider_tree(tree, "bench")
    assert _plan(host, parent).reserved == before.reserved
    assert plans == Counter()
    # defined by hand first, named afterwards (a restart's instance list)
    later = _define(host, _free_on(host, parent)[:1], nova=False)
    host.driver.update_provider_tree(tree, "bench")
    assert _plan(host, parent).reserved == before.reserved + 1
    host.driver._refresher.name_instances([later])
    host.driver.update_provider_tree(tree, "bench")
    assert _plan(host, parent).reserved == before.reserved
    plans.clear()
    host.driver.update_provider_tree(tree, "bench")
    assert plans == Counter()  # planned once, steady again
    _full_pass_agrees(host)


def test_an_instance_released_is_no_longer_named(tmp_path):
    """Releasing an instance's devices forgets its name: the names held
    are the instances on the host (not every one ever bound), and a
    guest without metadata left behind by a release, read again, is
    outside Nova (its device has no allocation any more)."""
    host, tree, parent, before, wanted = _on_first_parent(3, tmp_path)
    named = host.driver._refresher.named
    at_start = set(named.uuids)  # the guests init_host was given
    for _ in range(5):  # spawned and deleted: nothing left named
        gone = str(uuid.uuid4())
        host.driver.allocate_mdevs(gone, wanted)
        host.driver.release_mdevs(gone)
    moved = str(uuid.uuid4())  # a live migration in, rolled back
    host.driver.claim_for_live_migration(moved, {}, {})
    host.driver.rollback_live_migration_at_destination(moved)
    assert gone not in named and moved not in named
    instance = str(uuid.uuid4())
    [device] = host.driver.allocate_mdevs(instance, wanted)
    xml = hand_made_domain_xml(instance, instance[:8], [device.id])
    host.conn.defineXML(xml)  # as Nova's fake libvirt keeps it
    host.driver.domain_event(instance, True)
    host.driver.update_provider_tree(tree, "bench")
    assert _plan(host, parent).reserved == before.reserved
    assert named.uuids == at_start | {instance}
    host.driver.release_mdevs(instance)  # its guest left behind
    host.conn.defineXML(xml)  # and defined again by hand: libvirt tells
    host.driver.domain_event(instance, True)
    host.driver.update_provider_tree(tree, "bench")
    assert _plan(host, parent).reserved == before.reserved + 1
    _full_pass_agrees(host)


def test_a_named_guest_without_metadata_deleted_plans_nothing(
    tmp_path, monkeypatch
):
    """Deleting an instance whose guest carries no metadata (Nova's fake
    libvirt, an adopted instance) as Nova does: undefined, told, its
    devices released (its name forgotten). The plan made while it ran
    counted it Nova's, and it is gone now: nothing outside Nova changed,
    and the refresh plans no provider. One whose guest was left behind,
    read again once libvirt tells of it, is outside Nova: planned
    again."""
    from tests.dense_service import counting
    from vgpu_driver.service import touched, whole_host

    host, tree, parent, before, wanted = _on_first_parent(4, tmp_path)
    plans: Counter[str] = Counter()
    counting(monkeypatch, whole_host, "plan_providers", plans)
    counting(monkeypatch, touched, "plan_providers", plans)

    def spawn() -> tuple[str, str]:
        instance = str(uuid.uuid4())
        [device] = host.driver.allocate_mdevs(instance, wanted)
        xml = hand_made_domain_xml(instance, instance[:8], [device.id])
        host.conn.defineXML(xml)  # as Nova's fake libvirt keeps it
        host.driver.domain_event(instance, True)
        host.driver.guest_defined(instance)
        host.driver.update_provider_tree(tree, "bench")
        return instance, xml

    instance, _xml = spawn()
    assert _plan(host, parent).reserved == before.reserved
    plans.clear()
    guest_xml.delete(host.conn.lookupByUUIDString(instance))
    host.driver.domain_event(instance, False)
    host.driver.guest_undefined(instance)
    host.driver.release_mdevs(instance)
    host.driver.update_provider_tree(tree, "bench")
    assert plans == Counter()
    assert _plan(host, parent).reserved == before.reserved
    _full_pass_agrees(host)
    # released, its guest left defined: outside Nova from then on
    left, _xml = spawn()
    plans.clear()
    host.driver.release_mdevs(left)
    host.driver.update_provider_tree(tree, "bench")
    assert plans == Counter()
    host.driver.domain_event(left, True)
    host.driver.update_provider_tree(tree, "bench")
    assert _plan(host, parent).reserved == before.reserved + 1
    assert sum(plans.values()) >= 1
    _full_pass_agrees(host)


def test_a_guest_outside_nova_moved_to_another_pgpu_moves_its_reservation(
    tmp_path,
):
    """A guest outside Nova defined again on another pGPU's mdev: the
    first pGPU's unit is given back, the other's reserved (told by the
    guest's event alone)."""
    host = RandomHost(random.Random(5), tmp_path)
    tree = host.service.tree
    first, second = (p.name for p in host.parents[:2])
    before = {p: _plan(host, p).reserved for p in (first, second)}
    guest = str(uuid.uuid4())
    xml = hand_made_domain_xml(guest, guest[:8], _free_on(host, first)[:1])
    host.conn.defineXML(xml)
    host.driver.domain_event(guest, True)
    host.driver.update_provider_tree(tree, "bench")
    assert _plan(host, first).reserved == before[first] + 1
    moved = _free_on(host, second)[:1]
    host.conn.defineXML(hand_made_domain_xml(guest, guest[:8], moved))
    host.driver.domain_event(guest, True)
    host.driver.update_provider_tree(tree, "bench")
    assert _plan(host, first).reserved == before[first]
    assert _plan(host, second).reserved == before[second] + 1
    _full_pass_agrees(host)
