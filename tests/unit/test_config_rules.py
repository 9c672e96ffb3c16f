"""The configuration's rules on what the files say, read by the pure
model (``build_device_config``): what is kept, what warns, what is
refused, and which type a device serves."""

from __future__ import annotations

import re

import pytest

from vgpu_driver.model.config import (
    CONFIG_TRAIT_PREFIX,
    RawType,
    build_device_config,
    config_trait,
)

LISTED = "0000:41:00.0"
UNLISTED = "0000:42:00.0"


def build(enabled, *raw, nova=False):
    return build_device_config(enabled, raw, nova=nova)


def test_a_type_enabled_twice_is_kept_once_with_a_warning():
    config, errors = build(["nvidia-35", "nvidia-35"])
    assert not errors
    assert [t.type_id for t in config.types] == ["nvidia-35"]
    [warning] = config.warnings
    assert (warning.option, warning.value) == (
        "enabled_mdev_types",
        "nvidia-35",
    )
    assert "listed twice" in warning.message


def test_an_empty_entry_of_enabled_mdev_types_is_no_type():
    """``enabled_mdev_types = nvidia-35,`` lists one type, not two."""
    config, errors = build(["", "nvidia-35", ""])
    assert not errors and not config.warnings
    assert [t.type_id for t in config.types] == ["nvidia-35"]


def test_blank_traits_are_skipped_and_a_repeated_one_kept_once():
    raw = RawType(
        "nvidia-35",
        "mdev_nvidia-35",
        traits=("CUSTOM_FAST", " ", "", "CUSTOM_FAST", "HW_GPU_API_VULKAN"),
    )
    config, errors = build(["nvidia-35"], raw)
    assert not errors
    assert config.types[0].traits == ("CUSTOM_FAST", "HW_GPU_API_VULKAN")


@pytest.mark.parametrize(
    ("value", "kept"),
    [("1", 1), ("100", 100), (" 50 ", 50), ("0", None), ("101", None)],
)
def test_card_share_is_a_whole_percent_from_1_to_100(value, kept):
    raw = RawType("nvidia-35", "mdev_nvidia-35", card_share=value)
    config, errors = build(["nvidia-35"], raw)
    if kept is None:
        [error] = errors
        assert (error.option, error.value) == ("card_share", value)
        assert not config.types
    else:
        assert not errors
        assert config.types[0].card_share == kept


def test_a_lower_case_class_warns_for_the_library_and_is_refused_for_nova():
    """The library reads ``vgpu_fast`` as CUSTOM_VGPU_FAST; Nova's own
    option would not start with it, so in nova.conf it is an error."""
    raw = RawType("nvidia-35", "mdev_nvidia-35", mdev_class="vgpu_fast")
    config, errors = build_device_config(["nvidia-35"], [raw])
    assert not errors
    assert config.types[0].resource_class == "CUSTOM_VGPU_FAST"
    [warning] = config.warnings
    assert warning.option == "mdev_class" and "CUSTOM_VGPU_FAST" in (
        warning.message
    )
    _, errors = build(["nvidia-35"], raw, nova=True)
    [error] = errors
    assert (error.option, error.value) == ("mdev_class", "vgpu_fast")


def two_types():
    config, errors = build(
        ["nvidia-35", "nvidia-36"],
        RawType("nvidia-35", "mdev_nvidia-35"),  # the default
        RawType("nvidia-36", "mdev_nvidia-36", device_addresses=(LISTED,)),
    )
    assert not errors
    return config


def test_an_unlisted_device_serves_the_default_type_if_it_supports_it():
    config = two_types()
    both = ["nvidia-35", "nvidia-36"]
    assert [t.type_id for t in config.types_for_device([UNLISTED], both)] == [
        "nvidia-35"
    ]
    assert config.type_for_parent([UNLISTED], both).type_id == "nvidia-35"
    # a device that cannot make the default type serves none
    assert config.types_for_device([UNLISTED], ["nvidia-36"]) == []
    assert config.type_for_parent([UNLISTED], ["nvidia-36"]) is None


def test_a_listed_device_serves_its_type_not_the_default():
    config = two_types()
    both = ["nvidia-35", "nvidia-36"]
    assert [t.type_id for t in config.types_for_device([LISTED], both)] == [
        "nvidia-36"
    ]
    assert config.types_for_device([LISTED], ["nvidia-35"]) == []


def test_the_configuration_trait_is_a_short_upper_case_digest():
    """Providers carry it across upgrades: its form is part of what a
    later release must read back."""
    trait = config_trait(two_types(), "OWNER_NOVA")
    assert re.fullmatch(re.escape(CONFIG_TRAIT_PREFIX) + "[0-9A-F]{8}", trait)
    assert trait != config_trait(two_types(), "CUSTOM_OTHER_OWNER")


def test_a_type_with_an_error_is_left_out_and_the_others_kept():
    """What ``check-config`` shows as the valid part: the type whose
    section has an error is not in it, whatever else that section says."""
    config, errors = build(
        ["nvidia-35", "nvidia-36"],
        RawType("nvidia-35", "mdev_nvidia-35", max_instances="0"),
        RawType("nvidia-36", "mdev_nvidia-36", device_addresses=(LISTED,)),
    )
    [error] = errors
    assert (error.section, error.option) == ("mdev_nvidia-35", "max_instances")
    assert [t.type_id for t in config.types] == ["nvidia-36"]
    # an unknown class is the same: no resource class, no type
    config, errors = build(
        ["nvidia-35"], RawType("nvidia-35", "mdev_nvidia-35", mdev_class="-")
    )
    assert [e.option for e in errors] == ["mdev_class"]
    assert not config.types


def test_a_type_whose_every_address_is_wrong_does_not_take_the_default():
    """Its addresses are an error, not an absence: the next type without
    device_addresses is still the default for unlisted parents."""
    config, errors = build(
        ["nvidia-35", "nvidia-36"],
        RawType("nvidia-35", "mdev_nvidia-35", device_addresses=("gpu0?",)),
        RawType("nvidia-36", "mdev_nvidia-36"),
    )
    assert [(e.option, e.value) for e in errors] == [
        ("device_addresses", "gpu0?")
    ]
    assert not config.warnings
    assert config.default_type is not None
    assert config.default_type.type_id == "nvidia-36"
