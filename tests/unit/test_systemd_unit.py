"""The shipped restore unit runs the operator's vgpu-driver on the
records nova-compute keeps for this node."""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

UNIT = (
    Path(__file__).resolve().parents[2]
    / "etc"
    / "systemd"
    / "vgpu-driver-restore.service"
)


def exec_start() -> list[str]:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.read_string(UNIT.read_text())
    # systemd writes a literal $ as $$
    return shlex.split(parser["Service"]["ExecStart"].replace("$$", "$"))


def run_unit(tmp_path: Path, **env: str) -> list[str]:
    fake = tmp_path / "vgpu-driver"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    found = subprocess.run(
        exec_start(),
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": f"{tmp_path}:/usr/bin:/bin", **env},
    )
    return found.stdout.splitlines()


def test_the_unit_works_on_this_node_s_records(tmp_path):
    args = run_unit(tmp_path, NOVA_NODE="compute7.example.org")
    assert args == [
        "--config-file",
        "/etc/nova/nova.conf",
        "--nova-node",
        "compute7.example.org",
        "restore",
    ]


def test_the_unit_takes_the_vgpu_driver_of_nova_s_environment(tmp_path):
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (tmp_path / "vgpu-driver").write_text("#!/bin/sh\nexit 9\n")
    shutil.copy(Path("/bin/echo"), venv / "vgpu-driver")
    found = subprocess.run(
        exec_start(),
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "VGPU_DRIVER": str(venv / "vgpu-driver"),
            "NOVA_NODE": "n1",
        },
    )
    assert found.returncode == 0
    assert found.stdout.split()[-1] == "restore"


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="no systemd-analyze"
)
def test_systemd_reads_the_unit(tmp_path):
    found = subprocess.run(
        ["systemd-analyze", "verify", str(UNIT)],
        capture_output=True,
        text=True,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "err"},
    )
    assert "vgpu-driver-restore" not in found.stderr, found.stderr
    assert "/usr/local/bin" not in UNIT.read_text()
