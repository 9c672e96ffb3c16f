"""Discovery through a real libvirtd: the same test-driver hosts, served by
this machine's daemon over its UNIX socket (libvirt's remote protocol,
as on a compute host), read as they are read in process: the same
inventory, with the same calls, first and steady; an mdev libvirt does
not have reads as gone over the wire too; another manager's mdev is
followed through it; and domain lifecycle events and node-device
events reach the library through the daemon.

Needs Debian's ``libvirt-daemon`` (``./run test`` installs it); skipped
where it is not installed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from benchmarks.common import libvirt_daemon
from tests import helpers
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.model.device import Mdev
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim.mdev_devices import mdev_xml
from vgpu_driver.sim.mdev_libvirt import MdevConnection

LIBVIRTD = shutil.which("libvirtd") or "/usr/sbin/libvirtd"


@pytest.fixture(scope="module")
def daemon() -> Iterator[tuple[Path, Callable[[str], str]]]:
    if not os.access(LIBVIRTD, os.X_OK):
        pytest.skip("libvirtd is not installed (Debian's libvirt-daemon)")
    # below /tmp, not pytest's private base: the daemon (run as nobody
    # when the tests run as root) must reach the hosts' files
    directory = Path(tempfile.mkdtemp(prefix="vgpu-libvirtd-"))
    try:
        with libvirt_daemon(directory) as remote:
            yield directory, remote
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _hosts(
    name: str, directory: Path, remote: Callable[[str], str]
) -> tuple[LibvirtHost, LibvirtHost]:
    """The host ``name`` read in process and through the daemon."""
    where = directory / "hosts" / Path(name).stem
    uri, sysfs = hostdesc.materialize(helpers.load(name), where)
    for path in (where, *where.rglob("*")):
        if path.is_dir():
            path.chmod(0o755)
    return LibvirtHost(uri, sysfs), LibvirtHost(remote(uri), sysfs)


@pytest.mark.parametrize("name", helpers.ALL_HOSTS)
def test_the_daemon_serves_what_the_library_reads_in_process(daemon, name):
    local, served = _hosts(name, *daemon)
    try:
        first = served.discover()
        assert first == local.discover()
        # something was read (a host of GPUs the library does not drive
        # has only those, for discover and doctor)
        assert first.parents or first.pfs or helpers.load(name).other_gpus
        assert served.calls == local.calls  # the same calls, no more
        local.calls.clear()
        served.calls.clear()
        assert served.discover() == local.discover()
        assert served.calls == local.calls
    finally:
        local.close()
        served.close()


def test_an_unknown_mdev_reads_as_gone_over_the_wire(daemon):
    local, served = _hosts("m10", *daemon)
    try:
        mdev = served.discover().mdevs[0]
        assert served.mdev_exists(mdev)
        gone = Mdev(
            uuid="00000000-0000-4000-8000-000000000000",
            type_id=mdev.type_id,
            parent=mdev.parent,
            name="mdev_00000000_0000_4000_8000_000000000000_0000_84_00_0",
        )
        assert not served.mdev_exists(gone)
        assert not local.mdev_exists(gone)
    finally:
        local.close()
        served.close()


def test_domain_events_reach_the_library_through_the_daemon(daemon):
    with helpers.libvirt_event_loop():
        local, served = _hosts("m10", *daemon)
        try:
            helpers.check_domain_events_keep_guests_current(served)
        finally:
            local.close()
            served.close()


def test_another_managers_mdev_is_followed_through_the_daemon(daemon):
    """An mdev another manager makes on a pGPU, then removes (libvirt's
    mdev calls modelled over the daemon's connection, the rest served
    by it): the adapter follows that parent alone, with no listing of
    every device, and reads what a new adapter reading the whole host
    reads."""
    directory, remote = daemon
    local, served = _hosts("m10", directory, remote)
    local.close()
    served.close()
    sysfs = served.sysfs.root
    conn = MdevConnection(served.uri, helpers.load("m10"), sysfs=sysfs, log=[])
    host = LibvirtHost(sysfs_root=sysfs, connection=conn)
    try:
        before = host.discover(rescan_guests=True)
        parent = next(p for p in before.parents if p.types[0].available)
        listings = len(conn.calls("listAllDevices"))
        theirs = conn.nodeDeviceCreateXML(
            mdev_xml(
                parent.name,
                parent.types[0].id,
                "5f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b",
            ),
            0,
        )
        made = host.discover()
        assert made.device_changes == (before.generation, {parent.name})
        assert len(made.mdevs) == len(before.mdevs) + 1
        afresh = LibvirtHost(sysfs_root=sysfs, connection=conn)
        assert made == afresh.discover(rescan_guests=True)
        listings = len(conn.calls("listAllDevices"))  # the new adapter's
        conn.gone.add(theirs.name())
        gone = host.discover()
        assert gone.device_changes == (made.generation, {parent.name})
        assert gone == before
        assert len(conn.calls("listAllDevices")) == listings  # none more
    finally:
        conn.close()


def test_node_device_events_reach_the_library_through_the_daemon(daemon):
    """What watching node-device events rests on, over the wire: the
    daemon sends the callbacks the library registers a device's creation
    and deletion (a vHBA, the one device the test driver makes), and a
    host watching them reads no parent's XML at a steady reading."""
    directory, remote = daemon
    with helpers.libvirt_event_loop():
        host = LibvirtHost(remote("test:///default"))
        local, served = _hosts("m10", directory, remote)
        try:
            host.watch_node_device_events()
            host.discover()
            conn = host.connection()
            vhba = conn.nodeDeviceCreateXML(VHBA, 0)
            name = vhba.name()
            assert _noted(host, conn) == {name}
            vhba.destroy()
            assert _noted(host, conn) == {name}
            served.watch_node_device_events()
            served.discover()  # the callbacks registered, all read
            served.calls.clear()
            served.discover()
            assert served.calls["XMLDesc"] == 0
            assert local.discover() == served.discover()
        finally:
            host.close()
            local.close()
            served.close()


# a vHBA on test:///default's fibre-channel host (libvirt's test driver
# makes this one kind of node device)
VHBA = (
    "<device><parent>scsi_host1</parent><capability type='scsi_host'>"
    "<capability type='fc_host'><wwnn>2000000012345678</wwnn>"
    "<wwpn>1000000012345678</wwpn></capability></capability></device>"
)


def _noted(host: LibvirtHost, conn: object) -> set[str]:
    """The devices the events named, waited for (10 s at most)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        names = host.devices.events.take(conn)
        if names:
            return names
        time.sleep(0.02)
    return set()
