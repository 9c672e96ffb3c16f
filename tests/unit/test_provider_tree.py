"""The provider tree a host reports, provider by provider."""

from __future__ import annotations

from tests import helpers
from tests.helpers import providers, summary
from vgpu_driver.sim.simulated import SimulatedHost


def test_m10_two_types_with_legacy_group_names(driver_for):
    found = providers(driver_for("m10"))
    assert summary(found) == {
        "pci_0000_84_00_0": ("VGPU", 16, 0),  # 1 mdev + 15 available
        "pci_0000_85_00_0": ("VGPU", 16, 0),
        "pci_0000_86_00_0": ("VGPU", 16, 0),  # 2 mdevs + 14 available
    }  # 87 is listed under no type and there is no default type
    assert "CUSTOM_NVIDIA_35" in found["pci_0000_84_00_0"]["traits"]
    assert "CUSTOM_NVIDIA_36" in found["pci_0000_86_00_0"]["traits"]
    assert "CUSTOM_NVIDIA_35" not in found["pci_0000_86_00_0"]["traits"]
    for provider in found.values():
        assert "OWNER_NOVA" in provider["traits"]
        assert provider["parent"] == "node1"


def test_generic_mlx5_class(driver_for):
    found = providers(driver_for("mlx5"))
    assert summary(found) == {"pci_0000_3b_00_0": ("CUSTOM_MLX5", 64, 0)}
    assert "CUSTOM_MLX5_CORE_LOCAL" in found["pci_0000_3b_00_0"]["traits"]


def test_legacy_enabled_vgpu_types_is_the_default_type(driver_for):
    assert summary(providers(driver_for("m60"))) == {
        "pci_0000_85_00_0": ("VGPU", 16, 0),
        "pci_0000_86_00_0": ("VGPU", 16, 0),
    }


def test_grid_k1_default_type_and_catalogue_traits(driver_for):
    found = providers(driver_for("grid-k1"))
    assert summary(found) == {
        "pci_0000_05_00_0": ("VGPU", 2, 0),  # K160Q default: 1 + 1
        "pci_0000_06_00_0": ("VGPU", 8, 0),  # K120Q listed: 1 + 7
        "pci_0000_07_00_0": ("VGPU", 8, 0),
        "pci_0000_08_00_0": ("VGPU", 2, 0),
    }
    k160q = set(found["pci_0000_05_00_0"]["traits"])
    assert {
        "HW_GPU_MAX_DISPLAY_HEADS_4",
        "HW_GPU_RESOLUTION_W2560H1600",
        "HW_GPU_RESOLUTION_W1920H1200",
        "CUSTOM_NVIDIA_163",
    } <= k160q
    assert "HW_GPU_RESOLUTION_W3840H2160" not in k160q
    k120q = set(found["pci_0000_06_00_0"]["traits"])
    assert "HW_GPU_RESOLUTION_W1920H1200" in k120q
    assert "HW_GPU_RESOLUTION_W2560H1440" not in k120q
    assert "HW_GPU_MAX_DISPLAY_HEADS_4" not in k120q


def test_gvtg_without_type_name_uses_the_catalogue(driver_for):
    found = providers(driver_for("gvtg"))
    assert summary(found) == {"pci_0000_00_02_0": ("VGPU", 7, 0)}
    traits = set(found["pci_0000_00_02_0"]["traits"])
    assert {
        "HW_GPU_MAX_DISPLAY_HEADS_1",
        "HW_GPU_RESOLUTION_W1920H1080",
        "CUSTOM_I915_GVTG_V5_4",
    } <= traits
    assert "HW_GPU_RESOLUTION_W1920H1200" not in traits


def test_nvidia_description_gives_heads_and_resolutions(driver_for):
    found = providers(driver_for("dense"))
    traits = set(found["pci_0000_10_00_0"]["traits"])
    # num_heads=2, max_resolution=2560x1600 (GRID M10-0B)
    assert "HW_GPU_MAX_DISPLAY_HEADS_2" in traits
    assert "HW_GPU_MAX_DISPLAY_HEADS_4" not in traits
    assert "HW_GPU_RESOLUTION_W2560H1600" in traits
    assert "HW_GPU_RESOLUTION_W3840H2160" not in traits


def test_virtual_parent_with_custom_class(driver_for):
    found = providers(driver_for("mtty"))
    assert summary(found) == {"mtty": ("CUSTOM_SERIAL", 12, 0)}


def test_sriov_card_is_one_provider_per_physical_gpu(driver_for):
    found = providers(driver_for("l40-sriov"))
    # 2 VFs carry L40S-4Q; 12 fit on the 48 GiB board; 32 VFs
    assert summary(found) == {"pci_0000_41_00_0": ("VGPU", 12, 0)}
    assert "CUSTOM_NVIDIA_1150" in found["pci_0000_41_00_0"]["traits"]


def test_sriov_type_not_configured_gets_no_provider(driver_for):
    config = "[devices]\nenabled_mdev_types = nvidia-35\n"
    # one VF's vGPU is still in use by a guest: kept, reserved
    assert summary(providers(driver_for("l40-sriov", config))) == {
        "pci_0000_41_00_0": ("VGPU", 1, 1)
    }
    host = SimulatedHost(helpers.load("l40-sriov"))
    host.forget_guest(host.discover().guests[0].uuid)
    assert providers(driver_for("l40-sriov", config, host)) == {}


def test_max_instances_caps_parents_in_order_and_type_change_reserves(
    driver_for,
):
    config = """
        [devices]
        enabled_mdev_types = nvidia-36
        [mdev_nvidia-36]
        max_instances = 20
    """
    found = summary(providers(driver_for("m10", config)))
    assert found == {
        # 84 holds a guest's nvidia-35 device: it keeps it, takes nothing
        "pci_0000_84_00_0": ("VGPU", 1, 1),
        "pci_0000_85_00_0": ("VGPU", 16, 0),  # first in order: 16 of 19
        "pci_0000_86_00_0": ("VGPU", 4, 0),  # 1 in use + the last 3
    }  # 87: nothing left of the cap


def test_lowered_cap_below_use_keeps_in_use_reserved(driver_for):
    config = """
        [devices]
        enabled_mdev_types = nvidia-36
        [mdev_nvidia-36]
        device_addresses = 0000:86:00.0,0000:87:00.0
        max_instances = 1
    """
    host = SimulatedHost(helpers.load("m10"))
    parent = host.discover().parent("pci_0000_86_00_0")
    host.create_mdev(
        parent, "nvidia-36", "11111111-0000-0000-0000-000000000001"
    )
    from vgpu_driver.model.device import Guest

    host.note_guest(
        Guest("g2", "extra", ("11111111-0000-0000-0000-000000000001",))
    )
    found = summary(providers(driver_for("m10", config, host)))
    assert found == {
        # two devices in use on 86 against a cap of 1: kept, reserved
        "pci_0000_86_00_0": ("VGPU", 2, 2),
        # 84 serves no enabled type but a guest uses its nvidia-35 mdev
        "pci_0000_84_00_0": ("VGPU", 1, 1),
    }


def test_a_parent_full_of_devices_in_use_is_offered_no_more_under_a_cap(
    driver_for,
):
    """84 holds its 16 nvidia-35, all in use; the cap of 20 is not
    reached: 84 offers its 16 (none free), never one more than it holds;
    85 the 4 of the cap that are left."""
    from vgpu_driver.model.device import Guest

    host = SimulatedHost(helpers.load("m10"))
    parent = host.discover().parent("pci_0000_84_00_0")
    for n in range(15):
        mdev = f"11111111-0000-0000-0000-{n:012d}"
        host.create_mdev(parent, "nvidia-35", mdev)
        host.note_guest(Guest(f"g{n}", f"extra-{n}", (mdev,)))
    config = helpers.load("m10").config + (
        "[vgpu_nvidia-35]\nmax_instances = 20\n"
    )
    found = summary(providers(driver_for("m10", config, host)))
    assert found["pci_0000_84_00_0"] == ("VGPU", 16, 0)
    assert found["pci_0000_85_00_0"] == ("VGPU", 4, 0)


def test_a_parent_whose_guests_use_two_old_types_keeps_the_most_used():
    """The M60's free GPU now serves nvidia-18 alone while guests use
    three nvidia-12 and one nvidia-11 there: its provider keeps the four
    in use as the type most of them are, and takes nothing new, in the
    class its provider has."""
    from vgpu_driver.model import naming
    from vgpu_driver.model.config import DeviceConfig, TypeConfig
    from vgpu_driver.model.inventory import plan_providers

    inventory = helpers.simulated_host("m60").discover()
    config = DeviceConfig(
        (TypeConfig("nvidia-18", "VGPU", (), None, (), True, "mdev_x"),)
    )
    gpu = "pci_0000_86_00_0"
    plans = plan_providers(
        "cn",
        config,
        inventory,
        held={gpu: {"nvidia-11": 1, "nvidia-12": 3}},
    )
    [kept] = [p for p in plans if p.device == gpu]
    assert (kept.type_id, kept.total, kept.reserved) == ("nvidia-12", 4, 4)
    # a type no longer enabled reports VGPU; but a provider that exists
    # keeps its class (the guests' allocations are in it)
    assert kept.resource_class == "VGPU"
    plans = plan_providers(
        "cn",
        config,
        inventory,
        held={gpu: {"nvidia-12": 2}},
        existing={naming.provider_name("cn", gpu): ["CUSTOM_GRID"]},
    )
    [kept] = [p for p in plans if p.device == gpu]
    assert (kept.type_id, kept.resource_class) == ("nvidia-12", "CUSTOM_GRID")


def test_a_parent_holding_mdevs_of_two_types_counts_each():
    """GVT-g mixes its types on one GPU: with a V5_8 made beside the
    V5_4s, the device the plan reads has both counted, each of its own
    type, whatever order the mdevs come in."""
    import uuid

    from vgpu_driver.model.config import DeviceConfig
    from vgpu_driver.model.plan_devices import devices_of

    host = helpers.simulated_host("gvtg")
    gpu = host.discover().parents[0]
    for type_id in ("i915-GVTg_V5_8", "i915-GVTg_V5_4", "i915-GVTg_V5_8"):
        host.create_mdev(gpu, type_id, str(uuid.uuid4()))
        gpu = host.discover().parents[0]
    [device] = devices_of(host.discover(), DeviceConfig(()))
    assert dict(device.existing) == {
        "i915-GVTg_V5_4": 2,
        "i915-GVTg_V5_8": 2,
    }
