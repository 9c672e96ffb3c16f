"""Instances moving through the integration with Nova's real CONF: live
migrations refused as Nova refuses them (a type not enabled, another
vGPU host driver, a destination NVML says cannot take it) or given
Nova's own answer without mdevs, a failing destination check rolling
the claims back, and cleanup releasing the devices unless a hard
reboot keeps them (run by tools/nova-functional; skipped where Nova
cannot be imported)."""

from __future__ import annotations

import uuid

import pytest

provider_tree = pytest.importorskip(
    "nova.compute.provider_tree",
    reason="needs Nova with its dependencies: run tools/nova-functional",
)
nova_conf = pytest.importorskip("nova.conf")

from nova import exception as nova_exception  # noqa: E402

from tests.nova.nova_host import (  # noqa: E402
    FREE_ON_86,
    NODE,
)


def test_a_live_migration_of_a_type_not_enabled_is_refused_as_nova_does(nova):
    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    with pytest.raises(nova_exception.MigrationPreCheckError) as caught:
        adapter.claim_for_live_migration(
            "i-1", {str(uuid.uuid4()): "nvidia-11"}, {}
        )
    assert "Source mdev types ['nvidia-11'] are not supported" in str(
        caught.value
    )
    # one of two types enabled here is not enough
    both = {str(uuid.uuid4()): "nvidia-11", str(uuid.uuid4()): "nvidia-36"}
    with pytest.raises(nova_exception.MigrationPreCheckError) as caught:
        adapter.claim_for_live_migration("i-1", both, {})
    assert "['nvidia-11', 'nvidia-36'] are not supported" in str(caught.value)


def test_a_failing_destination_check_rolls_the_claims_back(nova, monkeypatch):
    """The library claims the destination's mdevs, then Nova's own
    destination checks refuse the migration: the claims go again."""
    from nova.objects import migrate_data as nova_migrate_data
    from nova.virt import fake
    from nova.virt.libvirt import driver as nova_driver

    from vgpu_driver.nova import driver as vgpu_nova

    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    driver = vgpu_nova.LibvirtDriver(fake.FakeVirtAPI(), False)
    driver._vgpu_adapter = adapter

    def refuse(*_args, **_kwargs):
        raise nova_exception.MigrationPreCheckError(reason="a NUMA check")

    monkeypatch.setattr(
        nova_driver.LibvirtDriver, "check_source_migrate_data_at_dest", refuse
    )
    source = {str(uuid.uuid4()): "nvidia-36"}
    data = nova_migrate_data.LibvirtLiveMigrateData(
        source_mdev_types=dict(source)
    )
    instance = type("Instance", (), {"uuid": str(uuid.uuid4())})()
    rp = tree.data(f"{NODE}_pci_0000_86_00_0").uuid
    with pytest.raises(nova_exception.MigrationPreCheckError):
        driver.check_source_migrate_data_at_dest(
            None, instance, data, None, None, {rp: {"resources": {"VGPU": 1}}}
        )
    assert adapter.driver.binder.claims() == {}
    assert dict(data.source_mdev_types) == source


def test_a_live_migration_from_another_vgpu_host_driver_is_refused(
    nova, monkeypatch
):
    """The destination compares the source node's host-driver trait in
    Placement with its own; a different driver is Nova's
    MigrationPreCheckError naming both, and missing data never blocks."""
    from nova.scheduler.client import report

    from vgpu_driver.nova import moves

    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    mine = "CUSTOM_VGPU_HOST_NVIDIA_570_124_03"
    assert adapter.host_driver_traits() == {mine}

    class Answer:
        def __init__(self, body):
            self.body = body

        def __bool__(self):
            return True

        def json(self):
            return self.body

    def placement(traits):
        answers = {
            "/resource_providers?name=src": {
                "resource_providers": [{"uuid": "root"}]
            },
            "/resource_providers?in_tree=root": {
                "resource_providers": [{"uuid": "root"}, {"uuid": "gpu"}]
            },
            "/resource_providers/root/traits": {"traits": ["COMPUTE_NODE"]},
            "/resource_providers/gpu/traits": {"traits": traits},
        }

        class Client:
            def get(self, url, version=None, global_request_id=None):
                return Answer(answers[url])

        monkeypatch.setattr(report, "report_client_singleton", Client)

    class Migration:
        source_node = "src"

    placement(["CUSTOM_NVIDIA_35", "CUSTOM_VGPU_HOST_NVIDIA_550_54_16"])
    source = moves.source_driver_traits(None, Migration())
    with pytest.raises(nova_exception.MigrationPreCheckError) as raised:
        adapter.check_driver_compatible("inst-1", source)
    assert "550_54_16" in str(raised.value) and "570_124_03" in str(
        raised.value
    )
    placement([mine])
    adapter.check_driver_compatible(
        "inst-1", moves.source_driver_traits(None, Migration())
    )

    # through Nova's own entry point: refused before anything is claimed
    from nova.objects import migrate_data as nova_migrate_data
    from nova.virt import fake

    from vgpu_driver.nova import driver as vgpu_nova

    placement(["CUSTOM_VGPU_HOST_NVIDIA_550_54_16"])
    driver = vgpu_nova.LibvirtDriver(fake.FakeVirtAPI(), False)
    driver._vgpu_adapter = adapter
    data = nova_migrate_data.LibvirtLiveMigrateData(
        source_mdev_types={str(uuid.uuid4()): "nvidia-36"}
    )
    instance = type("Instance", (), {"uuid": str(uuid.uuid4())})()
    rp = tree.data(f"{NODE}_pci_0000_86_00_0").uuid
    with pytest.raises(nova_exception.MigrationPreCheckError, match="550_54"):
        driver.check_source_migrate_data_at_dest(
            None,
            instance,
            data,
            Migration(),
            None,
            {rp: {"resources": {"VGPU": 1}}},
        )
    assert adapter.driver.binder.claims() == {}

    def broken():
        raise RuntimeError("placement down")

    monkeypatch.setattr(report, "report_client_singleton", broken)
    assert moves.source_driver_traits(None, Migration()) == set()
    adapter.check_driver_compatible("inst-1", set())


def test_a_destination_nvml_says_cannot_migrate_refuses(nova, monkeypatch):
    """NVML's pGPU virtualization capabilities without the migration bit
    on every GPU: the destination refuses with Nova's exception; with
    the bit, it publishes CUSTOM_VGPU_LIVE_MIGRATION and takes it."""
    import dataclasses

    from vgpu_driver.model.nvml import NvmlGpu, NvmlReading

    adapter, _tree, _root = nova
    real = adapter.driver.discover

    def with_caps(caps):
        said = NvmlReading(
            "550.54.16", (NvmlGpu("0000:86:00.0", virtualization_caps=caps),)
        )
        monkeypatch.setattr(
            adapter.driver,
            "discover",
            lambda **kw: dataclasses.replace(real(**kw), nvml=said),
        )

    with_caps(0)
    with pytest.raises(nova_exception.MigrationPreCheckError) as raised:
        adapter.check_driver_compatible("inst-1", set())
    assert "cannot live-migrate" in str(raised.value)
    assert "CUSTOM_VGPU_LIVE_MIGRATION" not in adapter.host_driver_traits()
    with_caps(1)
    adapter.check_driver_compatible("inst-1", set())
    assert "CUSTOM_VGPU_LIVE_MIGRATION" in adapter.host_driver_traits()


def test_cleanup_releases_the_devices_unless_a_hard_reboot_keeps_them(
    nova, monkeypatch
):
    """Nova's ``cleanup`` ends an instance's stay on the host (delete,
    move, shelve): its devices are released then. A hard reboot destroys
    the guest and cleans up too, then defines it again: its devices stay
    claimed for it throughout, so no other instance takes them in
    between. (Nova's own ``cleanup`` and ``_hard_reboot``, which need the
    whole libvirt driver, are stood in for by what they call of ours.)"""
    from nova.virt.libvirt import driver as nova_libvirt

    from vgpu_driver.nova.driver import LibvirtDriver
    from vgpu_driver.sim import guest_xml
    from vgpu_driver.sim.specs import GuestSpec

    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    rp = tree.data(f"{NODE}_pci_0000_86_00_0").uuid
    instance = type("Instance", (), {"uuid": str(uuid.uuid4())})()
    allocations = {rp: {"resources": {"VGPU": 1}}}
    assert adapter.allocate(instance.uuid, allocations) == [FREE_ON_86]
    spec = GuestSpec(uuid=instance.uuid, name="i1", mdevs=[FREE_ON_86])
    connection = adapter.driver.host.connection()
    connection.defineXML(guest_xml.render_guest(spec))
    adapter.driver.guest_defined(instance.uuid)

    def devices():
        return adapter.driver.instance_devices().get(
            instance.uuid, {"in_use": [], "claimed": []}
        )

    assert devices() == {"in_use": [FREE_ON_86], "claimed": []}
    between = []

    def nova_hard_reboot(self, context, instance, *a, **kw):
        # destroyed and undefined, then cleaned up, as Nova's does
        guest_xml.delete(connection.lookupByUUIDString(instance.uuid))
        adapter.driver.guest_undefined(instance.uuid)
        self.cleanup(context, instance)
        between.append(devices())
        return self._allocate_mdevs(allocations)  # its XML made again

    monkeypatch.setattr(
        nova_libvirt.LibvirtDriver, "cleanup", lambda *a, **kw: None
    )
    monkeypatch.setattr(
        nova_libvirt.LibvirtDriver, "_hard_reboot", nova_hard_reboot
    )
    driver = object.__new__(LibvirtDriver)
    driver._vgpu_adapter = adapter
    assert driver._hard_reboot(None, instance) == [FREE_ON_86]
    # held throughout: claimed while no guest has it
    assert between == [{"in_use": [], "claimed": [FREE_ON_86]}]
    assert FREE_ON_86 not in adapter.free_mdevs(None, None)
    # deleted before its guest is defined again: released
    driver.cleanup(None, instance)
    assert devices() == {"in_use": [], "claimed": []}
    assert FREE_ON_86 in adapter.free_mdevs(None, None)


def test_a_live_migration_without_mdevs_gets_nova_s_own_answer(
    nova, monkeypatch
):
    """An instance with no mdev live-migrated to this host: Nova's own
    destination check runs alone and its migrate data goes back to
    Nova's compute manager as it made it (nothing claimed here)."""
    from nova.objects import migrate_data as nova_migrate_data
    from nova.virt.libvirt import driver as nova_libvirt

    from vgpu_driver.nova.driver import LibvirtDriver

    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    answered = nova_migrate_data.LibvirtLiveMigrateData()
    asked = []

    def nova_check(self, ctxt, instance, migrate_data, *rest):
        asked.append(migrate_data)
        return answered

    monkeypatch.setattr(
        nova_libvirt.LibvirtDriver,
        "check_source_migrate_data_at_dest",
        nova_check,
    )
    driver = object.__new__(LibvirtDriver)
    driver._vgpu_adapter = adapter
    instance = type("Instance", (), {"uuid": str(uuid.uuid4())})()
    for source in (None, {}):  # an older source says none; a newer, empty
        sent = nova_migrate_data.LibvirtLiveMigrateData()
        if source is not None:
            sent.source_mdev_types = source
        got = driver.check_source_migrate_data_at_dest(
            None, instance, sent, None, None, {}
        )
        assert got is answered and asked[-1] is sent
    assert instance.uuid not in adapter.driver.instance_devices()


@pytest.mark.parametrize(
    ("source", "dest", "released"),
    [("host1", "host2", True), ("host1", "host1", False)],
)
def test_a_confirmed_move_releases_the_source_unless_it_stays_on_the_host(
    nova, monkeypatch, source, dest, released
):
    """Nova confirms a resize on its source host. Moved to another host,
    the instance holds nothing here any more: what it still has claimed
    is released. Resized on the same host, what it holds here is the
    resized guest's: kept claimed, or another instance could take it
    before that guest is defined with it. (Nova's own
    ``confirm_migration``, which needs the whole libvirt driver, is
    stood in for.)"""
    from nova.virt.libvirt import driver as nova_libvirt

    from vgpu_driver.nova.driver import LibvirtDriver

    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    rp = tree.data(f"{NODE}_pci_0000_86_00_0").uuid
    instance = type("Instance", (), {"uuid": str(uuid.uuid4())})()
    migration = type(
        "Migration", (), {"source_compute": source, "dest_compute": dest}
    )()
    allocations = {rp: {"resources": {"VGPU": 1}}}
    assert adapter.allocate(instance.uuid, allocations) == [FREE_ON_86]
    confirmed = []
    monkeypatch.setattr(
        nova_libvirt.LibvirtDriver,
        "confirm_migration",
        lambda self, *a, **kw: confirmed.append(a) or "nova's answer",
    )
    driver = object.__new__(LibvirtDriver)
    driver._vgpu_adapter = adapter
    assert driver.confirm_migration(None, migration, instance) == (
        "nova's answer"
    )
    assert confirmed == [(None, migration, instance)]
    claimed = adapter.driver.instance_devices().get(
        instance.uuid, {"claimed": []}
    )["claimed"]
    assert claimed == ([] if released else [FREE_ON_86])
    assert (FREE_ON_86 in adapter.free_mdevs(None, None)) is released
