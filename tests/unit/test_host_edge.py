"""No ``libvirtError`` leaves the libvirt adapter: what libvirt refuses is
HostOperationFailed naming the operation, a lost connection is
HostUnreachable, and the first reading after it reads every guest."""

from __future__ import annotations

from typing import Any

import libvirt
import pytest

from tests import helpers
from vgpu_driver.exception import HostOperationFailed, HostUnreachable
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.sim import description as hostdesc

_error = helpers.libvirt_error


class FlakyConnection:
    """A real test-driver connection whose node-device listing fails
    once with ``fail``."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.fail: libvirt.libvirtError | None = None

    def listAllDevices(self, flags: int) -> Any:
        if self.fail is not None:
            exc, self.fail = self.fail, None
            raise exc
        return self._conn.listAllDevices(flags)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@pytest.fixture
def flaky(tmp_path):
    uri, sysfs = hostdesc.materialize(helpers.load("m10"), tmp_path)
    conn = FlakyConnection(libvirt.open(uri))
    host = LibvirtHost(uri, sysfs, connect=lambda: conn, api=libvirt)
    # every discovery lists the node devices (the call made to fail); the
    # guests are read whole only when something says so
    host.devices.relist_interval = 0
    return host, conn


def _lose(host: LibvirtHost, conn: FlakyConnection) -> None:
    """libvirtd goes away under the next node-device listing."""
    conn.fail = _error(
        libvirt.VIR_ERR_SYSTEM_ERROR,
        libvirt.VIR_FROM_RPC,
        "Cannot write data: Broken pipe",
    )
    with pytest.raises(HostUnreachable, match="Broken pipe"):
        host.discover()


def test_a_refusal_of_libvirt_is_our_error_naming_the_operation(flaky):
    host, conn = flaky
    conn.fail = _error(
        libvirt.VIR_ERR_OPERATION_FAILED,
        libvirt.VIR_FROM_NODEDEV,
        "cannot enumerate devices",
    )
    with pytest.raises(HostOperationFailed, match="discover") as caught:
        host.discover()
    assert "cannot enumerate devices" in str(caught.value)
    assert host.discover().parents  # the next operation works


def test_a_lost_connection_reads_every_guest_at_the_next_discovery(flaky):
    host, conn = flaky
    host.discover()
    host.calls.clear()
    host.discover()
    assert host.calls["listAllDomains"] == 0  # steady: guests known
    _lose(host, conn)
    host.calls.clear()
    assert host.discover().guests
    assert host.calls["listAllDomains"] == 1  # events may have been lost


def test_an_own_connection_that_cannot_open_is_tried_again_with_backoff(
    tmp_path, monkeypatch
):
    """libvirtd down: the adapter's own connection is tried again after
    1, 2, 4 ... seconds, at most MAX_RETRY_DELAY; in between, no attempt,
    the error says when the next one is; once libvirtd answers, the
    backoff starts over."""
    from vgpu_driver.host import connection as connection_module
    from vgpu_driver.host.libvirt_host import MAX_RETRY_DELAY

    uri, sysfs = hostdesc.materialize(helpers.load("m10"), tmp_path)
    now = [1000.0]
    monkeypatch.setattr(connection_module.time, "monotonic", lambda: now[0])
    down = [True]

    def opener(uri: str) -> Any:
        if down[0]:
            raise _error(
                libvirt.VIR_ERR_SYSTEM_ERROR,
                libvirt.VIR_FROM_RPC,
                "Failed to connect socket: No such file or directory",
            )
        return libvirt.open(uri)

    host = LibvirtHost(uri, sysfs, opener=opener)
    with pytest.raises(HostUnreachable, match="No such file"):
        host.discover()
    for delay in (1, 2, 4, 8, 16, 32, MAX_RETRY_DELAY, MAX_RETRY_DELAY):
        failed_at, tried = now[0], host.calls["open"]
        now[0] = failed_at + delay - 0.5
        with pytest.raises(HostUnreachable, match="next attempt in"):
            host.discover()  # too soon: not tried
        assert host.calls["open"] == tried
        now[0] = failed_at + delay
        with pytest.raises(HostUnreachable, match="No such file"):
            host.discover()
        assert host.calls["open"] == tried + 1
    down[0] = False
    now[0] += MAX_RETRY_DELAY
    assert host.discover().parents  # connected again
    host.link.lost("Broken pipe")
    down[0] = True
    with pytest.raises(HostUnreachable, match="No such file"):
        host.discover()
    tried = host.calls["open"]
    now[0] += 1  # the backoff starts over
    with pytest.raises(HostUnreachable, match="No such file"):
        host.discover()
    assert host.calls["open"] == tried + 1


def test_a_caller_s_connection_found_lost_is_never_closed_by_the_adapter(
    tmp_path,
):
    """The caller's connection (a compute service's own) is the caller's
    to close or open again: a call that finds it lost leaves it open."""
    uri, sysfs = hostdesc.materialize(helpers.load("m10"), tmp_path)
    conn = FlakyConnection(libvirt.open(uri))
    closed = []
    conn.close = lambda: closed.append(True)  # type: ignore[method-assign]
    host = LibvirtHost(uri, sysfs, connection=conn, api=libvirt)
    host.discover()
    host.devices.relist_interval = 0  # the next discovery lists
    _lose(host, conn)
    assert closed == []
    assert host.discover().guests  # the same connection, read again
    host.close()
    assert closed == []
