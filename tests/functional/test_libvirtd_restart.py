"""libvirtd restarts under a running service: no ``libvirtError`` ever
leaves the library, the connection comes back with backoff, and the
first pass after it reads the host and every guest again (lifecycle
events were lost while it was down).

Needs Debian's ``libvirt-daemon`` (``./run test`` installs it); skipped
where it is not installed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.common import libvirt_daemon
from tests import helpers
from vgpu_driver.exception import HostUnreachable
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.sim import description as hostdesc

LIBVIRTD = shutil.which("libvirtd") or "/usr/sbin/libvirtd"
pytestmark = pytest.mark.functional


@pytest.fixture
def directory() -> Iterator[Path]:
    if not os.access(LIBVIRTD, os.X_OK):
        pytest.skip("libvirtd is not installed (Debian's libvirt-daemon)")
    path = Path(tempfile.mkdtemp(prefix="vgpu-restart-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _served(directory: Path) -> tuple[str, Path]:
    where = directory / "hosts" / "m10"
    uri, sysfs = hostdesc.materialize(helpers.load("m10"), where)
    for path in (where, *where.rglob("*")):
        if path.is_dir():
            path.chmod(0o755)
    return uri, sysfs


def test_a_libvirtd_restart_is_our_error_then_the_host_reads_again(
    directory,
):
    uri, sysfs = _served(directory)
    with libvirt_daemon(directory) as remote:
        host = LibvirtHost(remote(uri), sysfs)
        before = host.discover()
        assert before.guests
    # the daemon is gone: the broken connection, then refused opens
    with pytest.raises(HostUnreachable):
        host.discover()
    with pytest.raises(HostUnreachable, match="libvirtd is running"):
        host.discover()
    with pytest.raises(HostUnreachable, match="next attempt in"):
        host.discover()  # backing off: no new attempt yet
    with libvirt_daemon(directory):
        time.sleep(1.1)  # the first backoff step
        host.calls.clear()
        after = host.discover()
        assert after == before
        assert host.calls["listAllDomains"] == 1  # every guest read again


def test_periodic_sync_lives_through_a_libvirtd_restart(
    directory, placement_url, monkeypatch, capsys
):
    """The issue's case: ``sync --periodic`` died with rc 1 and
    "libvirt.libvirtError: Broken pipe". Pass 1 syncs, libvirtd stops,
    pass 2 fails and is logged, libvirtd is back, pass 3 syncs."""
    from vgpu_driver.cmd import main as cli
    from vgpu_driver.cmd import sync as sync_command

    uri, sysfs = _served(directory)
    stack = contextlib.ExitStack()
    remote = stack.enter_context(libvirt_daemon(directory))
    conf = directory / "nova.conf"
    conf.write_text(
        helpers.load("m10").config
        + f"[DEFAULT]\nhost = restart-{uuid.uuid4().hex[:8]}\n"
        f"[devices]\nstate_path = {directory / 'state'}\n"
        f"[libvirt]\nconnection_uri = {remote(uri)}\n"
        f"sysfs_root = {sysfs}\n"
        "[placement]\nauth_type = admin_token\ntoken = admin\n"
        f"endpoint = {placement_url}\n"
        f"endpoint_override = {placement_url}\n"
    )
    passes = []

    def sleep(_seconds):
        passes.append(None)
        if len(passes) == 1:
            stack.close()  # libvirtd stops
        elif len(passes) == 2:
            stack.enter_context(libvirt_daemon(directory))
            time.sleep(1.1)  # the first reconnection backoff
        else:
            raise KeyboardInterrupt

    monkeypatch.setattr(sync_command, "_sleep", sleep)
    try:
        code = cli.main(
            ["--config-file", str(conf), "sync", "--periodic", "1"]
        )
    finally:
        stack.close()
    out, err = capsys.readouterr()
    assert code == 130, err
    assert "Traceback" not in out + err
    assert "libvirtError" not in out + err
    assert out.count("Synced") == 2
