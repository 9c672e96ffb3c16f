"""``vgpu-driver doctor`` and the GPU survey of ``discover``, on shipped
simulated hosts and on hosts made to show what goes wrong."""

from __future__ import annotations

import json

import pytest

from tests import helpers
from tests.cli_runs import raw_description, run_json, write_host
from vgpu_driver.cmd import main as cli
from vgpu_driver.sim import description as hostdesc


def findings(data):
    return {(f["check"], f["level"]): f["detail"] for f in data["findings"]}


@pytest.mark.parametrize(
    "name", ["m10", "l40-sriov", "rtx6000", "a2-vf-parents"]
)
def test_a_host_set_up_right_is_healthy(capsys, name):
    code, data = run_json(capsys, name)
    levels = {f["level"] for f in data["findings"]}
    assert code == 0 and "error" not in levels
    assert any(
        f["check"] == "IOMMU" and f["level"] == "ok" for f in data["findings"]
    )


def test_no_iommu_and_no_vfio_are_errors_naming_the_fix(capsys, tmp_path):
    description = raw_description("m10")
    description["modules"] = ["nvidia"]
    description["iommu"] = False
    code, data = run_json(capsys, write_host(tmp_path, description))
    found = findings(data)
    assert code == 1
    assert "modprobe vfio vfio_pci" in found[("vfio", "error")]
    assert "intel_iommu=on" in found[("IOMMU", "error")]


def test_nvidia_gpus_without_the_vgpu_manager_are_an_error(capsys, tmp_path):
    description = raw_description("l40-sriov")
    description["modules"] = ["vfio", "vfio_pci"]
    code, data = run_json(capsys, write_host(tmp_path, description))
    assert code == 1
    assert (
        "install NVIDIA's vGPU manager"
        in findings(data)[("NVIDIA vGPU manager", "error")]
    )


def test_vfs_not_enabled_give_the_command(capsys, tmp_path):
    description = raw_description("l40-sriov")
    description["sriov"][0]["vf_count"] = 0
    description["sriov"][0]["vf_types"] = {}
    description["guests"] = []
    path = write_host(tmp_path, description)
    code, data = run_json(capsys, path)
    text = json.dumps(data)
    assert code == 1
    assert "sriov-manage -e 0000:41:00.0" in text


def test_an_amd_sriov_gpu_is_shown_with_what_to_do_not_ignored(capsys):
    """Seed 000 names AMD MxGPU: its VFs are given as they are, and
    discover says how to enable them (it used to print 'mdev parents
    none' and nothing else)."""
    code, data = run_json(capsys, "amd-mxgpu", "discover")
    assert code == 0
    [gpu] = data["gpus"]
    assert gpu["vendor"] == "AMD" and gpu["vfs"] == 16
    assert "VFs given as they are" in gpu["role"]
    assert "enabled_mdev_types = vf-1002-692f" in gpu["note"]
    code, data = run_json(capsys, "amd-mxgpu")
    assert code == 0
    assert any("AMD SR-IOV GPU" in f["detail"] for f in data["findings"])


def test_discover_lists_every_gpu_and_folds_vfs_under_their_gpu(capsys):
    code, data = run_json(capsys, "a2-vf-parents", "discover")
    assert code == 0
    [gpu] = data["gpus"]
    assert gpu["address"] == "0000:08:00.0" and gpu["vfs"] == 16
    assert gpu["offered"] and "nvidia-746" in gpu["note"]
    code, data = run_json(capsys, "m10", "discover")
    assert code == 0
    roles = {g["address"]: g for g in data["gpus"]}
    assert len(roles) == 4
    assert not roles["0000:87:00.0"]["offered"]
    assert "no enabled type" in roles["0000:87:00.0"]["note"]


def test_a_configuration_error_is_exit_2(capsys, tmp_path):
    conf = tmp_path / "nova.conf"
    conf.write_text(
        "[devices]\nenabled_mdev_types = x\n[mdev_x]\nmax_instances = -1\n"
    )
    code = cli.main(
        ["--config-file", str(conf), "--host-description", "m10", "doctor"]
    )
    capsys.readouterr()
    assert code == 2


def test_the_survey_reads_the_real_sysfs_layout(tmp_path):
    """scan_gpus on a rendered host: classes, drivers, VFs and physfn."""
    from vgpu_driver.host.pci_scan import scan_gpus

    _uri, root = hostdesc.materialize(helpers.load("amd-mxgpu"), tmp_path)
    found = scan_gpus(str(root))
    pf = next(g for g in found if g.address == "0000:61:00.0")
    assert (pf.driver, pf.total_vfs, pf.num_vfs) == ("gim", 16, 16)
    vfs = [g for g in found if g.physfn == "0000:61:00.0"]
    assert len(vfs) == 16 and vfs[0].product_id == "0x692f"
    # a network card on the same bus is no GPU
    nic = root / "bus/pci/devices/0000:62:00.0"
    nic.mkdir()
    (nic / "class").write_text("0x020000\n")
    assert scan_gpus(str(root)) == found
    assert scan_gpus(str(tmp_path / "no-sysfs")) == []


def test_the_facts_say_whether_nvml_and_mdevctl_are_there(
    tmp_path, monkeypatch
):
    import importlib.util
    import shutil

    from vgpu_driver.host import preflight

    for path in ("/usr/sbin/mdevctl", None):
        monkeypatch.setattr(shutil, "which", lambda name, path=path: path)
        assert preflight.read_facts(str(tmp_path)).mdevctl is bool(path)

    real = importlib.util.find_spec
    for installed in (True, False):

        def find(name, *args, installed=installed):
            if name != "pynvml":
                return real(name, *args)
            return real("json") if installed else None

        monkeypatch.setattr(importlib.util, "find_spec", find)
        assert preflight.read_facts(str(tmp_path)).nvml is installed


def test_doctor_says_what_nvml_says(capsys, tmp_path):
    code, data = run_json(capsys, "h100nvl-mig")
    found = findings(data)
    assert code == 0
    assert "550.127.06" in found[("capacity source", "ok")]
    assert "profile 19: 5" in found[("GPU 0000:98:00.0", "info")]
    lost = raw_description("h100nvl-mig")
    lost["sriov"][0]["fault"] = "lost"
    code, data = run_json(capsys, write_host(tmp_path, lost))
    assert code == 1
    assert "lost" in findings(data)[("GPU 0000:98:00.0", "error")]
    code, data = run_json(capsys, "rtx6000")
    assert "no NVML" in findings(data)[("capacity source", "info")]
