"""The device configuration: the seeds' examples and every bad input."""

from __future__ import annotations

import json

import pytest

from vgpu_driver import exception
from vgpu_driver.cmd import main as cli
from vgpu_driver.conf import loader


def test_seed_multiple_types_with_legacy_group_names(make_conf):
    conf = make_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-35,nvidia-36
        [vgpu_nvidia-35]
        device_addresses = 0000:84:00.0,0000:85:00.0
        [vgpu_nvidia-36]
        device_addresses = 0000:86:00.0
        """
    )
    config = loader.load_device_config(conf)
    by_type = {t.type_id: t for t in config.types}
    assert by_type["nvidia-35"].addresses == ("0000:84:00.0", "0000:85:00.0")
    assert by_type["nvidia-36"].addresses == ("0000:86:00.0",)
    assert config.default_type is None
    assert config.type_for_parent(["0000:85:00.0"], ["nvidia-35"]).type_id == (
        "nvidia-35"
    )
    assert config.type_for_parent(["0000:86:00.0"], ["nvidia-35"]) is None
    assert config.type_for_parent(["0000:87:00.0"], ["nvidia-35"]) is None


def test_seed_generic_mdev_class_becomes_custom(make_conf):
    conf = make_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-35,mlx5_core-local
        [mdev_nvidia-35]
        device_addresses = 0000:84:00.0,0000:85:00.0
        [mdev_mlx5_core-local]
        device_addresses = 0000:86:00.0
        mdev_class = mlx5
        """
    )
    config = loader.load_device_config(conf)
    assert config.get("mlx5_core-local").resource_class == "CUSTOM_MLX5"
    assert config.get("nvidia-35").resource_class == "VGPU"
    assert config.resource_classes() == {"VGPU", "CUSTOM_MLX5"}


def test_legacy_enabled_vgpu_types_alone_gives_default_type(make_conf):
    conf = make_conf(
        """
        [devices]
        enabled_vgpu_types = nvidia-11
        """
    )
    config = loader.load_device_config(conf)
    assert [t.type_id for t in config.types] == ["nvidia-11"]
    assert config.default_type.type_id == "nvidia-11"
    chosen = config.type_for_parent(["0000:01:00.0"], ["nvidia-11", "x"])
    assert chosen.type_id == "nvidia-11"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("VGPU", "VGPU"),
        ("vgpu", "VGPU"),
        ("CUSTOM_FPGA", "CUSTOM_FPGA"),
        ("custom_fpga", "CUSTOM_FPGA"),
        ("mlx5", "CUSTOM_MLX5"),
    ],
)
def test_mdev_class_spellings(make_conf, value, expected):
    conf = make_conf(
        f"""
        [devices]
        enabled_mdev_types = t1
        [mdev_t1]
        mdev_class = {value}
        """
    )
    assert loader.load_device_config(conf).get("t1").resource_class == expected


def test_pci_addresses_are_case_insensitive_and_names_accepted(make_conf):
    conf = make_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-35,mtty-2
        [mdev_nvidia-35]
        device_addresses = 0000:8A:00.0
        [mdev_mtty-2]
        device_addresses = mtty
        """
    )
    config = loader.load_device_config(conf)
    assert config.get("nvidia-35").addresses == ("0000:8a:00.0",)
    assert config.get("mtty-2").addresses == ("mtty",)


def test_first_type_without_addresses_is_default_second_is_ignored(
    make_conf,
):
    conf = make_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-35,nvidia-36,nvidia-37
        [mdev_nvidia-37]
        device_addresses = 0000:86:00.0
        """
    )
    config = loader.load_device_config(conf)
    assert [t.type_id for t in config.types] == ["nvidia-35", "nvidia-37"]
    assert config.default_type.type_id == "nvidia-35"
    [warning] = config.warnings
    assert "nvidia-36" in str(warning) and "nvidia-35" in str(warning)


BAD_CASES = [
    (
        """
        [devices]
        enabled_mdev_types = a
        [mdev_a]
        device_addresses = 0000:84:00
        """,
        "[mdev_a] device_addresses = 0000:84:00: not a PCI address",
    ),
    (
        """
        [devices]
        enabled_mdev_types = a
        [mdev_a]
        mdev_class = VCPU
        """,
        "[mdev_a] mdev_class = VCPU: must be VGPU, CUSTOM_<NAME>",
    ),
    (
        """
        [devices]
        enabled_mdev_types = a
        [mdev_a]
        mdev_class = bad-name
        """,
        "[mdev_a] mdev_class = bad-name",
    ),
    (
        """
        [devices]
        enabled_mdev_types = a
        [mdev_a]
        traits = HW_GPU_NO_SUCH_THING
        """,
        "[mdev_a] traits = HW_GPU_NO_SUCH_THING: unknown trait",
    ),
    (
        """
        [devices]
        enabled_mdev_types = a
        [mdev_a]
        max_instances = 0
        """,
        "[mdev_a] max_instances = 0: must be a whole number of at least 1",
    ),
    (
        """
        [devices]
        enabled_mdev_types = a
        [vgpu_a]
        max_instances = many
        """,
        "[vgpu_a] max_instances = many: must be a whole number",
    ),
    (
        """
        [devices]
        enabled_mdev_types = a
        owner_trait = owned by me
        """,
        "[devices] owner_trait = owned by me: unknown trait",
    ),
    (
        """
        [devices]
        enabled_mdev_types = a
        [placement]
        max_attempts = many
        """,
        "[placement] max_attempts: cannot be read",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_CASES)
def test_each_bad_input_names_section_option_value(
    make_conf, write_conf, capsys, text, message
):
    with pytest.raises(exception.ConfigInvalid) as caught:
        loader.load_device_config(make_conf(text))
    assert message in str(caught.value)
    rc = cli.main(["--config-file", write_conf(text), "check-config"])
    assert rc == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert "Traceback" not in captured.err + captured.out


def test_all_problems_in_one_file_are_reported(write_conf, capsys):
    path = write_conf(
        """
        [devices]
        enabled_mdev_types = a,b
        [mdev_a]
        device_addresses = 0000:84:00.0,zz:1
        max_instances = -1
        traits = NOPE
        [mdev_b]
        device_addresses = 0000:84:00.0
        mdev_class = a-b
        """
    )
    rc = cli.main(["--config-file", path, "check-config", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 2
    assert report["valid"] is False
    assert len(report["errors"]) == 4
    joined = "\n".join(report["errors"])
    for fragment in ("zz:1", "max_instances = -1", "NOPE", "a-b"):
        assert fragment in joined


def test_section_for_type_not_enabled_is_a_warning(write_conf, capsys):
    path = write_conf(
        """
        [devices]
        enabled_mdev_types = a
        [mdev_b]
        device_addresses = 0000:84:00.0
        """
    )
    rc = cli.main(["--config-file", path, "check-config", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert report["valid"] is True
    assert report["warnings"] == [
        "[mdev_b]: section for a type that is not in [devices] "
        "enabled_mdev_types; it is ignored. Enable the type or remove the "
        "section."
    ]


def test_check_config_table_shows_per_type_mapping(write_conf, capsys):
    path = write_conf(
        """
        [DEFAULT]
        host = compute1
        [devices]
        enabled_mdev_types = nvidia-35,mlx5_core-local
        [mdev_nvidia-35]
        max_instances = 4
        traits = CUSTOM_GOLD
        [mdev_mlx5_core-local]
        device_addresses = 0000:86:00.0
        mdev_class = mlx5
        """
    )
    assert cli.main(["--config-file", path, "check-config"]) == 0
    out = capsys.readouterr().out
    assert "Compute node: compute1" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line}
    assert "default for unlisted parents" in rows["nvidia-35"]
    assert "CUSTOM_GOLD" in rows["nvidia-35"] and " 4 " in rows["nvidia-35"]
    assert "CUSTOM_MLX5" in rows["mlx5_core-local"]
    assert "0000:86:00.0" in rows["mlx5_core-local"]


def test_missing_config_file_is_a_clear_error(capsys):
    rc = cli.main(["--config-file", "/nonexistent/nova.conf", "check-config"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "/nonexistent/nova.conf" in err and "Traceback" not in err


def test_debug_flag_is_accepted(write_conf, capsys):
    path = write_conf("[devices]\nenabled_mdev_types = a\n")
    assert cli.main(["--debug", "--config-file", path, "check-config"]) == 0


def test_two_configopts_do_not_share_overrides():
    """oslo.config keeps overrides on the group object: each ConfigOpts
    (a caller's, ours) must get its own."""
    from oslo_config import cfg

    from vgpu_driver import conf as vconf

    first, second = cfg.ConfigOpts(), cfg.ConfigOpts()
    for conf in (first, second):
        vconf.register_opts(conf)
        conf([], default_config_files=[])
    first.set_override("auth_type", "password", "placement")
    first.set_override("state_path", "/elsewhere", "devices")
    first.set_override("sysfs_root", "/fake", "libvirt")
    assert second.placement.auth_type is None
    assert second.devices.state_path is None  # unset: the default path
    assert second.libvirt.sysfs_root == "/sys"


def test_a_listed_parent_that_lacks_its_type_gets_none_not_the_default(
    make_conf,
):
    """0000:86:00.0 is listed for nvidia-37 but does not support it: it
    serves nothing, it does not fall back to the default nvidia-35 (the
    operator said what it is for)."""
    conf = make_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-35,nvidia-37
        [mdev_nvidia-37]
        device_addresses = 0000:86:00.0
        """
    )
    config = loader.load_device_config(conf)
    assert config.default_type.type_id == "nvidia-35"
    supported = ["nvidia-35", "nvidia-36"]
    assert config.type_for_parent(["0000:86:00.0"], supported) is None
    assert (
        config.type_for_parent(["0000:87:00.0"], supported).type_id
        == "nvidia-35"
    )


def test_a_card_full_of_the_enabled_type_still_offers_it():
    """Every VF of an L40 holding the type: no VF lists it any more, and
    the check must not say no device offers it."""
    from benchmarks.common import sriov
    from vgpu_driver.model import check
    from vgpu_driver.model.config import DeviceConfig, TypeConfig
    from vgpu_driver.sim.simulated import SimulatedHost

    description = sriov(1, used_per_card=32)
    inventory = SimulatedHost(description).discover()
    assert not any(vf.creatable for vf in inventory.pfs[0].vfs)
    config = DeviceConfig(
        (
            TypeConfig(
                "nvidia-1150", "VGPU", (), None, (), True, "mdev_nvidia-1150"
            ),
        )
    )
    assert check.host_problems(config, inventory) == []
