"""``vgpu-driver inventory``'s own report: the table (a provider's
resolution traits summed up, the notes under it), the same in JSON, and
no record written (it reads, as ``discover`` does)."""

from __future__ import annotations

import json
import re

from tests.cli_runs import run_cli

# nvidia-35 on a pGPU whose guest uses an nvidia-36 mdev: that provider
# is kept for it, with a note
KEPT = """
[devices]
enabled_mdev_types = nvidia-35
state_path = {state}
[mdev_nvidia-35]
device_addresses = 0000:84:00.0,0000:86:00.0
"""
NOTE = "its type changed to nvidia-35 while guests use 1 nvidia-36 device(s)"
P84, P86 = "m10-compute_pci_0000_84_00_0", "m10-compute_pci_0000_86_00_0"


def _inventory(write_conf, capsys, tmp_path, *extra):
    text = KEPT.format(state=tmp_path / "state")
    return run_cli(
        capsys,
        "--config-file",
        write_conf(text),
        "--host-description",
        "m10",
        "inventory",
        *extra,
    )


def _resolutions(traits):
    return [t for t in traits if t.startswith("HW_GPU_RESOLUTION_")]


def test_the_json_report_and_no_record_written(write_conf, capsys, tmp_path):
    code, out, _ = _inventory(write_conf, capsys, tmp_path, "--format", "json")
    report = json.loads(out)
    assert code == 0
    assert report["notes"] == [{"provider": P86, "note": NOTE}]
    providers = {p["name"]: p for p in report["providers"]}
    assert providers[P84]["inventories"]["VGPU"]["total"] == 16
    assert providers[P86]["inventories"]["VGPU"]["reserved"] == 1
    assert len(_resolutions(providers[P84]["traits"])) > 1
    assert not (tmp_path / "state").exists()


def test_the_table_sums_up_resolutions_and_notes(write_conf, capsys, tmp_path):
    _code, out, _ = _inventory(
        write_conf, capsys, tmp_path, "--format", "json"
    )
    traits = {p["name"]: p["traits"] for p in json.loads(out)["providers"]}
    code, out, _ = _inventory(write_conf, capsys, tmp_path)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "Compute node: m10-compute"
    rows = {
        line.split()[0]: line for line in lines if line.startswith(P84[:8])
    }
    summed = re.findall(r"\+(\d+) HW_GPU_RESOLUTION_\*", rows[P84])
    assert summed == [str(len(_resolutions(traits[P84])))]
    assert "HW_GPU_RESOLUTION_" not in rows[P84].split("+")[0]
    assert "HW_GPU_RESOLUTION" not in rows[P86]  # none: no "+0"
    assert "OWNER_NOVA" in rows[P86]
    assert [line for line in lines if line.startswith("NOTE")] == [
        f"NOTE: {P86}: {NOTE}"
    ]
