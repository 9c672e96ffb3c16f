"""The devstack plugin, run as devstack runs it (its functions stubbed:
``iniset`` writes the INI file for real), leaves a nova-cpu.conf that
Nova's own options and the library both accept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.nova_options import nova_conf
from vgpu_driver.conf import loader

PLUGIN = Path(__file__).resolve().parents[2] / "devstack"

STUBS = f"""
set -e
DEST={{dest}}
NOVA_CPU_CONF={{conf}}
function is_service_enabled {{{{ [[ " $ENABLED " == *" $1 "* ]]; }}}}
function trueorfalse {{{{ local v=${{{{!2:-$1}}}}; [[ $v == True ]] && echo True || echo False; }}}}
function echo_summary {{{{ echo "summary: $*"; }}}}
function warn {{{{ echo "warn: $*"; }}}}
function pip_install {{{{ echo "pip_install $*"; }}}}
function sudo {{{{ echo "sudo $*"; }}}}
function iniset {{{{
    {sys.executable} - "$@" <<'PY'
import configparser, sys
path, section, option, value = sys.argv[1:5]
ini = configparser.ConfigParser(interpolation=None)
ini.optionxform = str
ini.read(path)
if section != "DEFAULT" and not ini.has_section(section):
    ini.add_section(section)
ini.set(section, option, value)
with open(path, "w") as handle:
    ini.write(handle)
PY
}}}}
"""


def run_plugin(tmp_path: Path, phase: str, env: str = "") -> str:
    conf = tmp_path / "nova-cpu.conf"
    script = (
        STUBS.format(dest=tmp_path, conf=conf)
        + env
        + f"\nsource {PLUGIN / 'settings'}\n"
        + f"source {PLUGIN / 'plugin.sh'} stack {phase}\n"
    )
    found = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        env={"ENABLED": "n-cpu", "PATH": "/usr/bin:/bin"},
    )
    assert found.returncode == 0, found.stderr
    return found.stdout


def test_install_puts_the_package_in_nova_s_environment_and_loads_mtty(
    tmp_path,
):
    out = run_plugin(tmp_path, "install")
    assert f"pip_install {tmp_path}/vgpu-driver" in out
    assert "sudo modprobe mtty" in out


def test_post_config_writes_a_nova_conf_nova_and_the_library_accept(
    tmp_path,
):
    run_plugin(tmp_path, "post-config")
    text = (tmp_path / "nova-cpu.conf").read_text()
    assert "compute_driver = vgpu_libvirt.LibvirtDriver" in text
    conf = nova_conf(tmp_path, text)
    assert conf["mdev_mtty-2"].mdev_class == "CUSTOM_MTTY"  # Nova's regex
    conf.set_override("state_path", str(tmp_path / "state"), "devices")
    config = loader.load_device_config(conf)
    [mtty] = config.types
    assert (mtty.type_id, mtty.resource_class) == ("mtty-2", "CUSTOM_MTTY")
    assert mtty.addresses == ("mtty",)


def test_an_operator_s_types_replace_the_mtty_default(tmp_path):
    out = run_plugin(
        tmp_path,
        "post-config",
        "VGPU_DRIVER_MDEV_TYPES=nvidia-35\n"
        "VGPU_DRIVER_DEVICE_ADDRESSES=0000:84:00.0\n"
        "VGPU_DRIVER_MDEV_CLASS=VGPU\n",
    )
    assert "summary" in out
    conf = nova_conf(tmp_path, (tmp_path / "nova-cpu.conf").read_text())
    conf.set_override("state_path", str(tmp_path / "state"), "devices")
    [t] = loader.load_device_config(conf).types
    assert (t.type_id, t.addresses) == ("nvidia-35", ("0000:84:00.0",))
    assert "modprobe" not in run_plugin(
        tmp_path, "install", "VGPU_DRIVER_MDEV_TYPES=nvidia-35\n"
    )
