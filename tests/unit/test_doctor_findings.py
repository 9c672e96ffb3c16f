"""What ``vgpu-driver doctor`` says of each GPU and tool, and at which
level: a GPU that offers vGPUs is ok, one that offers no enabled type a
warning; MIG's free instances as NVML says them; no display controller
said so, and mdevctl judged only where there are mdev parents; the
table in text, levels upper-cased."""

from __future__ import annotations

from tests.cli_runs import run_cli, run_json, write_host


def _by_check(data):
    return {f["check"]: (f["level"], f["detail"]) for f in data["findings"]}


def test_each_gpu_is_judged_by_what_it_offers(capsys):
    _code, data = run_json(capsys, "m10")
    found = _by_check(data)
    for address in ("0000:84:00.0", "0000:85:00.0", "0000:86:00.0"):
        assert found[f"{address} NVIDIA 0x13bd"][0] == "ok"
    level, detail = found["0000:87:00.0 NVIDIA 0x13bd"]
    assert level == "warning" and "no enabled type" in detail
    assert found["mdevctl"][0] == "info"  # there are mdev parents
    assert "GPUs" not in found  # there are display controllers


def test_mig_s_free_instances_are_said_per_gpu(capsys):
    _code, data = run_json(capsys, "h100nvl-mig")
    level, detail = _by_check(data)["GPU 0000:98:00.0"]
    assert level == "info" and detail.startswith("MIG on; free GPU")


def test_a_host_without_gpus_says_so_and_judges_no_tool(tmp_path, capsys):
    host = write_host(tmp_path, {"parents": []})
    _code, data = run_json(capsys, host)
    found = _by_check(data)
    assert found["GPUs"] == ("info", "no display controller found")
    assert "mdevctl" not in found  # no mdev parent: nothing needs it
    assert "NVIDIA vGPU manager" not in found


def test_the_text_table_upper_cases_the_levels(capsys):
    _code, out, _err = run_cli(capsys, "--host-description", "m10", "doctor")
    lines = out.splitlines()
    assert lines[0].split() == ["Level", "Check", "Detail"]
    assert lines[2].startswith("OK ") and "WARNING" in out


def test_a_card_s_size_mode_is_said_and_intel_alone_needs_no_nvml(capsys):
    """rtx6000-nvml: NVML says the card is in equal-size mode, and how to
    mix sizes. gvtg (an Intel GPU alone): no NVIDIA finding at all, not
    even where capacity comes from."""
    _code, data = run_json(capsys, "rtx6000-nvml")
    level, detail = _by_check(data)["GPU 0001:c8:00.0"]
    assert level == "info" and detail.startswith("equal-size mode")
    _code, data = run_json(capsys, "gvtg")
    found = _by_check(data)
    assert "capacity source" not in found
    assert "NVIDIA vGPU manager" not in found
    assert found["0000:00:02.0 Intel 0x162a"][0] == "ok"
