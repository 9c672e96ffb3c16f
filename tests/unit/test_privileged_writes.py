"""sysfs writes of a service not running as root go through an
oslo.privsep daemon that writes only what the library writes."""

from __future__ import annotations

import os
import uuid

import pytest

from vgpu_driver.exception import DeviceOperationFailed
from vgpu_driver.host import privileged
from vgpu_driver.host.sysfs import SysfsTree

MDEV = str(uuid.uuid4())


@pytest.mark.parametrize(
    ("relative", "value"),
    [
        (f"bus/mdev/devices/{MDEV}/remove", "1"),
        ("bus/pci/devices/0000:41:00.4/nvidia/current_vgpu_type", "1150"),
        ("bus/pci/devices/0000:41:00.4/nvidia/current_vgpu_type", "0"),
        (
            "devices/pci0000:80/0000:80:02.0/0000:84:00.0/"
            "mdev_supported_types/nvidia-35/create",
            MDEV,
        ),
        (
            "class/mdev_bus/0000:84:00.0/mdev_supported_types/nvidia-35/create",
            MDEV,
        ),
    ],
)
def test_the_writes_the_library_makes_are_allowed(relative, value):
    assert privileged.check(relative, value) == f"/sys/{relative}"


@pytest.mark.parametrize(
    ("relative", "value"),
    [
        ("../nonexistent-dir/x", "x"),
        ("/nonexistent-dir/x", "x"),
        ("bus/pci/devices/0000:41:00.4/../../../../nonexistent/remove", "1"),
        ("bus/pci/devices/0000:41:00.4/driver/unbind", "0000:41:00.4"),
        ("kernel/mm/transparent_hugepage/enabled", "never"),
        ("bus/pci/devices/0000:41:00.4/nvidia/current_vgpu_type", "1; ls"),
        (f"bus/mdev/devices/{MDEV}/remove", "0"),
        ("class/mdev_bus/x/mdev_supported_types/t/create", "not-a-uuid"),
    ],
)
def test_anything_else_is_refused_before_it_is_opened(relative, value):
    with pytest.raises(ValueError, match="refused"):
        privileged.check(relative, value)


@pytest.mark.parametrize(
    "relative",
    [
        # each would match an allowed write's pattern once joined
        f"../sys/bus/mdev/devices/{MDEV}/remove",
        f"/bus/mdev/devices/{MDEV}/remove",
        "class/../../tmp/x/mdev_supported_types/nvidia-35/create",
    ],
)
def test_a_path_that_is_not_below_sys_is_refused_as_such(relative):
    """``..`` anywhere, or an absolute path, is refused before any
    pattern is tried (the create pattern takes ``..`` as a directory
    name: the first check is what keeps it inside /sys)."""
    value = MDEV if relative.endswith("create") else "1"
    with pytest.raises(ValueError, match="is not a path inside /sys"):
        privileged.check(relative, value)


def test_a_link_that_leads_out_of_sys_is_refused(tmp_path, monkeypatch):
    """``class/mdev_bus/<parent>`` is a link, and the check follows it:
    a parent whose link leads out of /sys (here a /sys of the test's
    own, its link to a directory beside it) is refused."""
    root, outside = tmp_path / "sys", tmp_path / "outside"
    (outside / "mdev_supported_types/nvidia-35").mkdir(parents=True)
    (root / "class/mdev_bus").mkdir(parents=True)
    (root / "class/mdev_bus/0000:84:00.0").symlink_to(outside)
    monkeypatch.setattr(privileged, "SYSFS", str(root))
    relative = "class/mdev_bus/0000:84:00.0/mdev_supported_types/nvidia-35"
    with pytest.raises(ValueError, match="leads out of /sys"):
        privileged.check(relative + "/create", MDEV)
    inside = root / "devices/pci0000:80/0000:84:00.0"
    (inside / "mdev_supported_types/nvidia-35").mkdir(parents=True)
    (root / "class/mdev_bus/0000:84:00.0").unlink()
    (root / "class/mdev_bus/0000:84:00.0").symlink_to(inside)
    assert privileged.check(relative + "/create", MDEV) == (
        f"{root}/{relative}/create"
    )


@pytest.fixture
def daemon():
    """The privileged daemon, forked as a root helper would start it."""
    if os.geteuid() != 0:
        pytest.skip("starting a privsep daemon needs root")
    privileged.sysfs_writer.set_client_mode(True)
    privileged.sysfs_writer.start(method=privileged.priv_context.Method.FORK)
    yield privileged.sysfs_writer
    privileged.sysfs_writer.stop()


def test_a_write_crosses_into_the_daemon_and_its_error_comes_back(
    daemon, tmp_path
):
    """Through the real daemon: a path out of /sys is refused there (the
    target is a canary file of this test's own, never a system file: a
    daemon that failed to check would write it as root), and the
    kernel's error for an allowed one (no such mdev) comes back as the
    OSError it is, so the library names it."""
    canary = tmp_path / "canary"
    canary.write_text("untouched")
    gone = str(uuid.uuid4())
    with pytest.raises(ValueError, match="refused"):
        privileged.write_sysfs(os.path.relpath(canary, "/sys"), "x")
    assert canary.read_text() == "untouched"
    with pytest.raises(OSError) as raised:
        privileged.write_sysfs(f"bus/mdev/devices/{gone}/remove", "1")
    assert raised.value.errno is not None


def test_a_non_root_service_writes_through_the_daemon(daemon, monkeypatch):
    """SysfsTree on the real /sys, as a service not running as root: the
    write goes to the daemon (which finds no such mdev) and comes back as
    DeviceOperationFailed naming it."""
    calls = []
    real = privileged.write_sysfs

    def spy(relative: str, value: str) -> None:
        calls.append(relative)
        real(relative, value)

    monkeypatch.setattr(privileged, "write_sysfs", spy)
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    gone = str(uuid.uuid4())
    with pytest.raises(DeviceOperationFailed, match=gone):
        SysfsTree("/sys").remove_mdev(gone)
    assert calls == [f"bus/mdev/devices/{gone}/remove"]


def test_a_simulated_sysfs_is_written_directly(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    target = tmp_path / "bus/pci/devices/0000:41:00.4/nvidia"
    target.mkdir(parents=True)
    (target / "current_vgpu_type").write_text("0")
    SysfsTree(str(tmp_path)).set_vf_type("0000:41:00.4", 1150)
    assert (target / "current_vgpu_type").read_text() == "1150"


def test_a_root_service_writes_sysfs_itself(monkeypatch):
    """On the real /sys as root, no daemon is asked (none is started for
    a root service): the write is the process's own, and the kernel's
    answer (no such mdev) is named."""

    def refused(relative: str, value: str) -> None:
        raise AssertionError(f"the daemon was asked to write {relative}")

    monkeypatch.setattr(privileged, "write_sysfs", refused)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    gone = str(uuid.uuid4())
    with pytest.raises(DeviceOperationFailed, match=gone):
        SysfsTree("/sys").remove_mdev(gone)
    assert not os.path.exists(f"/sys/bus/mdev/devices/{gone}")
