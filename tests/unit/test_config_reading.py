"""How the loader reads what oslo.config holds: a value oslo cannot
convert, options nothing reads (in files and in a ``--config-dir``),
both spellings of a type's group, a ConfigOpts never called on a command
line or holding only some groups, and the ``--nova-node`` files read as
nova.conf."""

from __future__ import annotations

from oslo_config import cfg

from vgpu_driver import conf as vconf
from vgpu_driver.cmd import context
from vgpu_driver.conf import devices, loader


def _warned(config):
    return {(w.section, w.option): str(w) for w in config.warnings}


def test_a_value_oslo_cannot_convert_says_why_without_oslo_s_preamble(
    make_conf,
):
    conf = make_conf("[devices]\nfailed_device_retry_interval = abc\n")
    _, [problem] = loader.read_device_config(conf)
    assert (problem.section, problem.option) == (
        "devices",
        "failed_device_retry_interval",
    )
    assert problem.message == (
        "cannot be read: invalid literal for int() with base 10: 'abc'; "
        "fix the value"
    )


def test_an_unread_option_in_devices_is_warned_other_groups_are_not(
    make_conf,
):
    conf = make_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-35
        enabled_mdev_type = nvidia-36
        zzz = 1
        [libvirt]
        virt_type = kvm
        [placement]
        region_name = RegionOne
        [mdev_nvidia-35]
        device_addresses = 0000:84:00.0
        """
    )
    config, problems = loader.read_device_config(conf)
    assert problems == []
    warned = _warned(config)
    assert set(warned) == {
        ("devices", "enabled_mdev_type"),
        ("devices", "zzz"),
    }
    assert (
        "did you mean enabled_mdev_types?"
        in warned[("devices", "enabled_mdev_type")]
    )
    # nothing close: the options the group has are named
    assert "known options: " in warned[("devices", "zzz")]
    assert "enabled_mdev_types" in warned[("devices", "zzz")]
    assert "unknown option in " in warned[("devices", "zzz")]


def test_an_option_nothing_reads_in_a_config_dir_file_is_a_warning(tmp_path):
    directory = tmp_path / "nova.conf.d"
    directory.mkdir()
    (directory / "10-vgpu.conf").write_text(
        "[devices]\nenabled_mdev_types = nvidia-35\n"
        "[mdev_nvidia-35]\ndevice_adresses = 0000:84:00.0\n"
    )
    conf = cfg.ConfigOpts()
    vconf.register_opts(conf)
    conf(["--config-dir", str(directory)], default_config_files=[])
    config, _ = loader.read_device_config(conf)
    assert set(_warned(config)) == {("mdev_nvidia-35", "device_adresses")}


def test_both_spellings_of_a_type_s_group_show_the_new_one(make_conf):
    """[mdev_<type>] is read when both it and the legacy [vgpu_<type>]
    are there: errors name it, not the one ignored."""
    conf = make_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-35
        [vgpu_nvidia-35]
        device_addresses = 0000:84:00.0
        [mdev_nvidia-35]
        device_addresses = 0000:85:00.0
        """
    )
    config, _ = loader.read_device_config(conf)
    [found] = config.types
    assert found.group == "mdev_nvidia-35"
    assert found.addresses == ("0000:85:00.0",)
    legacy = make_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-35
        [vgpu_nvidia-35]
        device_addresses = 0000:84:00.0
        """
    )
    [found] = loader.read_device_config(legacy)[0].types
    assert found.group == "vgpu_nvidia-35"


def test_a_conf_never_called_on_a_command_line_is_read():
    """A caller's ConfigOpts with its values set in code (as a test's
    CONF): no files to look into, and no traceback."""
    conf = cfg.ConfigOpts()
    vconf.register_opts(conf)
    conf.set_override("enabled_mdev_types", ["nvidia-35"], "devices")
    config, problems = loader.read_device_config(conf)
    assert problems == [] and config.warnings == ()
    assert [t.type_id for t in config.types] == ["nvidia-35"]


def test_a_conf_holding_the_devices_group_alone_is_read(tmp_path):
    """A caller that registers ``[devices]`` and nothing else of ours:
    the groups it lacks are not read."""
    path = tmp_path / "nova.conf"
    path.write_text("[devices]\nenabled_mdev_types = nvidia-35\n")
    conf = cfg.ConfigOpts()
    devices.register_opts(conf)
    conf(["--config-file", str(path)], default_config_files=[])
    config, problems = loader.read_device_config(conf)
    assert problems == []
    assert [t.type_id for t in config.types] == ["nvidia-35"]


def test_files_given_with_nova_node_are_judged_as_nova_conf(tmp_path):
    """``--nova-node``: the files are a compute node's nova.conf, so a
    value Nova refuses at start is an error, not a warning."""
    path = tmp_path / "nova.conf"
    path.write_text(
        "[devices]\nenabled_mdev_types = nvidia-35\n"
        "[mdev_nvidia-35]\nmdev_class = mlx5\n"
    )
    found = {}
    for extra in ([], ["--nova-node", "compute-1"]):
        conf = cfg.ConfigOpts()
        vconf.register_opts(conf)
        context.register_cli_opts(conf)
        conf(["--config-file", str(path), *extra], default_config_files=[])
        config, problems = loader.read_device_config(conf)
        found[bool(extra)] = (
            [p.option for p in problems],
            [w.option for w in config.warnings],
        )
    assert found[False] == ([], ["mdev_class"])
    assert found[True] == (["mdev_class"], [])


def test_placement_options_registered_first_by_nova_are_kept(tmp_path):
    """Inside nova-compute, Nova has registered ``[placement]`` with its
    own deprecated names (keystoneauth's options again would clash):
    ours keeps theirs, and a deprecated name Nova reads still reads."""
    from keystoneauth1 import loading as ks_loading

    path = tmp_path / "nova.conf"
    path.write_text("[placement]\nca_file = /etc/ssl/ca.pem\n")
    conf = cfg.ConfigOpts()
    conf.register_group(cfg.OptGroup("placement"))
    old = cfg.DeprecatedOpt("ca_file", group="placement")
    ks_loading.register_session_conf_options(
        conf, "placement", deprecated_opts={"cafile": [old]}
    )
    ks_loading.register_auth_conf_options(conf, "placement")
    vconf.register_opts(conf)
    conf(["--config-file", str(path)], default_config_files=[])
    assert conf.placement.cafile == "/etc/ssl/ca.pem"
    assert conf.placement.refresh_interval == 300  # ours, added


def test_the_placement_group_has_no_option_nova_s_lacks():
    """keystoneauth's adapter options without their deprecated ones, as
    Nova registers them: no ``interface`` (``valid_interfaces`` reads)."""
    conf = cfg.ConfigOpts()
    vconf.register_opts(conf)
    assert "valid_interfaces" in conf.placement
    assert "interface" not in conf.placement


def _counting_reads(monkeypatch):
    """The (group, option) pairs the loader reads, in order."""
    read: list[tuple[str, str]] = []
    real = loader._read

    def counted(conf, group, option, errors):
        read.append((group, option))
        return real(conf, group, option, errors)

    monkeypatch.setattr(loader, "_read", counted)
    return read


def _nova_like(tmp_path, text):
    """A ConfigOpts whose ``[libvirt]`` holds 40 options of another
    project (as nova.conf's holds about 150) beside the library's."""
    path = tmp_path / "nova.conf"
    path.write_text(text)
    conf = cfg.ConfigOpts()
    conf.register_opts(
        [cfg.IntOpt("wait_soft_reboot_seconds")]
        + [cfg.IntOpt(f"nova_option_{n}", default=n) for n in range(40)],
        group="libvirt",
    )
    vconf.register_opts(conf)
    conf(["--config-file", str(path)], default_config_files=[])
    return conf


def test_options_no_file_sets_are_not_read(tmp_path, monkeypatch):
    """A value oslo cannot convert comes from a file or the environment
    (a default is its declaring project's, an override its caller's):
    the options no file sets are not read, each about 10 µs at every
    configuration load; one a file sets is, whoever declares it."""
    conf = _nova_like(
        tmp_path,
        "[devices]\nenabled_mdev_types = nvidia-35\n"
        "[libvirt]\nwait_soft_reboot_seconds = soon\n",
    )
    read = _counting_reads(monkeypatch)
    config, [problem] = loader.read_device_config(conf)
    assert (problem.section, problem.option) == (
        "libvirt",
        "wait_soft_reboot_seconds",
    )
    assert [t.type_id for t in config.types] == ["nvidia-35"]
    # each of the type's options, the options the file sets, and
    # state_path (checked for an empty value)
    assert sorted(read) == sorted(
        [("mdev_nvidia-35", name) for name in devices.type_opts_help]
        + [
            ("devices", "enabled_mdev_types"),
            ("libvirt", "wait_soft_reboot_seconds"),
            ("devices", "state_path"),
        ]
    )


def test_a_name_a_group_does_not_register_has_the_whole_group_read(
    tmp_path, monkeypatch
):
    """A name the group does not register may be a deprecated one of an
    option it does: every option of that group is read then."""
    conf = _nova_like(
        tmp_path,
        "[devices]\nenabled_mdev_types = nvidia-35\n"
        "[libvirt]\nsome_old_name = 1\n",
    )
    read = _counting_reads(monkeypatch)
    loader.read_device_config(conf)
    assert {o for g, o in read if g == "libvirt"} == set(conf.libvirt)


def test_a_value_given_in_the_environment_is_read_and_checked(
    make_conf, monkeypatch
):
    """oslo.config reads ``OS_<GROUP>__<OPTION>`` from the environment:
    a value there that it cannot convert is named as one in a file is."""
    monkeypatch.setenv("OS_DEVICES__FAILED_DEVICE_RETRY_INTERVAL", "abc")
    conf = make_conf("[devices]\nenabled_mdev_types = nvidia-35\n")
    _, [problem] = loader.read_device_config(conf)
    assert (problem.section, problem.option) == (
        "devices",
        "failed_device_retry_interval",
    )
    assert "cannot be read" in problem.message


def test_a_config_source_has_every_option_of_the_groups_read(
    tmp_path, monkeypatch
):
    """oslo.config's ``config_source`` gives values from outside the
    files (a remote file, a driver): the loader cannot tell which, and
    reads every option of its groups."""
    conf = _nova_like(tmp_path, "[devices]\nenabled_mdev_types = nvidia-35\n")
    conf.set_override("config_source", ["elsewhere"])
    read = _counting_reads(monkeypatch)
    loader.read_device_config(conf)
    assert {o for g, o in read if g == "libvirt"} == set(conf.libvirt)


def test_a_configuration_never_called_reads_only_what_it_uses(monkeypatch):
    """A ConfigOpts never called on a command line (a service's CONF in
    tests) has no file, no environment source and no config_source:
    none of its group's options is read but the type's and state_path."""
    conf = cfg.ConfigOpts()
    vconf.register_opts(conf)
    conf.set_override("enabled_mdev_types", ["nvidia-35"], "devices")
    read = _counting_reads(monkeypatch)
    config, problems = loader.read_device_config(conf)
    assert problems == []
    assert [t.type_id for t in config.types] == ["nvidia-35"]
    assert sorted(read) == sorted(
        [("mdev_nvidia-35", name) for name in devices.type_opts_help]
        + [("devices", "state_path")]
    )
