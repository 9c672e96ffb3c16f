"""The connection's own edges (``host/connection.py``) and the adapter's
(``host/libvirt_host.py``), each found unguarded by a sweep: what it
closes, what it asks once, the garbage collector it holds off, what it
logs when libvirtd answers again, which refusals of a per-device flag
are taken as "cannot tell", and guests asked for after a reading
without them."""

from __future__ import annotations

import gc
import logging
from typing import Any

import libvirt
import pytest

from tests import helpers
from vgpu_driver.exception import HostUnreachable
from vgpu_driver.host import connection as connection_module
from vgpu_driver.host.connection import Connection
from vgpu_driver.host.libvirt_api import libvirt_python
from vgpu_driver.sim import description as hostdesc

_error = helpers.libvirt_error


LOST = (libvirt.VIR_ERR_SYSTEM_ERROR, libvirt.VIR_FROM_RPC, "Broken pipe")


class Closing:
    """A real test-driver connection that says whether it was closed."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.closed = False

    def close(self) -> int:
        self.closed = True
        return int(self._conn.close())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class Opened:
    """Opens real test-driver connections and remembers each."""

    def __init__(self) -> None:
        self.conns: list[Closing] = []
        self.down = False

    def __call__(self, uri: str) -> Closing:
        if self.down:
            raise _error(*LOST[:2], "Failed to connect socket")
        self.conns.append(Closing(libvirt.open(uri)))
        return self.conns[-1]


@pytest.fixture
def uri(tmp_path):
    return hostdesc.materialize(helpers.load("m10"), tmp_path)[0]


def own(uri: str, opened: Opened) -> Connection:
    return Connection(
        uri, opener=opened, connection=None, connect=None, api=None
    )


def test_closing_closes_the_connection_it_opened(uri):
    opened = Opened()
    link = own(uri, opened)
    link.get()
    link.close()
    assert opened.conns[0].closed
    link.close()  # closed once
    link.get()  # opened again when next needed
    assert len(opened.conns) == 2 and not opened.conns[1].closed


def test_the_library_version_is_asked_once_a_connection(uri):
    """Once per connection: asked again after the connection was lost
    (the libvirtd that answers may have been upgraded meanwhile)."""
    link = own(uri, Opened())
    assert link.library_version() == link.library_version() > 0
    assert link.calls["getLibVersion"] == 1
    link.lost("Broken pipe")
    link.library_version()
    assert link.calls["getLibVersion"] == 2


def test_a_flag_the_driver_cannot_tell_is_never_asked_again(uri):
    link = own(uri, Opened())
    asked = []

    def unsupported() -> int:
        asked.append(True)
        raise _error(
            libvirt.VIR_ERR_NO_SUPPORT, libvirt.VIR_FROM_NODEDEV, "no"
        )

    cannot: set[str] = set()
    assert link.flag("isPersistent", unsupported, cannot) is None
    assert link.flag("isPersistent", unsupported, cannot) is None
    assert len(asked) == 1 and cannot == {"isPersistent"}


def test_a_flag_refused_for_another_reason_is_an_error_asked_again(uri):
    """A device gone (or any refusal but "not supported") is not taken
    as the driver's "cannot tell": it raises, and the flag is asked
    again the next time."""
    link = own(uri, Opened())
    asked = []

    def gone() -> int:
        asked.append(True)
        raise _error(
            libvirt.VIR_ERR_NO_NODE_DEVICE, libvirt.VIR_FROM_NODEDEV, "gone"
        )

    cannot: set[str] = set()
    for _ in range(2):
        with pytest.raises(libvirt.libvirtError, match="gone"):
            link.flag("isActive", gone, cannot)
    assert len(asked) == 2 and cannot == set()


@pytest.mark.parametrize("collecting", [True, False])
def test_a_call_leaves_the_collector_as_it_found_it(uri, collecting):
    """The collector is held off during a call (see ``Connection.call``)
    and found again as it was after it: on after an answer, a refusal
    and a lost connection, and still off for a caller that turned it
    off itself."""
    link = own(uri, Opened())
    conn = link.get()
    seen = []

    def refused() -> None:
        seen.append(gc.isenabled())
        raise _error(libvirt.VIR_ERR_NO_DOMAIN, libvirt.VIR_FROM_DOMAIN, "no")

    def lost() -> None:
        raise _error(*LOST)

    was = gc.isenabled()
    (gc.enable if collecting else gc.disable)()
    try:
        assert link.call("getLibVersion", conn.getLibVersion) > 0
        after = [gc.isenabled()]
        with pytest.raises(libvirt.libvirtError):
            link.call("lookupByName", refused)
        after.append(gc.isenabled())
        with pytest.raises(HostUnreachable, match="Broken pipe"):
            link.call("listAllDevices", lost)
        after.append(gc.isenabled())
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False]  # held off during the call
    assert after == [collecting] * 3


def test_connected_again_is_said_once_libvirtd_answers_after_failing(
    uri, monkeypatch, caplog
):
    now = [100.0]
    monkeypatch.setattr(connection_module.time, "monotonic", lambda: now[0])
    opened = Opened()
    link = own(uri, opened)
    caplog.set_level(logging.INFO, logger=connection_module.__name__)
    link.get()
    assert "again" not in caplog.text  # a first connection: nothing to say
    link.lost("Broken pipe")
    caplog.clear()
    opened.down = True
    with pytest.raises(HostUnreachable):
        link.get()
    opened.down = False
    now[0] += 1
    link.get()
    said = [
        r.getMessage() for r in caplog.records if r.levelno == logging.INFO
    ]
    assert said == [f"Connected to libvirt at {uri} again"]


def test_a_caller_s_connection_lost_is_named_as_the_caller_s(uri):
    """A connection handed in without a URI is named as the caller's in
    the error the operator reads."""
    conn = libvirt.open(uri)
    link = Connection(
        "", opener=None, connection=conn, connect=None, api=libvirt_python()
    )
    error = link.lost("Broken pipe")
    assert "the caller's connection" in str(error)
    named = own(uri, Opened()).lost("Broken pipe")
    assert uri in str(named) and "the caller's" not in str(named)
    conn.close()


def test_the_loss_is_logged_with_the_connection_named(uri, caplog):
    conn = libvirt.open(uri)
    link = Connection(
        "", opener=None, connection=conn, connect=None, api=libvirt_python()
    )
    caplog.set_level(logging.WARNING, logger=connection_module.__name__)
    link.lost("Broken pipe")
    own(uri, Opened()).lost("Broken pipe")
    said = [r.getMessage() for r in caplog.records]
    assert said[0].startswith(
        "Lost the connection to libvirt at the caller's connection"
    )
    assert said[1].startswith(f"Lost the connection to libvirt at {uri} ")
    conn.close()


def test_a_connection_tried_too_soon_says_when_the_next_attempt_is(
    uri, monkeypatch
):
    now = [100.0]
    monkeypatch.setattr(connection_module.time, "monotonic", lambda: now[0])
    opened = Opened()
    opened.down = True
    link = own(uri, opened)
    for _ in range(3):  # backoff 1, 2, then 4 s
        with pytest.raises(HostUnreachable, match="Failed to connect"):
            link.get()
        now[0] += 60
    now[0] -= 60 - 1.2
    with pytest.raises(HostUnreachable, match=r"next attempt in 3s"):
        link.get()


def test_the_adapter_says_the_library_version_of_its_connection(uri):
    from vgpu_driver.host.libvirt_host import LibvirtHost

    host = LibvirtHost(uri, "/nonexistent-sysfs")
    assert host.library_version() == libvirt.open(uri).getLibVersion()
    host.close()


def test_guests_asked_for_after_a_reading_without_them_are_read(tmp_path):
    """A discovery that wants guests after one that did not (nothing
    else changed) reads them: never the last reading handed back with
    its guests unknown."""
    from vgpu_driver.host.libvirt_host import LibvirtHost

    uri, sysfs = hostdesc.materialize(helpers.load("m10"), tmp_path)
    host = LibvirtHost(uri, sysfs)
    first = host.discover(guests=False)
    assert not first.guests_known
    assert host.discover(guests=False) is first  # nothing changed
    now = host.discover()
    assert now.guests_known and now.guests
    assert host.discover() is now
    host.close()
