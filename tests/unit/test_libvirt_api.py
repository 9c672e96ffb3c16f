"""The libvirt binding in use: what a binding without libvirt's newer
names (Nova's fake libvirt) is given in their place, which errors say
the connection is lost, which binding a caller's connection comes from,
and what leaves the adapter's edge."""

from __future__ import annotations

import sys
import types

import libvirt
import pytest

from vgpu_driver.exception import HostOperationFailed
from vgpu_driver.host import libvirt_api
from vgpu_driver.host.libvirt_api import LibvirtApi, host_edge

# what every binding names (Nova's fake libvirt included)
_REQUIRED = (
    "libvirtError",
    "VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV",
    "VIR_ERR_NO_NODE_DEVICE",
    "VIR_ERR_NO_DOMAIN",
    "VIR_ERR_NO_SUPPORT",
    "VIR_ERR_INVALID_ARG",
    "VIR_ERR_INTERNAL_ERROR",
    "VIR_DOMAIN_EVENT_ID_LIFECYCLE",
    "VIR_DOMAIN_EVENT_UNDEFINED",
    "VIR_DOMAIN_EVENT_DEFINED",
    "VIR_DOMAIN_EVENT_STARTED",
    "VIR_DOMAIN_EVENT_STOPPED",
)


def _error(code: int, domain: int) -> libvirt.libvirtError:
    exc = libvirt.libvirtError("refused")
    exc.err = (code, domain, "refused", 2, None, None, None, 0, 0)
    return exc


def test_a_binding_without_the_newer_names_gets_libvirts_values():
    """Each name a binding may lack is given libvirt's own value: the
    same answers as libvirt-python's (the flags a listing passes, the
    error codes a lost connection has, the event ids watched)."""
    bare = types.ModuleType("bare_libvirt")
    for name in _REQUIRED:
        setattr(bare, name, getattr(libvirt, name))
    real, fallback = LibvirtApi(libvirt), LibvirtApi(bare)
    for field in (
        "list_inactive_mdevs",
        "closed_connection",
        "transport_errors",
        "transport",
        "event_devices",
        "nodedev_lifecycle",
        "nodedev_update",
    ):
        assert getattr(fallback, field) == getattr(real, field), field
    # the one left out: listed by name without it
    assert fallback.list_parents is None
    # every domain, active or not: what 0 asks libvirt for
    assert fallback.list_all_domains == 0
    assert libvirt_api.DEVICE_ADDED == libvirt.VIR_DOMAIN_EVENT_ID_DEVICE_ADDED


@pytest.mark.parametrize(
    ("code", "domain", "lost"),
    [
        (libvirt.VIR_ERR_INVALID_CONN, libvirt.VIR_FROM_NONE, True),
        (libvirt.VIR_ERR_NO_CONNECT, libvirt.VIR_FROM_QEMU, True),
        (libvirt.VIR_ERR_SYSTEM_ERROR, libvirt.VIR_FROM_REMOTE, True),
        (libvirt.VIR_ERR_INTERNAL_ERROR, libvirt.VIR_FROM_RPC, True),
        (libvirt.VIR_ERR_RPC, libvirt.VIR_FROM_RPC, True),
        # the same errors from elsewhere: libvirtd answered
        (libvirt.VIR_ERR_SYSTEM_ERROR, libvirt.VIR_FROM_NODEDEV, False),
        (libvirt.VIR_ERR_INTERNAL_ERROR, libvirt.VIR_FROM_QEMU, False),
        (libvirt.VIR_ERR_NO_DOMAIN, libvirt.VIR_FROM_REMOTE, False),
    ],
)
def test_a_lost_connection_is_told_as_novas_host_tells_it(code, domain, lost):
    assert LibvirtApi(libvirt).connection_lost(_error(code, domain)) is lost


def test_the_binding_is_the_one_the_callers_connection_comes_from():
    fake = types.ModuleType("fake_libvirt_for_test")
    for name in _REQUIRED:
        setattr(fake, name, getattr(libvirt, name))
    connection = type("Connection", (), {"__module__": fake.__name__})()
    sys.modules[fake.__name__] = fake
    try:
        api = LibvirtApi.of(connection)
        assert isinstance(api, LibvirtApi) and api.module is fake
        # a module that is no binding: libvirt-python
        del fake.libvirtError
        assert LibvirtApi.of(connection).module is libvirt
    finally:
        del sys.modules[fake.__name__]
    assert LibvirtApi.of(object()).module is libvirt


class _Edge:
    def __init__(self, uri: str | None, api: LibvirtApi | None) -> None:
        self.uri, self.known_api = uri, api

    @host_edge
    def list_devices(self, exc: Exception) -> None:
        raise exc


def test_only_libvirts_errors_become_the_librarys_at_the_edge():
    api = LibvirtApi(libvirt)
    refused = _error(libvirt.VIR_ERR_NO_SUPPORT, libvirt.VIR_FROM_NODEDEV)
    with pytest.raises(HostOperationFailed) as raised:
        _Edge("qemu:///system", api).list_devices(refused)
    assert "qemu:///system could not list devices: refused" in str(
        raised.value
    )
    with pytest.raises(HostOperationFailed, match="the caller's connection"):
        _Edge(None, api).list_devices(refused)
    # not libvirt's, or no binding known yet: as it is
    with pytest.raises(KeyError):
        _Edge(None, api).list_devices(KeyError("x"))
    with pytest.raises(libvirt.libvirtError):
        _Edge(None, None).list_devices(refused)
