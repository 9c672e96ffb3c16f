"""The part of the Nova driver every other part builds on: the library's
adapter, made once Nova's host connection exists; Nova's lifecycle and
device-removed callbacks, which also tell the library of guests defined,
undefined or unplugged from by anyone, and a device-added callback of
ours on each of Nova's connections (hot-plug); and which instance the
operation in progress binds for."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from importlib import metadata
from typing import Any

from nova.virt.libvirt import driver as nova_driver
from nova.virt.libvirt import host as nova_host
from oslo_log import log as logging

from vgpu_driver.host.libvirt_host import DEVICE_ADDED
from vgpu_driver.nova import check_nova_version
from vgpu_driver.nova.adapter import NovaAdapter

# before anything overrides Nova's private methods
check_nova_version(metadata.version("nova"))

LOG = logging.getLogger(__name__)
CONF = nova_driver.CONF

# The instance whose devices are being bound by the operation in progress
# (spawn, hard reboot, resize): Nova's _allocate_mdevs does not say.
BINDING: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "vgpu_driver_binding", default=None
)
# Instances whose devices must survive the guest's undefine (hard reboot).
KEEPING: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "vgpu_driver_keeping", default=frozenset()
)


@contextlib.contextmanager
def binding(instance_uuid: str) -> Iterator[None]:
    token = BINDING.set(instance_uuid)
    try:
        yield
    finally:
        BINDING.reset(token)


@contextlib.contextmanager
def keeping(instance_uuid: str) -> Iterator[None]:
    token = KEEPING.set(KEEPING.get() | {instance_uuid})
    try:
        yield
    finally:
        KEEPING.reset(token)


class VgpuBase(nova_driver.LibvirtDriver):
    _vgpu_adapter: NovaAdapter | None = None
    # where the kernel's sysfs is (a test points it at a tree of its own)
    vgpu_sysfs_root = "/sys"

    def __init__(self, virtapi: Any, read_only: bool = False) -> None:
        super().__init__(virtapi, read_only)
        # Nova's Host registers this attribute as its lifecycle callback
        # on every connection it makes: ours also tells the library of
        # guests defined, started, stopped or undefined by anyone (an
        # operator's virsh define or create included), then hands the
        # event to Nova's.
        self._host._event_lifecycle_callback = self._vgpu_lifecycle_event
        # A device plugged into a running guest (virsh attach-device
        # --live) sends DEVICE_ADDED alone, which Nova does not register:
        # ours is, on each connection Nova makes; DEVICE_REMOVED is Nova's,
        # wrapped as the lifecycle callback is.
        self._host._event_device_removed_callback = self._vgpu_device_removed
        self._nova_new_connection = self._host._get_new_connection
        self._host._get_new_connection = self._vgpu_new_connection

    def _vgpu_lifecycle_event(
        self, conn: Any, dom: Any, event: int, detail: int, opaque: Any
    ) -> None:
        # libvirt's native event thread: no logging, no locks, no calls
        # but the domain's uuid (see Nova's Host._event_lifecycle_callback)
        libvirt = nova_host.libvirt
        adapter = self._vgpu_adapter  # none yet: its first scan reads all
        if adapter is not None and event in (
            libvirt.VIR_DOMAIN_EVENT_DEFINED,
            # a transient guest (virsh create) sends these two alone
            libvirt.VIR_DOMAIN_EVENT_STARTED,
            libvirt.VIR_DOMAIN_EVENT_STOPPED,
            libvirt.VIR_DOMAIN_EVENT_UNDEFINED,
        ):
            adapter.domain_event(
                dom.UUIDString(), event != libvirt.VIR_DOMAIN_EVENT_UNDEFINED
            )
        nova_host.Host._event_lifecycle_callback(
            conn, dom, event, detail, opaque
        )

    def _vgpu_device_event(
        self, conn: Any, dom: Any, dev: str, opaque: Any
    ) -> None:
        # libvirt's native event thread, as above
        adapter = self._vgpu_adapter
        if adapter is not None:
            adapter.domain_event(dom.UUIDString(), True)

    def _vgpu_device_removed(
        self, conn: Any, dom: Any, dev: str, opaque: Any
    ) -> None:
        self._vgpu_device_event(conn, dom, dev, opaque)
        nova_host.Host._event_device_removed_callback(conn, dom, dev, opaque)

    def _vgpu_new_connection(self) -> Any:
        # called by Nova's Host with its connection lock held
        conn = self._nova_new_connection()
        try:
            conn.domainEventRegisterAny(
                None,
                getattr(
                    nova_host.libvirt,
                    "VIR_DOMAIN_EVENT_ID_DEVICE_ADDED",
                    DEVICE_ADDED,
                ),
                self._vgpu_device_event,
                None,
            )
        except Exception as exc:  # as Nova treats its own registrations
            LOG.warning(
                "libvirt connection gives no device-added events (%s): a "
                "device hot-plugged into a guest by hand is seen at the "
                "next full reading of the guests",
                exc,
            )
        return conn

    def cleanup_host(self, host: str) -> None:
        """Nova's graceful stop: the library's records written as
        snapshots first (see :meth:`~vgpu_driver.driver.VgpuDriver.
        cleanup_host`), then Nova's own cleanup, whatever happened."""
        adapter = self._vgpu_adapter
        try:
            if adapter is not None:
                adapter.cleanup_host()
        except Exception:  # the stop goes on: the journals are read later
            LOG.exception("vGPU records not compacted at stop")
        finally:
            super().cleanup_host(host)

    # -- the adapter, made once Nova's host connection exists ----------

    @property
    def _vgpu(self) -> NovaAdapter:
        if self._vgpu_adapter is None:
            self._vgpu_adapter = NovaAdapter(
                CONF,
                self._host.get_hostname(),
                # looked up at each call: Nova may replace its connection
                lambda: self._host.get_connection(),
                api=nova_host.libvirt,
                creator=self._vgpu_create_mdev,
                sysfs_root=self.vgpu_sysfs_root,
            )
        return self._vgpu_adapter

    def _vgpu_create_mdev(self, parent: str, type_id: str, uuid: str) -> None:
        """Create through Nova's own path (its privileged helpers on a
        real host), after checking Nova reads the configuration as the
        library does."""
        nova_type = self._get_vgpu_type_per_pgpu(parent)
        if nova_type is not None and nova_type != type_id:
            LOG.warning(
                "Nova's configuration gives %s type %s, the library %s; "
                "creating %s",
                parent,
                nova_type,
                type_id,
                type_id,
            )
        self._create_mdev(parent, type_id, uuid=uuid)

    # Nova sets this in __init__ and its tests reassign it after changing
    # [devices]: the library re-reads its configuration then.
    @property
    def supported_vgpu_types(self) -> list[str]:
        return list(self.__dict__.get("_nova_vgpu_types", []))

    @supported_vgpu_types.setter
    def supported_vgpu_types(self, value: list[str]) -> None:
        self.__dict__["_nova_vgpu_types"] = list(value)
        if self._vgpu_adapter is not None:
            self._vgpu_adapter.reload_config()
