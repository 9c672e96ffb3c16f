"""The library inside someone else's service: the caller's ConfigOpts
(with Nova's own [devices] and [mdev_*] options), the caller's libvirt
connection, and a configuration reloaded while running."""

from __future__ import annotations

import gc
import textwrap
import weakref

import libvirt
import pytest
from oslo_config import cfg

from tests import helpers
from tests.helpers import new_tree
from tests.nova_options import nova_conf
from vgpu_driver import conf as vconf
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.exception import ConfigInvalid
from vgpu_driver.host.libvirt_host import LibvirtHost

M10 = """
    [DEFAULT]
    host = compute7
    [devices]
    enabled_mdev_types = nvidia-35,nvidia-36
    [mdev_nvidia-35]
    device_addresses = 0000:84:00.0,0000:85:00.0
    max_instances = 3
    [mdev_nvidia-36]
    device_addresses = 0000:86:00.0
    mdev_class = CUSTOM_SMALL
"""


def test_nova_s_own_options_are_read_as_ours(tmp_path):
    conf = nova_conf(tmp_path, M10)
    assert conf.host == "compute7"
    conf.set_override("state_path", str(tmp_path / "state"), "devices")
    driver = VgpuDriver(conf, helpers.simulated_host("m10"))
    config = driver.config
    assert config.get("nvidia-35").max_instances == 3  # Nova's IntOpt
    assert config.get("nvidia-36").resource_class == "CUSTOM_SMALL"
    plans = driver.update_provider_tree(new_tree(), "node1")
    assert {p.resource_class for p in plans} == {"VGPU", "CUSTOM_SMALL"}
    assert sum(p.total for p in plans if p.type_id == "nvidia-35") == 3


def test_the_caller_s_connection_is_used_and_never_closed(tmp_path):
    uri, sysfs = helpers.hostdesc.materialize(helpers.load("m10"), tmp_path)
    connection = libvirt.open(uri)
    opened = []
    host = LibvirtHost(
        "unused:///", sysfs, connection=connection, opener=opened.append
    )
    assert len(host.discover().parents) == 4
    host.close()
    assert opened == []  # never opened its own
    assert connection.isAlive() == 1
    connection.close()


def test_a_type_enabled_on_a_running_service_is_offered(tmp_path):
    path = tmp_path / "nova.conf"
    path.write_text("[devices]\nenabled_mdev_types = nvidia-35\n")
    conf = cfg.ConfigOpts()
    vconf.register_opts(conf)
    conf(["--config-file", str(path)], default_config_files=[])
    conf.set_override("state_path", str(tmp_path / "state"), "devices")
    host = helpers.simulated_host("m10")
    driver = VgpuDriver(conf, host)
    tree = new_tree()
    plans = {p.device: p for p in driver.update_provider_tree(tree, "node1")}
    # 86 serves no enabled type but a guest uses one of its nvidia-36
    # mdevs: kept, fully reserved (in VGPU, the class it had)
    before = plans["pci_0000_86_00_0"]
    assert before.reserved == before.total
    assert before.resource_class == "VGPU"
    path.write_text(
        textwrap.dedent(M10).replace("[DEFAULT]\nhost = compute7", "")
    )
    conf.reload_config_files()
    driver.reload_config()
    # nvidia-36 enabled in CUSTOM_SMALL: while that guest uses its mdev
    # (an allocation of VGPU, Placement would not let the class go) the
    # provider stays as it was, and says why
    plans = {p.device: p for p in driver.update_provider_tree(tree, "node1")}
    kept = plans["pci_0000_86_00_0"]
    assert (kept.resource_class, kept.reserved) == ("VGPU", kept.total)
    assert kept.reason == (
        "its resource class changed to CUSTOM_SMALL while guests use "
        f"{kept.total} nvidia-36 device(s)"
    )
    for guest in host.discover().guests:
        on_86 = host.discover().mdevs_of("pci_0000_86_00_0")
        if set(guest.mdevs) & {m.uuid for m in on_86}:
            host.forget_guest(guest.uuid)
            driver.domain_event(guest.uuid, False)
    plans = {p.device: p for p in driver.update_provider_tree(tree, "node1")}
    after = plans["pci_0000_86_00_0"]
    assert after.resource_class == "CUSTOM_SMALL"
    assert after.total > after.reserved == 0
    assert list(tree.data("node1_pci_0000_86_00_0").inventory) == [
        "CUSTOM_SMALL"
    ]
    # an invalid edit is refused and the running configuration stays
    path.write_text(
        "[devices]\nenabled_mdev_types = nvidia-35\n[mdev_nvidia-35]\nmdev_class = bad class\n"
    )
    conf.reload_config_files()
    with pytest.raises(ConfigInvalid, match="mdev_class"):
        driver.reload_config()
    assert {t.type_id for t in driver.config.types} == {
        "nvidia-35",
        "nvidia-36",
    }


def test_a_driver_the_caller_drops_is_freed_at_once(tmp_path, make_conf):
    """No reference cycle between the driver and the host it reads: a
    driver (and what it read) the caller drops is freed at once, not at
    Python's next full garbage collection, and the host it leaves still
    reads the types the driver enabled."""
    uri, sysfs = helpers.hostdesc.materialize(helpers.load("m10"), tmp_path)
    connection = libvirt.open(uri)
    host = LibvirtHost(sysfs_root=sysfs, connection=connection)
    conf = make_conf("[devices]\nenabled_mdev_types = nvidia-35\n")
    conf.set_override("state_path", str(tmp_path / "state"), "devices")
    gc.disable()
    try:
        driver = VgpuDriver(conf, host)
        assert driver.update_provider_tree(new_tree(), "node1")
        dropped = weakref.ref(driver)
        del driver
        assert dropped() is None
    finally:
        gc.enable()
    assert host.described_types is not None
    assert host.described_types() == {"nvidia-35"}
    connection.close()


def test_traits_changed_in_the_file_follow_on_reload(tmp_path):
    """The operator takes ``traits = CUSTOM_GOLD`` off a type and gives
    it ``CUSTOM_SILVER``, then the service re-reads its files (SIGHUP):
    the next refresh writes the new trait and removes the old one, and
    marks the providers with the new configuration's trait."""
    from vgpu_driver.model.config import config_trait, config_traits

    description = helpers.load("demo")
    path = tmp_path / "vgpu.conf"
    path.write_text(textwrap.dedent(description.config))
    conf = cfg.ConfigOpts()
    vconf.register_opts(conf)
    conf(["--config-file", str(path)], default_config_files=[])
    conf.set_override("state_path", str(tmp_path / "state"), "devices")
    driver = VgpuDriver(conf, helpers.simulated_host("demo"))
    tree = new_tree()
    driver.update_provider_tree(tree, "node1")
    name = "node1_pci_0000_84_00_0"
    assert "CUSTOM_GOLD" in tree.data(name).traits
    [written_by] = config_traits(tree.data(name).traits)
    path.write_text(
        textwrap.dedent(description.config).replace(
            "traits = CUSTOM_GOLD", "traits = CUSTOM_SILVER"
        )
    )
    conf.reload_config_files()
    driver.reload_config()
    driver.update_provider_tree(tree, "node1")
    traits = tree.data(name).traits
    assert "CUSTOM_SILVER" in traits and "CUSTOM_GOLD" not in traits
    # the mark of the configuration that wrote it follows the new one
    [now_by] = config_traits(traits)
    assert now_by != written_by
    assert now_by == config_trait(
        driver.settings.config, conf.devices.owner_trait
    )
