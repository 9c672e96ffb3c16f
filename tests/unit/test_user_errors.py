"""Bad input from an operator: every problem named, exit 2, no
traceback, nothing half done."""

from __future__ import annotations

import json

import pytest

from tests import helpers
from tests.cli_runs import run_cli
from tests.helpers import Node
from vgpu_driver.conf import loader
from vgpu_driver.exception import MigrationTypeMismatch
from vgpu_driver.model.check import host_problems


def test_a_binary_config_file_exits_2(tmp_path, capsys):
    path = tmp_path / "nova.conf"
    path.write_bytes(bytes(range(128, 256)) * 3)
    code, _, err = run_cli(capsys, "--config-file", str(path), "check-config")
    assert code == 2 and "not text" in err


def test_a_bad_devices_scalar_is_reported_not_raised(write_conf, capsys):
    path = write_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-35
        failed_device_retry_interval = abc
        """
    )
    code, _, err = run_cli(capsys, "--config-file", path, "check-config")
    assert code == 2
    assert "[devices] failed_device_retry_interval" in err and "abc" in err
    code, _, err = run_cli(
        capsys, "--config-file", path, "--host-description", "m10", "inventory"
    )
    assert code == 2 and "failed_device_retry_interval" in err


def test_an_option_typo_in_a_type_group_is_a_warning(make_conf):
    conf = make_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-35
        [mdev_nvidia-35]
        device_adresses = 0000:84:00.0
        """
    )
    config, _ = loader.read_device_config(conf)
    [warning] = [w for w in config.warnings if w.option == "device_adresses"]
    assert warning.section == "mdev_nvidia-35"
    assert "did you mean device_addresses" in str(warning)


def test_an_empty_state_path_is_an_error(make_conf):
    conf = make_conf("[devices]\nstate_path =\n")
    _, errors = loader.read_device_config(conf)
    assert [(e.section, e.option) for e in errors] == [
        ("devices", "state_path")
    ]


@pytest.mark.parametrize(
    "second", ["pci_0000_84_00_0", "0000:84:00.0", "0000:84:00.0"]
)
def test_one_device_named_by_two_types_is_named_by_both(make_conf, second):
    """Written either way, the device is one, named for both types (an
    NVIDIA SR-IOV card in mixed-size mode serves both; for an mdev
    parent the host check says it takes one)."""
    conf = make_conf(
        f"""
        [devices]
        enabled_mdev_types = nvidia-35,nvidia-36
        [mdev_nvidia-35]
        device_addresses = 0000:84:00.0
        [mdev_nvidia-36]
        device_addresses = {second.upper() if ":" in second else second}
        """
    )
    config, errors = loader.read_device_config(conf)
    assert errors == []
    assert [t.addresses for t in config.types] == [("0000:84:00.0",)] * 2


def test_the_same_parent_twice_in_one_type_is_a_warning(make_conf):
    conf = make_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-35
        [mdev_nvidia-35]
        device_addresses = 0000:8A:00.0,0000:8a:00.0
        """
    )
    config, errors = loader.read_device_config(conf)
    assert not errors
    assert config.types[0].addresses == ("0000:8a:00.0",)
    assert any("again" in str(w) for w in config.warnings)


def test_host_checks_name_types_no_parent_offers(make_conf):
    conf = make_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-35,nvidia-999
        [mdev_nvidia-35]
        device_addresses = 0000:84:00.0
        [mdev_nvidia-999]
        device_addresses = 0000:85:00.0
        """
    )
    config, _ = loader.read_device_config(conf)
    inventory = helpers.simulated_host("m10").discover()
    problems = {
        (p.option, p.value): p for p in host_problems(config, inventory)
    }
    missing = problems[("enabled_mdev_types", "nvidia-999")]
    assert missing.severity == "warning"
    assert "nvidia-35, nvidia-36" in str(missing)


def test_host_checks_name_a_parent_that_does_not_offer_its_type(make_conf):
    conf = make_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-35
        [mdev_nvidia-35]
        device_addresses = 0000:3b:00.0
        """
    )
    config, _ = loader.read_device_config(conf)
    inventory = helpers.simulated_host("demo").discover()
    [problem] = host_problems(config, inventory)
    assert problem.severity == "error"
    assert "does not offer nvidia-35; it offers mlx5_core-local" in str(
        problem
    )


def test_check_config_reports_host_problems_and_exits_2(write_conf, capsys):
    path = write_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-35
        [mdev_nvidia-35]
        device_addresses = 0000:3b:00.0
        """
    )
    code, out, _ = run_cli(
        capsys,
        "--config-file",
        path,
        "--host-description",
        "demo",
        "check-config",
        "--format",
        "json",
    )
    report = json.loads(out)
    assert code == 2 and not report["valid"]
    assert "does not offer nvidia-35" in report["errors"][0]


BAD_HOSTS = {
    "escaping name": {
        "parents": [
            {
                "kind": "virtual",
                "name": "../../etc",
                "types": [{"id": "x", "capacity": 1}],
            }
        ]
    },
    "escaping type": {
        "parents": [
            {
                "kind": "virtual",
                "name": "mtty",
                "types": [{"id": "../x", "capacity": 1}],
            }
        ]
    },
    "huge vf_count": {
        "sriov": [{"address": "0000:41:00.0", "vf_count": 10**8, "types": []}]
    },
    "missing field": {"parents": [{"kind": "pci"}]},
    "not an object": [1, 2],
    "bad uuid": {"guests": [{"uuid": "../x", "name": "vm"}]},
}


@pytest.mark.parametrize("raw", BAD_HOSTS.values(), ids=list(BAD_HOSTS))
def test_a_bad_host_description_exits_2_and_writes_nothing(
    tmp_path, capsys, raw
):
    path = tmp_path / "host.json"
    path.write_text(json.dumps(raw))
    before = set(tmp_path.parent.iterdir())
    code, _, err = run_cli(capsys, "--host-description", str(path), "discover")
    assert code == 2 and "Host description" in err
    assert set(tmp_path.parent.iterdir()) == before


# -- restore and live migration -------------------------------------------


def test_restore_goes_on_past_a_failing_vf(make_conf, tmp_path):
    n = Node(make_conf, tmp_path / "state", "l40-sriov")
    devices = [
        n.driver.allocate_mdevs(f"i{i}", n.alloc(("pci_0000_41_00_0", 1)))[0]
        for i in range(3)
    ]
    set_by_us = [d.id for d in devices if d.created]
    assert len(set_by_us) >= 2
    n.host.reboot()
    n.host.failures["set_vf_type"] = lambda vf: vf == set_by_us[0]
    failed: list[str] = []
    restored = n.driver.restore_vf_types(failed)
    assert set(set_by_us[1:]) <= set(restored)
    [failure] = failed
    assert failure.startswith(f"{set_by_us[0]}: ")


def test_a_live_migration_claim_never_changes_the_type(make_conf, tmp_path):
    n = Node(make_conf, tmp_path / "state", "m10")
    with pytest.raises(MigrationTypeMismatch) as caught:
        n.driver.claim_for_live_migration(
            "mig", {"src-a": "nvidia-35"}, n.alloc(("pci_0000_86_00_0", 1))
        )
    assert "nvidia-36" in str(caught.value) and "src-a" in str(caught.value)
    assert n.driver.binder.claims() == {}
    assert n.host.operations["create_mdev"] == 0


def test_restore_command_repairs_records_and_names_each_failure(
    tmp_path, capsys
):
    state = tmp_path / "state"
    state.mkdir()
    (state / "claims.json").write_text("")
    (state / "vf-types.json").write_text(
        json.dumps({"0000:41:00.6": 1150, "0000:99:00.1": 1150})
    )
    conf = tmp_path / "nova.conf"
    conf.write_text(
        f"[devices]\nenabled_mdev_types = nvidia-1150\nstate_path = {state}\n"
    )
    code, out, err = run_cli(
        capsys,
        "--config-file",
        str(conf),
        "--host-description",
        "l40-sriov",
        "restore",
    )
    assert "Moved an unreadable record aside" in out
    assert list(state.glob("claims.json.corrupt-*"))
    assert "1 re-applied: 0000:41:00.6" in out
    assert code == 0 and "ERROR: VF" not in err  # not on the host: it waits
    assert "0000:99:00.1 is not on the host" in err


def test_nova_node_selects_that_node_s_records(tmp_path, capsys):
    """--nova-node: the records vgpu_driver.nova keeps per compute node
    ([devices] state_path/<node>), for audit and restore on its host."""
    from oslo_config import cfg

    from vgpu_driver import conf as vconf
    from vgpu_driver.cmd.context import open_context, register_cli_opts

    path = tmp_path / "nova.conf"
    path.write_text(f"[devices]\nstate_path = {tmp_path / 'state'}\n")
    conf = cfg.ConfigOpts()
    vconf.register_opts(conf)
    register_cli_opts(conf)
    argv = ["--config-file", str(path), "--nova-node", "node7"]
    conf(argv, default_config_files=[])
    context = open_context(conf, argv)
    assert conf.devices.state_path == str(tmp_path / "state" / "node7")
    context.close()
    code, _, err = run_cli(
        capsys, "--config-file", str(path), "--nova-node", "../x", "audit"
    )
    assert code == 2
    assert "--nova-node '../x' is not a compute node name" in err
