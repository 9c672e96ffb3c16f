"""The vGPU host driver's version as a trait on the device providers:
live migration needs the same on both ends, and a flavor can require
it so the scheduler picks only compatible hosts."""

from __future__ import annotations

from tests import helpers
from vgpu_driver.model import naming
from vgpu_driver.sim import specs

TRAIT = "CUSTOM_VGPU_HOST_NVIDIA_570_124_03"


def test_the_trait_names_the_driver_and_its_version():
    assert naming.host_driver_trait("nvidia", "570.124.03") == TRAIT
    assert (
        naming.host_driver_trait("nvidia", "550.54.16-vgpu")
        == "CUSTOM_VGPU_HOST_NVIDIA_550_54_16_VGPU"
    )


def test_nvidia_providers_carry_the_vgpu_manager_version(make_conf, tmp_path):
    node = helpers.Node(make_conf, tmp_path, "m10")
    plans = node.update()
    nvidia = [p for p in plans.values()]
    assert nvidia and all(TRAIT in p.traits for p in nvidia)
    for plan in plans.values():
        assert TRAIT in node.tree.data(plan.name).traits


def test_sriov_cards_carry_it_too_and_mtty_does_not(make_conf, tmp_path):
    node = helpers.Node(make_conf, tmp_path / "a", "l40-sriov")
    assert all(TRAIT in p.traits for p in node.update().values())
    node = helpers.Node(make_conf, tmp_path / "b", "mtty")
    assert not any(
        t.startswith(naming.HOST_DRIVER_TRAIT_PREFIX)
        for p in node.update().values()
        for t in p.traits
    )


def test_an_upgraded_driver_replaces_the_trait(
    make_conf, tmp_path, monkeypatch
):
    """The vGPU manager upgraded (its module reloaded, so the devices
    are read anew): the old version's trait goes, the new one comes."""
    node = helpers.Node(make_conf, tmp_path, "l40-sriov")
    [plan] = node.update().values()
    monkeypatch.setattr(specs, "NVIDIA_HOST_DRIVER", "580.65.05")
    node.host.set_vf_type("0000:41:00.6", 1150)  # the host reads anew
    [plan] = node.update().values()
    traits = node.tree.data(plan.name).traits
    assert "CUSTOM_VGPU_HOST_NVIDIA_580_65_05" in traits
    assert TRAIT not in traits
