"""The capability traits of types whose driver describes nothing come
from the tables of Nova's Queens vGPU spec (``../shared/seeds``: NVIDIA
GRID K1 and Intel GVT-g on an Iris Pro P6300), written out here from
that spec, not from the library's catalogue; and a description is read
whichever way its vendor writes it."""

from __future__ import annotations

import os_traits
import pytest

from vgpu_driver.model import trait
from vgpu_driver.model.device import MdevType

HEADS = "HW_GPU_MAX_DISPLAY_HEADS_"
RESOLUTION = "HW_GPU_RESOLUTION_"

# vGPU model: framebuffer MB, max heads, max resolution (the spec's table)
SPEC = {
    "GRID K180Q": (4096, 4, (2560, 1600)),
    "GRID K160Q": (2048, 4, (2560, 1600)),
    "GRID K140Q": (1024, 2, (2560, 1600)),
    "GRID K120Q": (512, 2, (1920, 1200)),
    "GRID K100": (256, 2, (1920, 1200)),
    "i915-GVTg_V5_4": (128, 1, (1920, 1080)),
}


def _expected_traits(heads, resolution):
    width, height = resolution
    found = set()
    for name in os_traits.get_traits(HEADS):
        if int(name.removeprefix(HEADS)) <= heads:
            found.add(name)
    for name in os_traits.get_traits(RESOLUTION):
        w, h = name.removeprefix(RESOLUTION).lstrip("W").split("H")
        if int(w) <= width and int(h) <= height:
            found.add(name)
    return frozenset(found)


@pytest.mark.parametrize("model", sorted(SPEC))
def test_a_type_the_driver_does_not_describe_has_the_spec_s_figures(model):
    framebuffer, heads, resolution = SPEC[model]
    # GRID K1 types by their name; GVT-g's names none: by its id
    if model.startswith("GRID"):
        mdev_type = MdevType("nvidia-11", model, "vfio-pci", 4)
    else:
        mdev_type = MdevType(model, None, "vfio-pci", 7)
    found = trait.capabilities_of(mdev_type)
    assert (found.framebuffer_mb, found.heads) == (framebuffer, heads)
    assert found.max_resolution == resolution
    traits = trait.capability_traits(found)
    assert traits == _expected_traits(heads, resolution)
    w, h = resolution
    assert f"{RESOLUTION}W{w}H{h}" in traits  # its own, inclusive
    assert f"{HEADS}{heads}" in traits


def test_a_description_with_nothing_known_in_it_falls_back_to_the_spec():
    """A K160Q whose driver writes a description with none of the
    figures read (heads, resolution, framebuffer, instances) has the
    spec's figures, not none."""
    mdev_type = MdevType(
        "nvidia-11", "GRID K160Q", "vfio-pci", 2, description="frl_config=60"
    )
    found = trait.capabilities_of(mdev_type)
    assert (found.heads, found.max_resolution) == (4, (2560, 1600))


def test_an_i915_description_is_read_by_its_colons():
    """Intel GVT-g writes ``key: value`` lines."""
    text = "low_gm_size: 128MB\nhigh_gm_size: 384MB\nfence: 4\nresolution: 1920x1200\n"
    found = trait.parse_description(text)
    assert found.max_resolution == (1920, 1200)
    assert found.framebuffer_mb == 128
    nvidia = trait.parse_description(
        "num_heads=4, frl_config=60, framebuffer=1024M, "
        "max_resolution=5120x2880, max_instance=24"
    )
    assert (nvidia.heads, nvidia.max_resolution) == (4, (5120, 2880))
    assert (nvidia.framebuffer_mb, nvidia.max_instance) == (1024, 24)


def test_only_heads_and_resolutions_are_capability_traits():
    assert trait.is_capability_trait("HW_GPU_RESOLUTION_W1920H1080")
    assert trait.is_capability_trait("HW_GPU_MAX_DISPLAY_HEADS_2")
    assert not trait.is_capability_trait("CUSTOM_NVIDIA_11")
    assert not trait.is_capability_trait("HW_GPU_API_VULKAN")


def test_a_resolution_wider_than_the_type_s_is_not_offered():
    """A type of at most 1280x1024 fits 1280x1024 and nothing wider,
    however low: not 1600x900."""
    found = trait.parse_description("num_heads=1, max_resolution=1280x1024")
    traits = trait.capability_traits(found)
    assert "HW_GPU_RESOLUTION_W1280H1024" in traits
    assert "HW_GPU_RESOLUTION_W1600H900" not in traits
    assert traits == _expected_traits(1, (1280, 1024))


@pytest.mark.parametrize("prefix", [HEADS, RESOLUTION])
def test_the_traits_a_prefix_names_are_os_traits_own(prefix):
    """The library takes a prefix's traits from os-traits' module of
    that prefix, which is quicker than its get_traits: the two agree (a
    new os-traits that laid them out otherwise would fail here)."""
    assert trait._standard_traits(prefix) == tuple(
        os_traits.get_traits(prefix)
    )
    assert len(trait._standard_traits(prefix)) >= 5
