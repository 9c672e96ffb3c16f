"""The service as a non-root user (nova), root's tools beside it: run
for real under another uid, on a simulated host (its sysfs is the
service's own, so no privilege is needed there; the real /sys goes
through privsep, tests/unit/test_privileged_writes.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

import pytest

from tests import helpers
from vgpu_driver.cmd import main as cli
from vgpu_driver.records.claims import ClaimsRecord
from vgpu_driver.records.store import StateStore
from vgpu_driver.sim import description as hostdesc

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
SYSTEM_PYTHON = Path("/usr/bin/python3")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not SYSTEM_PYTHON.exists(),
    reason="needs root (to switch users) and a system python3",
)

SERVICE = r"""
import json, sys, uuid
from oslo_config import cfg
from vgpu_driver import conf as vconf
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.model.provider_tree import ProviderTree

conf_file, uri, sysfs, step = sys.argv[1:5]
conf = cfg.ConfigOpts()
vconf.register_opts(conf)
conf(["--config-file", conf_file], default_config_files=[])
driver = VgpuDriver(conf, LibvirtHost(uri, sysfs))
driver.init_host(None)
tree = ProviderTree()
tree.new_root("n", "8f0b2c1e-1d7a-4b6e-9a51-0c3f5e7d9b21")
[plan] = driver.update_provider_tree(tree, "n")
rp = tree.data(plan.name).uuid
instance = str(uuid.uuid4())
devices = driver.allocate_mdevs(instance, {rp: {"resources": {"VGPU": 1}}})
released = driver.release_mdevs(instance) if step == "release" else []
print(json.dumps({"bound": [d.id for d in devices], "released": released}))
"""


def as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    # the packages of the interpreter running the tests (the work tree's
    # .venv, wherever the tree is: a copy of it too)
    site = sysconfig.get_paths()["purelib"]
    return subprocess.run(
        [str(SYSTEM_PYTHON), *args],
        capture_output=True,
        text=True,
        timeout=120,
        user=NOBODY,
        group=NOBODY,
        env={
            "PYTHONPATH": f"{ROOT}:{site}",
            "HOME": "/tmp",
            "PATH": "/usr/bin:/bin",
        },
        cwd="/tmp",
    )


@pytest.fixture
def home():
    """A directory the service user can reach (pytest's own tmp_path
    under /tmp/pytest-of-root is root's alone)."""
    top = Path(tempfile.mkdtemp(prefix="vgpu-nonroot-", dir="/tmp"))
    top.chmod(0o755)
    yield top / "nova-home"
    shutil.rmtree(top, ignore_errors=True)


def test_the_service_runs_as_its_own_user_beside_root_s_tools(home):
    base = home
    base.mkdir()
    uri, sysfs = hostdesc.materialize(helpers.load("l40-sriov"), base / "host")
    state = base / "vgpu"
    conf_file = base / "nova.conf"
    conf_file.write_text(
        helpers.load("l40-sriov").config
        + f"[devices]\nstate_path = {state}\n"
        + f"[libvirt]\nconnection_uri = {uri}\nsysfs_root = {sysfs}\n"
    )
    for path in [base, *base.rglob("*")]:
        os.lchown(path, NOBODY, NOBODY)

    # the service, as nobody: a bind types a VF, records are written
    first = as_nobody("-c", SERVICE, str(conf_file), uri, str(sysfs), "keep")
    assert first.returncode == 0, first.stderr[-2000:]
    [vf] = json.loads(first.stdout)["bound"]
    assert (
        sysfs / "bus/pci/devices" / vf / "nvidia/current_vgpu_type"
    ).read_text().strip() == "1150"

    # root's tools on the same records (restore at boot, audit --fix),
    # and a write of root's to them, as a repair makes one
    assert cli.main(["--config-file", str(conf_file), "restore"]) == 0
    cli.main(["--config-file", str(conf_file), "audit", "--fix"])
    # (with no journal of the claims: root's save makes the next one)
    (state / "claims.journal").unlink()
    record = ClaimsRecord(StateStore(state))
    with record.locked():
        record.save()

    # the service again, as nobody: nothing of root's locks it out
    again = as_nobody(
        "-c", SERVICE, str(conf_file), uri, str(sysfs), "release"
    )
    assert again.returncode == 0, again.stderr[-2000:]
    result = json.loads(again.stdout)
    assert result["bound"] and result["released"] == result["bound"]
    owners = {p.name: p.stat().st_uid for p in state.iterdir()}
    assert owners and set(owners.values()) == {NOBODY}, owners
