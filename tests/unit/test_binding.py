"""Binding allocations to devices, and the instance's life after."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.dense_service import dense_node
from tests.helpers import M10_FREE_ON_86 as FREE_ON_86
from vgpu_driver.exception import (
    DeviceCapacityExhausted,
    DeviceOperationFailed,
    ProviderUnknown,
)
from vgpu_driver.model import usage


def test_free_mdev_is_reused_then_one_is_created(node):
    n = node()
    [first] = n.driver.allocate_mdevs("i1", n.alloc(("pci_0000_86_00_0", 1)))
    assert (first.kind, first.created) == ("mdev", False)
    [second] = n.driver.allocate_mdevs("i2", n.alloc(("pci_0000_86_00_0", 1)))
    assert second.created and second.id in n.mdevs()
    assert second.id != first.id
    assert n.host.operations["create_mdev"] == 1
    [xml] = n.driver.guest_hostdev_xml([second])
    assert f"<address uuid='{second.id}'/>" in xml
    assert "type='mdev'" in xml and "model='vfio-pci'" in xml
    assert "managed='no'" in xml


def test_two_vgpus_from_two_pgpus_for_one_guest(node):
    n = node()
    devices = n.driver.allocate_mdevs(
        "i1", n.alloc(("pci_0000_84_00_0", 1), ("pci_0000_85_00_0", 1))
    )
    assert sorted(d.parent for d in devices) == [
        "pci_0000_84_00_0",
        "pci_0000_85_00_0",
    ]
    assert all(d.type_id == "nvidia-35" for d in devices)
    assert len({d.id for d in devices}) == 2


def test_generic_mdev_and_unmanaged_classes_are_ignored(node):
    n = node("mlx5")
    allocations = n.alloc(("pci_0000_3b_00_0", 1), rc="CUSTOM_MLX5")
    allocations[str(uuid.uuid4())] = {
        "resources": {"VCPU": 4, "MEMORY_MB": 512}
    }
    [device] = n.driver.allocate_mdevs("i1", allocations)
    assert device.type_id == "mlx5_core-local" and device.created


def test_sriov_vf_is_set_to_the_type_and_cleared_on_release(node):
    n = node("l40-sriov")
    # 0000:41:00.5 already carries L40S-4Q and no guest uses it: reused
    [reused] = n.driver.allocate_mdevs("i1", n.alloc(("pci_0000_41_00_0", 1)))
    assert (reused.kind, reused.id, reused.created) == (
        "vf",
        "0000:41:00.5",
        False,
    )
    [fresh] = n.driver.allocate_mdevs("i2", n.alloc(("pci_0000_41_00_0", 1)))
    assert fresh.created
    [xml] = n.driver.guest_hostdev_xml([fresh])
    bus = fresh.id.split(":")[1]
    assert "type='pci'" in xml and f"bus='0x{bus}'" in xml
    vfs = {vf.address: vf for vf in n.host.discover().pfs[0].vfs}
    assert vfs[fresh.id].current_type == 1150
    assert n.driver.binder.vf_types[fresh.id] == 1150
    n.driver.release_mdevs("i2")
    vfs = {vf.address: vf for vf in n.host.discover().pfs[0].vfs}
    assert vfs[fresh.id].current_type == 0
    assert fresh.id not in n.driver.binder.vf_types


def test_a_vf_bind_failing_midway_clears_the_types_it_set(node, monkeypatch):
    """Three VFs for one instance, the third refused by the host: the
    VF typed before is cleared again, on the host and in the record of
    types a reboot re-applies; nothing stays claimed."""
    from vgpu_driver.exception import DeviceOperationFailed

    n = node("l40-sriov")
    before = {v.address: v.current_type for v in n.host.discover().pfs[0].vfs}
    typed = []
    set_vf_type = n.host.set_vf_type

    def refusing(address, type_id):
        if type_id and len(typed) == 1:
            raise DeviceOperationFailed(
                action="set vGPU type", device=address, reason="EIO"
            )
        if type_id:
            typed.append(address)
        set_vf_type(address, type_id)

    monkeypatch.setattr(n.host, "set_vf_type", refusing)
    with pytest.raises(DeviceOperationFailed, match="EIO"):
        n.driver.allocate_mdevs("i1", n.alloc(("pci_0000_41_00_0", 3)))
    [first] = typed
    after = {v.address: v.current_type for v in n.host.discover().pfs[0].vfs}
    assert after == before
    assert first not in n.driver.binder.vf_types
    assert n.driver.binder.claims() == {}


def test_a_bind_failing_midway_keeps_the_mdev_it_reused_as_the_library_s(
    node, monkeypatch
):
    """A bind reusing a free mdev the library made, and making another
    the host refuses: the reused one is still the library's (not taken
    for another manager's), free again; the refused one is recorded
    nowhere."""
    from vgpu_driver.exception import DeviceOperationFailed

    n = node()
    parent = "pci_0000_84_00_0"
    n.driver.init_host([])
    spare = n.driver.create_free_mdev(parent)
    assert spare in n.driver.binder.owned()
    made = []

    def refusing(parent, type_id, uuid):
        made.append(uuid)
        raise DeviceOperationFailed(
            action="create mdev", device=uuid, reason="EIO"
        )

    monkeypatch.setattr(n.host, "create_mdev", refusing)
    with pytest.raises(DeviceOperationFailed, match="EIO"):
        n.driver.allocate_mdevs("i1", n.alloc((parent, 2)))
    owned = n.driver.binder.owned()
    assert spare in owned and not set(made) & owned
    assert spare in n.driver.free_mdevs(parent)


def test_free_mdevs_made_ahead_fill_a_parent_then_go_elsewhere(node):
    """``create_free_mdev`` on a parent makes one while it has room, the
    last one included, then answers None (no attempt the kernel would
    refuse); without a parent named, the next parent with room gets it."""
    n = node()
    n.driver.init_host([])
    parent = "pci_0000_84_00_0"
    reading = n.host.discover()
    config = usage.configured_types(n.driver.settings.config, reading)
    room = reading.parent(parent).type(config[parent]).available
    assert room >= 2
    made = [n.driver.create_free_mdev(parent) for _ in range(room)]
    assert None not in made and len(set(made)) == room
    assert n.host.discover().parent(parent).type(config[parent]).available == 0
    assert n.driver.create_free_mdev(parent) is None
    elsewhere = n.driver.create_free_mdev(None)
    assert elsewhere is not None and n.mdevs()[elsewhere].parent != parent


def test_units_on_the_compute_node_go_to_parents_of_their_class_alone(
    node,
):
    """Units of VGPU allocated on the compute node's own provider (an
    allocation made before the reshape), on a host whose mlx5 parent
    serves CUSTOM_MLX5: each goes to a parent serving VGPU."""
    n = node("demo")
    classes = {p.device: p.resource_class for p in n.update().values()}
    assert {"VGPU", "CUSTOM_MLX5"} <= set(classes.values())
    root = n.tree.data("node1").uuid
    devices = n.driver.allocate_mdevs("i1", {root: {"resources": {"VGPU": 4}}})
    assert len(devices) == 4
    assert {
        classes[n.driver.binder.ledger.view.device_of(d.parent)]
        for d in devices
    } == {"VGPU"}


def test_a_bind_failing_on_one_parent_marks_that_parent_alone_failing(
    node, monkeypatch
):
    """A free mdev reused on one parent, one the host refuses to make on
    another (not for room): the second parent is marked failing, the
    first is not."""
    from vgpu_driver.exception import DeviceOperationFailed

    n = node()
    n.driver.init_host([])
    reused, refused = "pci_0000_84_00_0", "pci_0000_85_00_0"
    n.driver.create_free_mdev(reused)

    def refusing(parent, type_id, uuid):
        raise DeviceOperationFailed(
            action="create mdev", device=uuid, reason="EIO"
        )

    monkeypatch.setattr(n.host, "create_mdev", refusing)
    with pytest.raises(DeviceOperationFailed, match="EIO"):
        n.driver.allocate_mdevs("i1", n.alloc((reused, 1), (refused, 1)))
    assert set(n.driver.binder.unschedulable) == {refused}


def test_exhaustion_raises_and_leaves_nothing_behind(node):
    n = node()
    before = set(n.mdevs())
    devices = n.driver.allocate_mdevs("i1", n.alloc(("pci_0000_85_00_0", 16)))
    assert len(devices) == 16
    claims = n.driver.binder.claims()
    with pytest.raises(DeviceCapacityExhausted, match="pci_0000_85_00_0"):
        n.driver.allocate_mdevs("i2", n.alloc(("pci_0000_85_00_0", 1)))
    assert n.driver.binder.claims() == claims
    assert set(n.mdevs()) - before == {d.id for d in devices}


def test_failed_create_is_rolled_back_and_the_parent_reserved(node):
    n = node()
    n.host.failures["create_mdev"] = lambda parent: (
        parent == "pci_0000_85_00_0"
    )
    before = set(n.mdevs())
    with pytest.raises(DeviceOperationFailed):
        n.driver.allocate_mdevs(
            "i1", n.alloc(("pci_0000_84_00_0", 1), ("pci_0000_85_00_0", 1))
        )
    assert set(n.mdevs()) == before  # the mdev made on 84 is gone again
    assert n.driver.binder.claims() == {}
    assert n.update()["pci_0000_85_00_0"].reserved == 16  # unschedulable
    assert n.update()["pci_0000_85_00_0"].reserved == 16  # for a while
    n.host.failures.clear()
    n.conf.set_override("failed_device_retry_interval", 0, "devices")
    assert n.update()["pci_0000_85_00_0"].reserved == 0  # offered again
    [device] = n.driver.allocate_mdevs("i2", n.alloc(("pci_0000_85_00_0", 1)))
    assert device.created


def test_unknown_provider_is_an_error_and_claims_nothing(node):
    n = node()
    bogus = str(uuid.uuid4())
    with pytest.raises(ProviderUnknown, match=bogus):
        n.driver.allocate_mdevs("i1", {bogus: {"resources": {"VGPU": 1}}})
    assert n.driver.binder.claims() == {}


def test_sixty_concurrent_binds_get_unique_devices(node):
    n = node("dense")
    providers = [p for p in sorted(n.update())]
    before = set(n.mdevs())

    def bind(i):
        device = providers[i % len(providers)]
        return n.driver.allocate_mdevs(f"inst-{i}", n.alloc((device, 1)))

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(bind, range(60)))
    ids = [d.id for bound in results for d in bound]
    assert len(ids) == 60 and len(set(ids)) == 60
    created = {d.id for bound in results for d in bound if d.created}
    assert set(n.mdevs()) - before == created
    claimed = n.driver.binder.claims()
    assert set(claimed) == set(ids)
    assert len({c["instance"] for c in claimed.values()}) == 60


def test_a_bind_costs_one_libvirt_call_whatever_the_guests(
    make_conf, tmp_path
):
    for guests in (4, 200):
        n = dense_node(
            make_conf, tmp_path / str(guests), 4, guests + 8, guests
        )
        host = n.host
        allocations = n.alloc((sorted(n.update())[0], 1))
        # the provider tree needed no guest here: the first bind reads
        # them, once (one listing, one XML each)
        host.calls.clear()
        n.driver.allocate_mdevs("i0", allocations)
        assert host.calls["listAllDomains"] == 1
        assert host.calls["domain.XMLDesc"] == guests
        host.calls.clear()
        [device] = n.driver.allocate_mdevs("i1", allocations)
        assert not device.created  # a free mdev is reused
        # one existence lookup of the reused mdev, nothing per guest/mdev
        assert dict(host.calls) == {"nodeDeviceLookupByName": 1}


def test_free_mdevs_never_lists_a_claimed_mdev(node):
    """A bound mdev not yet in a guest is claimed: Nova's
    _get_existing_mdevs_not_assigned must not offer it again, also in a
    process whose view of the host is older than the claim."""
    n = node()
    other = node(host=n.host)  # the same host and records
    assert FREE_ON_86 in other.driver.free_mdevs()
    [device] = n.driver.allocate_mdevs("i1", n.alloc(("pci_0000_86_00_0", 1)))
    assert device.id == FREE_ON_86
    for driver in (n.driver, other.driver):
        assert FREE_ON_86 not in driver.free_mdevs()
        assert FREE_ON_86 not in driver.free_mdevs("pci_0000_86_00_0")


def test_a_bind_failing_midway_keeps_an_mdev_it_cannot_remove(
    node, monkeypatch
):
    """Two mdevs for one instance, the second refused by the host, and
    the first one's removal refused too: it still exists, so it stays
    the library's own and free (the next bind reuses it), and the room
    the view counts is what a fresh reading of the host says."""
    from vgpu_driver.exception import DeviceOperationFailed

    n = node()
    parent = "pci_0000_84_00_0"
    n.driver.init_host([])
    create_mdev = n.host.create_mdev
    made = []

    def second_refused(parent_, type_id, uuid):
        if made:
            raise DeviceOperationFailed(
                action="create mdev", device=uuid, reason="EIO"
            )
        made.append(uuid)
        return create_mdev(parent_, type_id, uuid)

    def busy(mdev):
        raise DeviceOperationFailed(
            action="remove mdev", device=mdev.uuid, reason="EBUSY"
        )

    monkeypatch.setattr(n.host, "create_mdev", second_refused)
    monkeypatch.setattr(n.host, "remove_mdev", busy)
    with pytest.raises(DeviceOperationFailed, match="EIO"):
        n.driver.allocate_mdevs("i1", n.alloc((parent, 2)))
    monkeypatch.undo()
    reading = n.host.discover()
    assert made[0] in {m.uuid for m in reading.mdevs}
    assert made[0] in n.driver.binder.owned()
    assert made[0] in n.driver.free_mdevs(parent)
    type_id = usage.configured_types(n.driver.settings.config, reading)[parent]
    view = n.driver.binder.ledger.view.parents[parent]
    room = reading.parent(parent).type(type_id).available
    assert view.available[type_id] == room
    [device] = n.driver.allocate_mdevs("i2", n.alloc((parent, 1)))
    assert (device.id, device.created) == (made[0], False)


def test_a_vf_bind_failing_midway_keeps_a_type_it_cannot_clear(
    node, monkeypatch
):
    """As above on SR-IOV: the VF typed before the refusal cannot be
    cleared either; it stays typed, recorded (a reboot types it again)
    and free, and the next bind of that type takes it as it is."""
    from vgpu_driver.exception import DeviceOperationFailed

    n = node("l40-sriov")
    pf = "pci_0000_41_00_0"
    typed = []
    set_vf_type = n.host.set_vf_type

    def refusing(address, type_id):
        if typed:
            raise DeviceOperationFailed(
                action="set vGPU type", device=address, reason="EIO"
            )
        typed.append((address, type_id))
        set_vf_type(address, type_id)

    monkeypatch.setattr(n.host, "set_vf_type", refusing)
    with pytest.raises(DeviceOperationFailed, match="EIO"):
        n.driver.allocate_mdevs("i1", n.alloc((pf, 3)))
    monkeypatch.undo()
    [(first, number)] = typed
    vfs = {v.address: v.current_type for v in n.host.discover().pfs[0].vfs}
    assert vfs[first] == number
    assert n.driver.binder.vf_types[first] == number
    assert n.driver.binder.claims() == {}
    devices = n.driver.allocate_mdevs("i2", n.alloc((pf, 2)))
    assert first in {d.id for d in devices}
    assert not any(d.created for d in devices)


def test_the_type_of_an_mdev_made_by_a_bind_is_known_before_a_refresh(node):
    """Nova asks the types of its instance's mdevs (a live migration's
    check, the assigned devices) between a bind and the next refresh:
    an mdev the bind made is answered from the view; an unknown uuid is
    left out, not an error."""
    n = node()
    parent = "pci_0000_84_00_0"
    n.driver.init_host([])
    [device] = n.driver.allocate_mdevs("i1", n.alloc((parent, 1)))
    assert device.created
    unknown = "00000000-0000-0000-0000-000000000000"
    assert n.driver.mdev_types([device.id, unknown]) == {
        device.id: device.type_id
    }
