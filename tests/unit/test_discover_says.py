"""What discovery says to an operator: the ``discover`` command's table
and JSON (on the shipped demo host by default), an unreachable URI as
one clear error, and the addresses in the configuration the host
contradicts (a typo, a VF's address for its GPU's, a GPU whose VFs are
not enabled yet), each said once."""

from __future__ import annotations

import json
import logging

from tests import helpers
from vgpu_driver.cmd import main as cli
from vgpu_driver.conf import loader
from vgpu_driver.model import check
from vgpu_driver.model.config import DeviceConfig, TypeConfig
from vgpu_driver.model.inventory import plan_providers


def test_unreachable_uri_from_the_cli(write_conf, capsys):
    path = write_conf(
        "[libvirt]\nconnection_uri = test:///nonexistent/host.xml\n"
    )
    assert cli.main(["--config-file", path, "discover"]) == 1
    err = capsys.readouterr().err
    assert "test:///nonexistent/host.xml" in err and "Traceback" not in err


def test_fat_fingered_address_is_reported():
    inventory = helpers.simulated_host("m10").discover()
    config = DeviceConfig(
        (
            TypeConfig(
                "nvidia-35",
                "VGPU",
                ("0000:84:00.0", "0000:48:00.0"),
                None,
                (),
                False,
                "mdev_nvidia-35",
            ),
        )
    )
    [problem] = check.unknown_addresses(config, inventory)
    assert "0000:48:00.0" in str(problem)
    assert "[mdev_nvidia-35] device_addresses" in str(problem)


def test_discover_cli_defaults_to_the_shipped_demo_host(capsys):
    assert cli.main(["discover", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = {p["name"] for p in data["parents"]}
    assert "pci_0000_84_00_0" in names
    used = {
        (p["name"], t["id"]): t["used"]
        for p in data["parents"]
        for t in p["types"]
    }
    assert used[("pci_0000_86_00_0", "nvidia-36")] == 2
    [pf] = data["sriov"]
    assert len(pf["vfs"]) == 32
    users = [m["guest"] for m in data["mdevs"] if m["guest"]]
    assert {u["name"] for u in users} == {
        "instance-00000001",
        "instance-00000002",
    }
    assert data["problems"] == []


def test_discover_cli_table_on_a_named_host(capsys):
    rc = cli.main(["--host-description", "mtty", "discover"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "Dual port serial" in out and "instance-00000041" in out
    mdevs = out[out.index("\nmdevs\n") :].splitlines()
    assert mdevs[2] != "none" and len(mdevs) > 3  # a table of them
    # no record of who made it (no state here): said so
    assert mdevs[4].split()[-1] == "unknown"


def test_discover_cli_reports_a_wrong_address(tmp_path, write_conf, capsys):
    path = write_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-35
        [mdev_nvidia-35]
        device_addresses = 0000:84:00.0,0000:48:00.0
        """
    )
    rc = cli.main(
        ["--config-file", path, "--host-description", "m10", "discover"]
    )
    out, err = capsys.readouterr()
    assert rc == 0
    # on stderr: the tables on stdout stay the tables
    assert "WARNING: [mdev_nvidia-35] device_addresses = 0000:48:00.0" in err
    assert "WARNING" not in out


def test_discover_table_spells_parents_as_the_config_and_shows_details(
    capsys,
):
    assert cli.main(["--host-description", "grid-k1", "discover"]) == 0
    out = capsys.readouterr().out
    # the address device_addresses takes, not libvirt's pci_0000_05_00_0
    assert "0000:05:00.0  GK107GL" in out and "pci_0000_05_00_0  " not in out
    assert "GRID K180Q  4096 MB, 4 heads, 2560x1600" in out


def test_discover_says_none_for_empty_sections(tmp_path, capsys):
    path = tmp_path / "empty.json"
    path.write_text('{"parents": []}')
    assert cli.main(["--host-description", str(path), "discover"]) == 0
    out = capsys.readouterr().out
    assert out.count("\nnone\n") == 3  # parents, GPUs, mdevs
    assert out.endswith("\nmdevs\nnone\n")  # and no table after it


def test_a_vf_address_in_device_addresses_names_the_gpu_to_list_instead(
    make_conf,
):
    """Nova's docs have operators list the VFs of an SR-IOV vGPU card;
    here the physical GPU is listed: the problem says which one."""
    conf = make_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-1150
        [mdev_nvidia-1150]
        device_addresses = 0000:41:00.5
        """
    )
    config = loader.load_device_config(conf)
    inventory = helpers.simulated_host("l40-sriov").discover()
    [problem] = check.unknown_addresses(config, inventory)
    assert problem.value == "0000:41:00.5"
    assert "VF of the SR-IOV GPU 0000:41:00.0" in problem.message
    assert "(0000:41:00.0)" in problem.message


def test_an_sriov_gpu_whose_vfs_are_not_enabled_says_how_to_enable_them(
    tmp_path, make_conf
):
    """NVIDIA's vGPU manager is installed but ``sriov_numvfs`` is still
    0: the GPU is discovered with no VF and its address in
    device_addresses gets the command that enables them, not 'no device
    with this address'."""
    from pathlib import Path

    host = helpers.libvirt_host(helpers.load("l40-sriov"), tmp_path)
    pf = Path(host.sysfs.root) / "bus/pci/devices/0000:41:00.0"
    (pf / "sriov_numvfs").write_text("0\n")  # as before sriov-manage -e
    for link in pf.glob("virtfn*"):
        link.unlink()
    inventory = host.discover()
    [found] = inventory.pfs
    assert found.address == "0000:41:00.0" and found.vfs == ()
    conf = make_conf(
        """
        [devices]
        enabled_mdev_types = nvidia-1150
        [mdev_nvidia-1150]
        device_addresses = 0000:41:00.0
        """
    )
    problems = check.host_problems(loader.load_device_config(conf), inventory)
    [problem] = [p for p in problems if p.option == "device_addresses"]
    assert "sriov-manage -e 0000:41:00.0" in problem.message


def test_the_service_warns_of_a_fat_fingered_address_once(
    make_conf, tmp_path, caplog
):
    """The first reading of the host logs what in the configuration it
    contradicts (each refresh does not)."""
    from tests.helpers import Node

    config = helpers.load("m10").config.replace(
        "device_addresses = 0000:84:00.0",
        "device_addresses = 0000:48:00.0,0000:84:00.0",
    )
    assert "0000:48:00.0" in config
    with caplog.at_level(logging.WARNING, logger="vgpu_driver.service"):
        n = Node(make_conf, tmp_path / "state", config=config)
        for _ in range(3):
            n.update()
            n.driver.discover(rescan_guests=True)
    told = [
        r.getMessage()
        for r in caplog.records
        if "0000:48:00.0" in r.getMessage()
    ]
    assert len(told) == 1 and told[0].startswith("Configuration: ")


def test_a_type_s_details_cell_leaves_out_what_is_unknown():
    """The discover table's details of a type: the framebuffer, heads
    and resolution its description gives, and "-" for a type whose
    description gives none (an Intel GVT-g or sample type)."""
    from vgpu_driver.cmd.discover import _details_text

    full = {"framebuffer_mb": 2048, "heads": 4, "max_resolution": "5120x2880"}
    assert _details_text(full) == "2048 MB, 4 heads, 5120x2880"
    none = dict.fromkeys(full)
    assert _details_text(none) == "-"
    assert _details_text({**none, "heads": 1}) == "1 heads"


def test_a_gpu_nvml_says_nothing_of_is_a_dash_in_the_table():
    from vgpu_driver.cmd.discover import _nvml_text

    assert _nvml_text(None) == "-"
    said = {"fault": None, "mig": False, "mixed_size": None}
    assert _nvml_text(said) == "healthy"
    assert _nvml_text({**said, "mixed_size": True}) == "mixed-size mode"
    assert _nvml_text({**said, "fault": "Xid 79"}) == "Xid 79"


def test_the_text_table_shows_the_sections_a_host_has(capsys):
    """m10 (four GPUs, each an mdev parent, no SR-IOV card): its GPUs in
    a table, no SR-IOV section at all."""
    assert cli.main(["--host-description", "m10", "discover"]) == 0
    out = capsys.readouterr().out
    gpus = out[out.index("\nGPUs on the host\n") :].splitlines()
    assert gpus[2].startswith("Address") and gpus[4].startswith("0000:84:00.0")
    assert "SR-IOV" not in out
    # a parent named on its first type's row alone
    parents = out[out.index("mdev parents\n") :].splitlines()
    assert parents[3].startswith("0000:84:00.0") and "nvidia-35" in parents[3]
    assert parents[4].split()[0] == "nvidia-36"


def test_an_mdev_parent_named_for_two_types_serves_the_first():
    """One type per pGPU, as Nova has it: the empty GPU of an M60 named in both types'
    ``device_addresses`` gets one provider, of the type listed first,
    and the second naming is said, by its section, as the one to
    remove."""
    inventory = helpers.simulated_host("m60").discover()
    both = ("0000:86:00.0",)
    config = DeviceConfig(
        tuple(
            TypeConfig(t, "VGPU", both, None, (), False, f"mdev_{t}")
            for t in ("nvidia-12", "nvidia-11")
        )
    )
    plans = plan_providers("cn", config, inventory, held={})
    assert [(p.device, p.type_id) for p in plans] == [
        ("pci_0000_86_00_0", "nvidia-12")
    ]
    [problem] = [
        p
        for p in check.host_problems(config, inventory)
        if "serves one type" in str(p)
    ]
    assert "[mdev_nvidia-11] device_addresses" in str(problem)
    assert "nvidia-12 (listed first)" in str(problem)
