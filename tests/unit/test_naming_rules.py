"""The names the library derives and the values it accepts, each held to
what Placement, os-traits and Python's own uuid say."""

from __future__ import annotations

import random
import re
import uuid

import os_traits
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vgpu_driver.model import naming


@pytest.mark.parametrize("seed", range(20))
def test_a_child_provider_s_uuid_is_uuid5_of_its_root_and_name(seed):
    rng = random.Random(seed)
    root = uuid.UUID(int=rng.getrandbits(128))
    name = f"node-{seed}_pci_0000_{rng.randrange(256):02x}_00_0"
    expected = str(uuid.uuid5(root, name))
    assert naming.child_provider_uuid(str(root), name) == expected
    # another spelling of the same root: the same uuid, by uuid's parser
    for spelling in (str(root).upper(), root.hex, f"{{{root}}}"):
        assert naming.child_provider_uuid(spelling, name) == expected


def test_a_root_that_is_no_uuid_is_refused_as_uuid_refuses_it():
    with pytest.raises(ValueError):
        naming.child_provider_uuid("not-a-uuid", "n_pci_0000_84_00_0")
    with pytest.raises(ValueError):  # 36 characters, four dashes, not hex
        naming.child_provider_uuid("zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz", "n")


def test_mdev_class_values():
    assert naming.resource_class_for(" vgpu ") == "VGPU"
    assert naming.resource_class_for("mlx5") == "CUSTOM_MLX5"
    assert (
        naming.resource_class_for("CUSTOM_NVIDIA_A100") == "CUSTOM_NVIDIA_A100"
    )
    assert naming.resource_class_for("VCPU") is None  # a standard class
    assert naming.resource_class_for("custom_") is None  # the prefix alone
    assert naming.resource_class_for("a-b") is None  # not Placement's
    longest = "CUSTOM_" + "X" * (naming.MAX_NAME_LENGTH - len("CUSTOM_"))
    assert naming.resource_class_for(longest) == longest
    assert naming.resource_class_for(longest + "X") is None
    assert naming.resource_class_for("x" * 248) == "CUSTOM_" + "X" * 248
    assert naming.resource_class_for("x" * 249) is None


def test_custom_traits_are_at_most_255_characters_of_placement_s_alphabet():
    longest = "CUSTOM_" + "A" * 248
    assert naming.is_valid_trait(longest)
    assert not naming.is_valid_trait(longest + "A")
    assert not naming.is_valid_trait("CUSTOM_lower")
    assert naming.is_valid_trait("HW_GPU_RESOLUTION_W1920H1080")
    assert not naming.is_valid_trait("HW_GPU_NOT_A_TRAIT")


def test_a_libvirt_pci_name_gives_its_address_and_nothing_else_does():
    assert naming.canonical_pci_address("pci_0000_84_00_0") == "0000:84:00.0"
    assert naming.canonical_pci_address("pci_0001_C8_00_0") == "0001:c8:00.0"
    assert naming.canonical_pci_address("mtty") is None
    assert naming.canonical_pci_address("css_0_0_0023") is None


def test_a_second_type_s_provider_name_gives_its_device_and_type_back():
    name = naming.type_provider_name("node", "pci_0000_41_00_0", "nvidia-1150")
    assert name == "node_pci_0000_41_00_0__nvidia-1150"
    short = name.removeprefix("node_")
    assert naming.provider_device(short) == ("pci_0000_41_00_0", "nvidia-1150")
    assert naming.provider_device("pci_0000_41_00_0") == (
        "pci_0000_41_00_0",
        None,
    )


def test_a_vgpu_live_migrates_between_the_same_host_drivers_only():
    ours = {naming.host_driver_trait("nvidia", "570.124.03"), "CUSTOM_X"}
    same = {naming.host_driver_trait("nvidia", "570.124.03")}
    other = {naming.host_driver_trait("nvidia", "550.54.14")}
    assert naming.driver_mismatch(ours, same) is None
    assert naming.driver_mismatch(ours, {"CUSTOM_X"}) is None  # unknown
    assert naming.driver_mismatch({"CUSTOM_X"}, other) is None  # unknown
    why = naming.driver_mismatch(ours, other)
    assert why is not None
    assert "CUSTOM_VGPU_HOST_NVIDIA_570_124_03" in why
    assert "CUSTOM_VGPU_HOST_NVIDIA_550_54_14" in why


def test_what_device_addresses_may_call_a_parent():
    """A pGPU by its address or libvirt name; a VF parent also by its
    GPU's address (all its VFs); a parent with no PCI address (mtty) by
    its name alone: never a None among them."""
    from vgpu_driver.model.device import Parent

    assert Parent("mtty", None).keys == ("mtty",)
    gpu = Parent("pci_0000_84_00_0", "0000:84:00.0")
    assert gpu.keys == ("0000:84:00.0", "pci_0000_84_00_0")
    vf = Parent(
        "pci_0000_3b_00_4", "0000:3b:00.4", physical_function="0000:3b:00.0"
    )
    assert vf.keys == ("0000:3b:00.4", "pci_0000_3b_00_4", "0000:3b:00.0")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_a_type_trait_is_the_one_os_traits_makes(type_id):
    """A type's trait is os-traits' normalize_name of its id, made
    without that function's regular expression: every run of characters
    other than ASCII letters and digits one ``_`` (a leading or trailing
    run too; a letter outside ASCII is such a character)."""
    naming.type_trait.cache_clear()
    assert naming.type_trait(type_id) == os_traits.normalize_name(type_id)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20), st.text(max_size=20))
def test_a_host_driver_trait_keeps_letters_and_digits_alone(driver, version):
    """The host driver's trait: the driver and its version in capitals,
    each run of anything else one ``_``, none at either end."""
    naming.host_driver_trait.cache_clear()
    text = re.sub(r"[^A-Z0-9]+", "_", f"{driver}_{version}".upper())
    assert naming.host_driver_trait(driver, version) == (
        "CUSTOM_VGPU_HOST_" + text.strip("_")
    )


def test_a_type_trait_of_the_types_cards_name():
    assert naming.type_trait("nvidia-35") == "CUSTOM_NVIDIA_35"
    assert naming.type_trait("i915-GVTg_V5_4") == "CUSTOM_I915_GVTG_V5_4"
    assert naming.type_trait("-a--b-") == "CUSTOM__A_B_"
    assert naming.type_trait("é") == "CUSTOM__"
