"""What a command works on (``vgpu_driver.cmd.context``): a simulated
host in a folder of its own, with its own configuration unless the
operator gives one, and the records kept away from a real host's."""

from __future__ import annotations

import os
from pathlib import Path

from tests.cli_runs import run_cli
from vgpu_driver.cmd import main as cli
from vgpu_driver.cmd.context import Context, open_context


def _opened(*argv: str) -> Context:
    conf = cli.make_conf()
    conf(list(argv), project="vgpu-driver")
    return open_context(conf, list(argv))


def test_a_simulated_host_keeps_everything_in_its_own_folder():
    """No configuration file: the description's own configuration, its
    host served from a temporary folder, the records in that folder
    (never the standalone default, a real host's), all gone at close."""
    context = _opened("--host-description", "m10", "inventory")
    assert context.workdir is not None
    folder = Path(context.workdir.name)
    conf = context.conf
    assert conf.devices.enabled_mdev_types == ["nvidia-35", "nvidia-36"]
    assert Path(conf.devices.state_path) == folder / "state"
    assert conf.libvirt.connection_uri.startswith(f"test://{folder}/")
    assert context.host.uri == conf.libvirt.connection_uri
    assert conf.host == context.description.hostname
    context.close()
    assert not folder.exists()


def test_the_operator_s_file_wins_over_the_description_s(tmp_path):
    """A configuration file and a host description: the file's types
    and records, the description's host."""
    records = tmp_path / "records"
    mine = tmp_path / "mine.conf"
    mine.write_text(
        "[devices]\n"
        "enabled_mdev_types = nvidia-36\n"
        f"state_path = {records}\n"
        "[mdev_nvidia-36]\n"
        "device_addresses = 0000:86:00.0\n"
    )
    context = _opened(
        "--config-file", str(mine), "--host-description", "m10", "inventory"
    )
    try:
        conf = context.conf
        assert conf.devices.enabled_mdev_types == ["nvidia-36"]
        assert conf.devices.state_path == str(records)
        assert conf.libvirt.connection_uri.startswith("test://")
        assert context.config_files == [str(mine)]
    finally:
        context.close()


def test_a_configuration_file_alone_opens_its_own_libvirt(tmp_path, capsys):
    """No host description: the file's ``[libvirt] connection_uri``,
    no folder of the command's own; the host found there is read."""
    served = _opened("--host-description", "m10", "inventory")
    try:
        uri = served.conf.libvirt.connection_uri
        sysfs = served.conf.libvirt.sysfs_root
        mine = tmp_path / "mine.conf"
        mine.write_text(
            "[devices]\n"
            "enabled_mdev_types = nvidia-36\n"
            f"state_path = {tmp_path / 'records'}\n"
            "[mdev_nvidia-36]\n"
            "device_addresses = 0000:86:00.0\n"
            "[libvirt]\n"
            f"connection_uri = {uri}\n"
            f"sysfs_root = {sysfs}\n"
        )
        context = _opened("--config-file", str(mine), "inventory")
        try:
            assert context.workdir is None
            assert context.host.uri == uri
            # a configuration added (the demo's Placement): a folder of
            # the command's own, gone at close
            context.add_config("[placement]\nregion_name = here\n")
            assert context.conf.placement.region_name == "here"
            added = Path(context.config_files[-1])
            assert added.parent == context.folder() != tmp_path
        finally:
            context.close()
        assert not added.parent.exists()
        code, out, _err = run_cli(
            capsys, "--config-file", str(mine), "inventory", "--format", "json"
        )
        assert code == 0
        assert "pci_0000_86_00_0" in out
        assert os.path.isdir(served.workdir.name)  # not the command's own
    finally:
        served.close()
