"""The libvirt binding in use, and the edge where libvirt's errors become
the library's own.

Every libvirt error that leaves :class:`~vgpu_driver.host.libvirt_host.
LibvirtHost` is one of the library's: a lost connection (libvirtd
restarted or stopped: the remote or RPC layer fails) is
:class:`~vgpu_driver.exception.HostUnreachable`, anything else libvirt
refuses is :class:`~vgpu_driver.exception.HostOperationFailed`. Callers
never see ``libvirtError``.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, Concatenate, ParamSpec, TypeVar

from vgpu_driver.exception import HostOperationFailed, VgpuDriverError

P = ParamSpec("P")
T = TypeVar("T")


# libvirt's VIR_DOMAIN_EVENT_ID_DEVICE_ADDED (since 1.2.20), for a binding
# that does not name it (Nova's fake libvirt of its functional tests)
DEVICE_ADDED = 19


class LibvirtApi:
    """The libvirt binding in use: libvirt-python, or the module a caller
    already uses (a compute service's own, or its test double). Only the
    constants and the error class are taken from it."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.error: type[Exception] = module.libvirtError
        mdev = module.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV
        mdev_types = getattr(
            module, "VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES", None
        )
        # None: a binding without that flag, so devices are listed by name
        self.list_parents: int | None = mdev_types
        self.list_mdevs: int = mdev
        self.list_parents_and_mdevs = (
            None if mdev_types is None else mdev_types | mdev
        )
        self.list_inactive_mdevs = mdev | getattr(
            module, "VIR_CONNECT_LIST_NODE_DEVICES_INACTIVE", 1 << 30
        )
        # every domain (what 0 means to libvirt; some doubles need both)
        self.list_all_domains = getattr(
            module, "VIR_CONNECT_LIST_DOMAINS_ACTIVE", 0
        ) | getattr(module, "VIR_CONNECT_LIST_DOMAINS_INACTIVE", 0)
        self.no_node_device = module.VIR_ERR_NO_NODE_DEVICE
        self.no_domain = module.VIR_ERR_NO_DOMAIN
        self.unsupported = (
            module.VIR_ERR_NO_SUPPORT,
            module.VIR_ERR_INVALID_ARG,
        )
        # Drivers that cannot create mdevs (the test driver) fail inside.
        self.create_unsupported = (
            *self.unsupported,
            module.VIR_ERR_INTERNAL_ERROR,
        )
        self.remove_via_sysfs = (*self.unsupported, self.no_node_device)
        self.closed_connection = (
            getattr(module, "VIR_ERR_INVALID_CONN", 6),
            getattr(module, "VIR_ERR_NO_CONNECT", 5),
        )
        self.transport_errors = (
            getattr(module, "VIR_ERR_SYSTEM_ERROR", 38),
            module.VIR_ERR_INTERNAL_ERROR,
            getattr(module, "VIR_ERR_RPC", 39),
        )
        self.transport = (
            getattr(module, "VIR_FROM_REMOTE", 13),
            getattr(module, "VIR_FROM_RPC", 7),
        )
        self.event_lifecycle = module.VIR_DOMAIN_EVENT_ID_LIFECYCLE
        self.event_undefined = module.VIR_DOMAIN_EVENT_UNDEFINED
        # a transient guest (``virsh create``) is never defined: it says
        # STARTED and STOPPED alone; either makes its domain read again
        self.event_reread = (
            module.VIR_DOMAIN_EVENT_DEFINED,
            module.VIR_DOMAIN_EVENT_STARTED,
            module.VIR_DOMAIN_EVENT_STOPPED,
        )
        # a device plugged into or unplugged from a running guest (``virsh
        # attach-device --live``) sends no lifecycle event: these do
        self.event_devices = (
            getattr(module, "VIR_DOMAIN_EVENT_ID_DEVICE_ADDED", DEVICE_ADDED),
            getattr(module, "VIR_DOMAIN_EVENT_ID_DEVICE_REMOVED", 15),
        )
        # a node device created, deleted, defined or undefined; updated
        self.nodedev_lifecycle = getattr(
            module, "VIR_NODE_DEVICE_EVENT_ID_LIFECYCLE", 0
        )
        self.nodedev_update = getattr(
            module, "VIR_NODE_DEVICE_EVENT_ID_UPDATE", 1
        )

    def connection_lost(self, exc: Exception) -> bool:
        """Does ``exc`` say the connection to libvirtd is gone (as Nova's
        ``Host`` tells it: a system or internal error of the remote or
        RPC layer, or a connection libvirt already closed)?"""
        code = self.code(exc)
        domain = getattr(exc, "get_error_domain", lambda: None)()
        if code in self.closed_connection:
            return True
        return code in self.transport_errors and domain in self.transport

    def code(self, exc: Exception) -> int | None:
        return exc.get_error_code()  # type: ignore[attr-defined, no-any-return]

    def message(self, exc: Exception) -> str:
        return str(exc.get_error_message())  # type: ignore[attr-defined]

    @classmethod
    def of(cls, connection: Any) -> LibvirtApi:
        """The binding a caller's connection comes from (already
        imported by the caller: nothing is imported here)."""
        module = sys.modules.get(type(connection).__module__)
        if module is not None and hasattr(module, "libvirtError"):
            return cls(module)
        return libvirt_python()


_DEFAULT: LibvirtApi | None = None


def _quiet_errors(_ctx: object, _err: object) -> None:
    """libvirt prints every error to stderr by default; we log instead."""


def libvirt_python() -> LibvirtApi:
    """libvirt-python, imported on first use (only when this library
    opens its own connection or the caller's binding is unknown)."""
    global _DEFAULT
    if _DEFAULT is None:
        module = importlib.import_module("libvirt")
        module.registerErrorHandler(_quiet_errors, None)
        _DEFAULT = LibvirtApi(module)
    return _DEFAULT


def host_edge(
    method: Callable[Concatenate[Any, P], T],
) -> Callable[Concatenate[Any, P], T]:
    """A public method of the adapter: a libvirt error that its own code
    did not turn into one of the library's leaves as
    HostOperationFailed, naming the operation and libvirt's reason."""

    def wrapper(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(self, *args, **kwargs)
        except VgpuDriverError:
            raise
        except Exception as exc:
            api: LibvirtApi | None = self.known_api
            if api is None or not isinstance(exc, api.error):
                raise
            raise HostOperationFailed(
                uri=self.uri or "the caller's connection",
                action=method.__name__.replace("_", " "),
                reason=api.message(exc),
            ) from exc

    functools.update_wrapper(wrapper, method)
    return wrapper
