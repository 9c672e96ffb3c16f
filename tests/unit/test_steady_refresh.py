"""A steady refresh that finds nothing changed writes nothing, yet still
repairs a tree someone else changed, and sees a host that changed."""

from __future__ import annotations

import textwrap
import uuid

import pytest

from tests import helpers
from tests.helpers import Node, new_tree
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.model.device import Guest

P84 = "node1_pci_0000_84_00_0"


class CountingTree:
    """Nova's ProviderTree interface, counting the writes."""

    def __init__(self, tree):
        self.tree, self.writes = tree, 0

    def __getattr__(self, name):
        attr = getattr(self.tree, name)
        if name in (
            "update_inventory",
            "update_traits",
            "new_child",
            "remove",
        ):
            self.writes += 1
        return attr


class NameLookups:
    """A ProviderTree that records the providers looked up by name."""

    def __init__(self, tree):
        self.tree, self.names = tree, []

    def __getattr__(self, name):
        attr = getattr(self.tree, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            naming = name in ("new_root", "new_child")  # not a lookup
            if not naming and args and self._is_name(args[0]):
                self.names.append(args[0])
            return attr(*args, **kwargs)

        return call

    def _is_name(self, key):
        return isinstance(key, str) and (
            not self.tree.exists(key) or self.tree.data(key).uuid != key
        )


def m10_driver(make_conf, tmp_path):
    """A driver on the m10 host served by libvirt's test driver."""
    description = helpers.load("m10")
    host = helpers.libvirt_host(description, tmp_path / "host")
    conf = make_conf(textwrap.dedent(description.config))
    conf.set_override("state_path", str(tmp_path / "state"), "devices")
    return VgpuDriver(conf, host), host


@pytest.fixture
def steady(make_conf, tmp_path):
    """A driver on the m10 host, after one full pass."""
    driver, host = m10_driver(make_conf, tmp_path)
    tree = CountingTree(new_tree())
    driver.update_provider_tree(tree, "node1")
    tree.writes = 0
    return driver, host, tree


def test_nothing_changed_nothing_written(steady):
    driver, host, tree = steady
    before = host.call_count
    for _ in range(3):
        driver.update_provider_tree(tree, "node1")
    assert tree.writes == 0
    # one XML per parent, per pass (the parents listed are kept)
    assert host.call_count - before == 3 * 4


def test_a_trait_someone_removed_is_put_back(steady):
    driver, _, tree = steady
    traits = set(tree.data(P84).traits)
    tree.tree.update_traits(P84, traits - {"CUSTOM_NVIDIA_35"})
    driver.update_provider_tree(tree, "node1")
    assert "CUSTOM_NVIDIA_35" in tree.data(P84).traits


def test_an_inventory_someone_changed_is_put_back(steady):
    driver, _, tree = steady
    tree.tree.update_inventory(P84, {"VGPU": {"total": 99, "max_unit": 99}})
    driver.update_provider_tree(tree, "node1")
    assert tree.data(P84).inventory["VGPU"]["total"] == 16


def test_a_provider_someone_removed_is_made_again(steady):
    driver, _, tree = steady
    tree.tree.remove(P84)
    driver.update_provider_tree(tree, "node1")
    assert tree.exists(P84)


def test_a_provider_someone_added_as_ours_is_removed(steady):
    """A provider named as this node's device providers, offering VGPU
    for no device of the host (an older writer's), appears under the
    node after a steady pass: the next pass removes it, never leaving
    it offering what nobody binds."""
    driver, _, tree = steady
    stale = "node1_pci_0000_99_00_0"
    tree.tree.new_child(stale, "node1")
    tree.tree.update_inventory(stale, {"VGPU": {"total": 4, "max_unit": 4}})
    driver.update_provider_tree(tree, "node1")
    assert not tree.exists(stale)
    assert tree.exists(P84)


def test_a_guest_defined_meanwhile_is_seen(steady):
    driver, host, tree = steady
    free = "386818c0-9f18-5b12-8c04-386dbef1b1ab"  # nvidia-36 on 86
    driver.update_provider_tree(tree, "node1")
    assert free in driver.free_mdevs()  # reads the guests
    host.note_guest(Guest("g-new", "instance-99", (free,)))
    driver.update_provider_tree(tree, "node1")
    assert free not in driver.free_mdevs()


def test_a_configuration_reloaded_is_applied(steady, make_conf):
    driver, _, tree = steady
    driver.conf.set_override("max_instances", 1, "mdev_nvidia-35")
    driver.reload_config()
    driver.update_provider_tree(tree, "node1")
    totals = [
        tree.data(n).inventory["VGPU"]["total"]
        for n in (P84, "node1_pci_0000_85_00_0")
        if tree.exists(n)
    ]
    assert sum(totals) == 1


def test_a_service_reads_the_descriptions_of_its_enabled_types_only(
    make_conf, tmp_path, monkeypatch
):
    """A GRID pGPU lists many types, one sysfs description file each: a
    service reads only its enabled types' (their capability traits are
    all it reports), an operator's discover reads every one, and a type
    enabled later is read then. The tree is the same either way."""
    from vgpu_driver.host import sysfs as sysfs_module

    read = []
    real = sysfs_module.SysfsTree.type_description

    def type_description(self, device, type_id):
        read.append(type_id)
        return real(self, device, type_id)

    monkeypatch.setattr(
        sysfs_module.SysfsTree, "type_description", type_description
    )
    description = helpers.load("grid-k1")
    every = {t.id for p in description.parents for t in p.types}

    def tree_of(host):
        driver = VgpuDriver(make_conf(description.config), host)
        tree = new_tree()
        driver.update_provider_tree(tree, "node1")
        return driver, {
            tree.data(u).name: tree.data(u).traits
            for u in tree.get_provider_uuids()
        }

    everything = helpers.libvirt_host(description, tmp_path / "all")
    everything.described_types = lambda: every  # as discover reads
    _, full = tree_of(everything)
    assert set(read) == every
    read.clear()
    service = helpers.libvirt_host(description, tmp_path / "service")
    driver, trees = tree_of(service)
    enabled = {"nvidia-161", "nvidia-163"}
    assert set(read) == enabled
    assert trees == full
    assert any(
        t.startswith("HW_GPU_") for traits in full.values() for t in traits
    )
    # a type enabled on the running service: its description is read
    read.clear()
    driver.conf.set_override("enabled_mdev_types", ["nvidia-160"], "devices")
    driver.reload_config()
    driver.discover()
    assert set(read) == {"nvidia-160"}
    # the enabled types are asked for once a discovery, not per pGPU
    asked = []
    enabled_types = service.described_types
    service.described_types = lambda: asked.append(1) or enabled_types()
    driver.discover()
    assert len(asked) == 1 < len(description.parents)


def test_a_pass_finds_the_device_providers_by_uuid(make_conf, tmp_path):
    """Nova's ProviderTree finds a child of the root by its uuid at once
    and by its name only by walking the whole tree: a steady pass looks
    up no device provider by name (at 64 pGPUs those walks made a steady
    pass on Nova's tree about 0.5 ms slower), and a first pass only to
    find out whether the provider exists."""
    driver, _ = m10_driver(make_conf, tmp_path)
    tree = NameLookups(new_tree())
    plans = driver.update_provider_tree(tree, "node1")
    devices = [n for n in tree.names if n != "node1"]
    assert sorted(devices) == sorted(p.name for p in plans)  # exists()
    tree.names.clear()
    driver.update_provider_tree(tree, "node1")
    assert set(tree.names) <= {"node1"}


def test_a_parent_offered_again_is_reported_at_once_on_a_steady_host(
    make_conf, tmp_path
):
    """On a host whose reading does not change (libvirt's adapter returns
    the same reading), a failing parent offered again must still end its
    reservation at the next pass: the no-change shortcut counts the
    failing parents."""
    host = helpers.libvirt_host(helpers.load("m10"), tmp_path / "host")
    n = Node(make_conf, tmp_path / "state", host=host)
    parent = "pci_0000_85_00_0"
    n.driver.unschedulable.mark(parent, "a test")
    assert n.update()[parent].reserved == 16
    n.conf.set_override("failed_device_retry_interval", 0, "devices")
    assert n.update()[parent].reserved == 0


def test_a_bind_that_reuses_a_free_mdev_is_counted_by_the_next_pass(
    make_conf, tmp_path
):
    """Reusing a free mdev changes nothing on the host (the reading keeps
    its generation), only the claims: the no-change shortcut must see the
    new claim. Here it fills [vgpu_nvidia-35] max_instances = 2, so the
    provider takes nothing more."""
    parent = "pci_0000_84_00_0"  # m10: one nvidia-35 mdev, in use
    n = Node(
        make_conf,
        tmp_path / "state",
        extra="[vgpu_nvidia-35]\nmax_instances = 2\n",
    )
    spare = n.driver.create_free_mdev(parent)
    before = n.update()[parent]
    assert (before.total, before.reserved) == (2, 0)
    generation = n.host.discover().generation
    [device] = n.driver.allocate_mdevs("i1", n.alloc((parent, 1)))
    assert device.id == spare and not device.created
    assert n.host.discover().generation == generation
    after = n.update()[parent]
    assert (after.total, after.reserved) == (2, 2)


def test_a_free_mdev_made_ahead_is_never_read_as_another_managers(
    make_conf, tmp_path, monkeypatch
):
    """``create_free_mdev`` records the mdev as the library's before it
    is made: a pass reading the host the moment it appears (a refresh of
    another thread) counts it free and ours, not another manager's to
    reserve, then and after."""
    name = "pci_0000_85_00_0"  # m10: nvidia-35, no mdev
    n = Node(make_conf, tmp_path / "state")
    before = n.update()[name]
    host = n.host
    make = host.create_mdev
    meanwhile = []

    def create_mdev(*args, **kwargs):
        mdev = make(*args, **kwargs)
        meanwhile.append(n.update()[name])
        return mdev

    monkeypatch.setattr(host, "create_mdev", create_mdev)
    spare = n.driver.create_free_mdev(name)
    assert spare in n.driver.free_mdevs(name)
    [seen] = meanwhile
    after = n.update()[name]
    assert seen.reserved == after.reserved == before.reserved == 0
    assert seen.total == after.total == before.total


def test_a_free_mdev_that_cannot_be_made_is_not_recorded(
    make_conf, tmp_path, monkeypatch
):
    """The host refuses the mdev recorded ahead: the record is taken
    back, and the error is the host's."""
    from vgpu_driver.exception import HostUnreachable

    n = Node(make_conf, tmp_path / "state")
    owned = n.driver._refresher.binder.owned()

    def refuse(*args, **kwargs):
        raise HostUnreachable(uri="qemu:///system", reason="restarting")

    monkeypatch.setattr(n.host, "create_mdev", refuse)
    with pytest.raises(HostUnreachable):
        n.driver.create_free_mdev("pci_0000_85_00_0", str(uuid.uuid4()))
    assert n.driver._refresher.binder.owned() == owned


def test_a_device_recorded_as_ours_with_nothing_else_changed_is_ours(
    make_conf, tmp_path
):
    """An mdev read as another manager's (free: reserved), then recorded
    as the library's with nothing else changed (the host, the claims and
    the guests as the last pass read them): the next pass unreserves
    it."""
    from vgpu_driver.service import repairs

    name = "pci_0000_85_00_0"
    n = Node(make_conf, tmp_path / "state")
    parent = n.host.discover().parent(name)
    mdev = n.host.create_mdev(parent, "nvidia-35", str(uuid.uuid4()))
    assert n.update()[name].reserved == 1
    repairs.record_made(n.driver._refresher.binder.ledger, mdev.uuid)
    assert n.update()[name].reserved == 0
