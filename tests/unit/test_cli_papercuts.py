"""What an operator's shell does to the command line: a closed pipe,
shell completion."""

from __future__ import annotations

import subprocess
import sys


def test_a_reader_that_goes_away_is_not_a_traceback():
    """``vgpu-driver discover --format json | head -c 5`` on a host
    whose listing is larger than a pipe holds."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vgpu_driver.cmd.main",
            "--host-description",
            "dense",
            "discover",
            "--format",
            "json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout.read(5) == b'{\n  "'
    process.stdout.close()  # as head does
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_shell_completion_never_prints_a_traceback():
    found = subprocess.run(
        [
            sys.executable,
            "-m",
            "vgpu_driver.cmd.main",
            "--shell_completion",
            "bash",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in found.stderr
    assert found.returncode in (0, 2)
    if found.returncode == 2:
        assert "--shell_completion needs it" in found.stderr


def check_config_split(tmp_path, capsys, text):
    """check-config on m10 with ``text`` as nova.conf: (code, out, err)."""
    from vgpu_driver.cmd import main as cli

    path = tmp_path / "nova.conf"
    path.write_text(text)
    code = cli.main(
        [
            "--config-file",
            str(path),
            "--host-description",
            "m10",
            "check-config",
        ]
    )
    out, err = capsys.readouterr()
    return code, out, err


def check_config(tmp_path, capsys, text):
    code, out, err = check_config_split(tmp_path, capsys, text)
    return code, out + err


def test_the_legacy_option_name_is_read_not_called_unknown(tmp_path, capsys):
    code, text = check_config(
        tmp_path, capsys, "[devices]\nenabled_vgpu_types = nvidia-35\n"
    )
    assert code == 0
    assert "unknown option" not in text
    assert "nvidia-35" in text


def test_a_type_no_device_offers_mapped_to_a_real_parent_is_an_error(
    tmp_path, capsys
):
    code, text = check_config(
        tmp_path,
        capsys,
        "[devices]\nenabled_mdev_types = nvidia-99\n"
        "[mdev_nvidia-99]\ndevice_addresses = 0000:84:00.0\n",
    )
    assert code == 2
    assert "0000:84:00.0: this device does not offer nvidia-99" in text


def test_check_config_warnings_go_to_stderr_not_into_the_table(
    tmp_path, capsys
):
    code, out, err = check_config_split(
        tmp_path, capsys, "[devices]\nenabled_mdev_types = nvidia-99\n"
    )
    assert code == 0
    assert "WARNING" in err and "no device on this host offers" in err
    assert "WARNING" not in out and "nvidia-99" in out


def test_the_embedded_placement_names_the_demo_extra():
    from vgpu_driver.placement.server import PlacementNotInstalled

    message = str(PlacementNotInstalled(reason="no module named placement"))
    assert "vgpu-driver[demo]" in message
