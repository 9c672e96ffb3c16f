"""Nova's libvirt driver with this library doing the vGPU work.

``LibvirtDriver`` here is Nova's own, with its vGPU methods delegated to
:class:`~vgpu_driver.nova.adapter.NovaAdapter`. Everything else (guests,
disks, networks, migrations) stays Nova's. How it changes Nova's
behaviour:

* the provider tree is written by the library (one child provider per
  parent; ``max_instances`` caps a type's total instead of deleting a
  provider; a provider whose parent has no enabled type is removed);
* ``_allocate_mdevs`` binds for the instance being built (taken from the
  operation in progress, never guessed), keeps the claim on disk until
  the guest is defined, and undoes what it made if it fails;
* which mdev a guest uses, and of which type, is answered from the
  library's view: no ``listAllDomains`` + per-guest XML per question;
* a hard reboot holds the guest's devices while the guest is undefined,
  and recreates any that went away;
* a guest defined or undefined behind Nova's back (``virsh define``) is
  seen through Nova's own lifecycle callback: its devices are not handed
  out again;
* NVIDIA SR-IOV vGPUs: a VF with its vGPU type set is given to the guest
  as a PCI host device (``managed='no'``), detached for suspend like an
  mdev; live migration of such an instance is refused at the source;
* live-migration reservations are claims on disk: they survive a restart
  of nova-compute until the migration succeeds or is rolled back.

Nova calls are wrapped at their entry points; Nova's own code is not
changed. Nova loads compute drivers from ``nova.virt``: see
:mod:`vgpu_driver.nova` for how this one is enabled.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from nova import context as nova_context
from nova import exception as nova_exception
from nova import objects
from nova.virt.libvirt import config as vconfig
from nova.virt.libvirt import driver as nova_driver
from nova.virt.libvirt import host as nova_host
from oslo_log import log as logging

from vgpu_driver.model import naming
from vgpu_driver.nova.adapter import NovaAdapter, is_mdev

LOG = logging.getLogger(__name__)
CONF = nova_driver.CONF

# The instance whose devices are being bound by the operation in progress
# (spawn, hard reboot, resize): Nova's _allocate_mdevs does not say.
_BINDING: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "vgpu_driver_binding", default=None
)
# Instances whose devices must survive the guest's undefine (hard reboot).
_KEEPING: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "vgpu_driver_keeping", default=frozenset()
)


@contextlib.contextmanager
def _binding(instance_uuid: str) -> Iterator[None]:
    token = _BINDING.set(instance_uuid)
    try:
        yield
    finally:
        _BINDING.reset(token)


@contextlib.contextmanager
def _keeping(instance_uuid: str) -> Iterator[None]:
    token = _KEEPING.set(_KEEPING.get() | {instance_uuid})
    try:
        yield
    finally:
        _KEEPING.reset(token)


def _vf_hostdev(address: str) -> Any:
    hostdev = vconfig.LibvirtConfigGuestHostdevPCI()
    (
        hostdev.domain,
        hostdev.bus,
        hostdev.slot,
        hostdev.function,
    ) = naming.split_pci_address(address)
    hostdev.managed = "no"
    return hostdev


def _address(hostdev: Any) -> str:
    """A PCI host device's address as the library spells it."""
    return (
        f"{int(hostdev.domain, 16):04x}:{int(hostdev.bus, 16):02x}:"
        f"{int(hostdev.slot, 16):02x}.{int(hostdev.function, 16):x}"
    )


class LibvirtDriver(nova_driver.LibvirtDriver):
    """``compute_driver = vgpu_libvirt.LibvirtDriver``."""

    _vgpu_adapter: NovaAdapter | None = None
    # where the kernel's sysfs is (a test points it at a tree of its own)
    vgpu_sysfs_root = "/sys"

    def __init__(self, virtapi: Any, read_only: bool = False) -> None:
        super().__init__(virtapi, read_only)
        # Nova's Host registers this attribute as its lifecycle callback
        # on every connection it makes: ours also tells the library of
        # guests defined or undefined by anyone (an operator's virsh
        # define included), then hands the event to Nova's.
        self._host._event_lifecycle_callback = self._vgpu_lifecycle_event

    def _vgpu_lifecycle_event(
        self, conn: Any, dom: Any, event: int, detail: int, opaque: Any
    ) -> None:
        # libvirt's native event thread: no logging, no locks, no calls
        # but the domain's uuid (see Nova's Host._event_lifecycle_callback)
        libvirt = nova_host.libvirt
        adapter = self._vgpu_adapter  # none yet: its first scan reads all
        if adapter is not None and event in (
            libvirt.VIR_DOMAIN_EVENT_DEFINED,
            libvirt.VIR_DOMAIN_EVENT_UNDEFINED,
        ):
            adapter.domain_event(
                dom.UUIDString(), event == libvirt.VIR_DOMAIN_EVENT_DEFINED
            )
        nova_host.Host._event_lifecycle_callback(
            conn, dom, event, detail, opaque
        )

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

    def _start_inactive_mediated_devices(self) -> None:
        """Called by Nova's init_host: the library's start-up instead
        (rebuild who uses what, recreate mdevs guests need that are gone,
        start defined-only ones, re-apply VF types, and drop the claims
        of binds made for instances this host no longer has, e.g. deleted
        while nova-compute was down)."""
        self._vgpu.init_host(self._vgpu_instances())

    def _vgpu_instances(self) -> list[str] | None:
        """The instances Nova has on this host; None (no claim dropped)
        when Nova's database cannot be asked."""
        try:
            return list(
                objects.InstanceList.get_uuids_by_host(
                    nova_context.get_admin_context(), CONF.host
                )
            )
        except Exception as exc:  # a start-up must go on
            LOG.warning(
                "Cannot list this host's instances (%s); claims of "
                "instances deleted while nova-compute was down stay until "
                "'vgpu-driver --nova-node NODE audit --fix'",
                exc,
            )
            return None

    # -- the provider tree ---------------------------------------------

    def _update_provider_tree_for_vgpu(
        self,
        provider_tree: Any,
        nodename: str,
        allocations: Mapping[str, Any] | None = None,
    ) -> None:
        self._vgpu.update_provider_tree(provider_tree, nodename, allocations)

    def _get_gpu_inventories(self) -> dict[str, dict[str, int | float]]:
        return self._vgpu.gpu_inventories()

    # -- binding -------------------------------------------------------

    def _allocate_mdevs(self, allocations: Mapping[str, Any]) -> list[str]:
        instance_uuid = _BINDING.get()
        if instance_uuid is None:
            raise RuntimeError(
                "vgpu_driver: _allocate_mdevs called outside spawn, hard "
                "reboot or resize, so the instance is unknown; report "
                "this as a bug of the Nova integration"
            )
        return self._vgpu.allocate(instance_uuid, allocations)

    def _get_existing_mdevs_not_assigned(
        self, parent: str | None, requested_types: Iterable[str] | None = None
    ) -> set[str]:
        return self._vgpu.free_mdevs(parent, requested_types)

    def _create_new_mediated_device(
        self, parent: str | None, uuid: str | None = None
    ) -> str | None:
        return self._vgpu.driver.create_free_mdev(parent, uuid)

    def _get_all_assigned_mediated_devices(
        self, instance: Any = None
    ) -> dict[str, str]:
        return self._vgpu.assigned(instance.uuid if instance else None)

    def _get_mdev_types_from_uuids(
        self, mdev_uuids: Iterable[str]
    ) -> dict[str, str]:
        return self._vgpu.mdev_types(mdev_uuids)

    # -- NVIDIA SR-IOV vGPUs: a VF, given as a PCI host device --------

    def _guest_add_mdevs(self, guest: Any, chosen_mdevs: list[str]) -> None:
        """Nova's guest config gets an ``<hostdev type='mdev'>`` per mdev;
        a VF of an SR-IOV vGPU card (named by its PCI address) gets an
        ``<hostdev type='pci' managed='no'>``: the VF stays bound to
        NVIDIA's driver, whose vGPU type the library has set."""
        mdevs = [d for d in chosen_mdevs if is_mdev(d)]
        super()._guest_add_mdevs(guest, mdevs)
        for address in chosen_mdevs:
            if not is_mdev(address):
                guest.add_device(_vf_hostdev(address))

    def _get_mdevs_from_guest_config(self, xml: str) -> list[Any]:
        """At resume, what suspend detached: the mdevs (as Nova's own
        does), and the VFs; the XML parsed once."""
        config = vconfig.LibvirtConfigGuest()
        config.parse_str(xml)
        vfs = self._vgpu.vf_devices()
        return [
            device
            for device in config.devices
            if isinstance(device, vconfig.LibvirtConfigGuestHostdevMDEV)
            or (
                isinstance(device, vconfig.LibvirtConfigGuestHostdevPCI)
                and _address(device) in vfs
            )
        ]

    def _detach_mediated_devices(self, guest: Any) -> None:
        """Before suspend: libvirt cannot save a guest with an assigned
        VF any more than with an mdev, so the VFs go too."""
        super()._detach_mediated_devices(guest)
        vfs = self._vgpu.vf_devices()
        for device in guest.get_all_devices(
            devtype=vconfig.LibvirtConfigGuestHostdevPCI
        ):
            if _address(device) not in vfs:
                continue  # a PCI device of Nova's own
            try:
                guest.detach_device(device, live=True)
            except nova_host.libvirt.libvirtError as exc:
                raise nova_exception.InstanceFaultRollback(
                    nova_exception.InstanceSuspendFailure(
                        reason=f"detaching vGPU VF {_address(device)}: {exc}"
                    )
                ) from exc

    def check_can_live_migrate_source(
        self,
        context: Any,
        instance: Any,
        dest_check_data: Any,
        *a: Any,
        **kw: Any,
    ) -> Any:
        """An SR-IOV vGPU VF is not live-migrated: refused here, before
        anything is reserved on the destination."""
        vfs = self._vgpu.vfs_of(instance.uuid)
        if vfs:
            raise nova_exception.MigrationPreCheckError(
                reason=f"instance {instance.uuid} has the SR-IOV vGPU "
                f"VF(s) {', '.join(vfs)}; live migration of those is not "
                "supported (cold migration and resize are)"
            )
        return super().check_can_live_migrate_source(
            context, instance, dest_check_data, *a, **kw
        )

    def spawn(self, context: Any, instance: Any, *args: Any, **kw: Any) -> Any:
        with _binding(instance.uuid):
            return super().spawn(context, instance, *args, **kw)

    def finish_migration(
        self, context: Any, migration: Any, instance: Any, *a: Any, **kw: Any
    ) -> Any:
        with _binding(instance.uuid):
            return super().finish_migration(
                context, migration, instance, *a, **kw
            )

    def _hard_reboot(
        self, context: Any, instance: Any, *args: Any, **kw: Any
    ) -> Any:
        self._vgpu.driver.hold_devices(instance.uuid)
        with _binding(instance.uuid), _keeping(instance.uuid):
            return super()._hard_reboot(context, instance, *args, **kw)

    # -- guests coming and going ---------------------------------------

    def _create_guest(
        self, context: Any, xml: str, instance: Any, *a: Any, **kw: Any
    ) -> Any:
        guest = super()._create_guest(context, xml, instance, *a, **kw)
        self._vgpu.driver.guest_defined(instance.uuid)
        return guest

    def _undefine_domain(self, instance: Any, *a: Any, **kw: Any) -> None:
        super()._undefine_domain(instance, *a, **kw)
        self._vgpu.driver.guest_undefined(instance.uuid)

    def cleanup(self, context: Any, instance: Any, *a: Any, **kw: Any) -> Any:
        result = super().cleanup(context, instance, *a, **kw)
        # the instance leaves this host (deleted, moved, evacuated,
        # shelved), except when a hard reboot defines it again
        if instance.uuid not in _KEEPING.get():
            self._vgpu.driver.release_mdevs(instance.uuid)
        return result

    # -- resize ----------------------------------------------------------

    def finish_revert_migration(
        self, context: Any, instance: Any, *a: Any, **kw: Any
    ) -> Any:
        # the source guest's own devices, recreated if they went away
        self._vgpu.driver.finish_revert_migration(instance.uuid)
        return super().finish_revert_migration(context, instance, *a, **kw)

    def confirm_migration(
        self, context: Any, migration: Any, instance: Any, *a: Any, **kw: Any
    ) -> Any:
        result = super().confirm_migration(
            context, migration, instance, *a, **kw
        )
        if migration.source_compute != migration.dest_compute:
            self._vgpu.driver.confirm_migration(instance.uuid)
        return result

    # -- live migration (destination) ------------------------------------

    def check_source_migrate_data_at_dest(
        self,
        ctxt: Any,
        instance: Any,
        migrate_data: Any,
        migration: Any,
        limits: Any,
        allocs: Mapping[str, Any],
    ) -> Any:
        source = (
            migrate_data.source_mdev_types
            if "source_mdev_types" in migrate_data
            else None
        )
        if not source:
            return super().check_source_migrate_data_at_dest(
                ctxt, instance, migrate_data, migration, limits, allocs
            )
        targets = self._vgpu.claim_for_live_migration(
            instance.uuid, dict(source), allocs
        )
        LOG.info(
            "Live migration of %s: destination mdevs claimed "
            "(source: destination) %s",
            instance.uuid,
            targets,
        )
        # Nova's own checks run too, with the mdev part already done
        migrate_data.source_mdev_types = {}
        try:
            result = super().check_source_migrate_data_at_dest(
                ctxt, instance, migrate_data, migration, limits, allocs
            )
        except Exception:
            self._vgpu.driver.rollback_live_migration_at_destination(
                instance.uuid
            )
            raise
        finally:
            migrate_data.source_mdev_types = source
        result.target_mdevs = targets
        return result

    def post_live_migration_at_destination(
        self, context: Any, instance: Any, *a: Any, **kw: Any
    ) -> Any:
        result = super().post_live_migration_at_destination(
            context, instance, *a, **kw
        )
        self._vgpu.driver.guest_defined(instance.uuid)
        self._vgpu.driver.live_migration_succeeded(instance.uuid)
        return result

    def rollback_live_migration_at_destination(
        self, context: Any, instance: Any, *a: Any, **kw: Any
    ) -> Any:
        try:
            return super().rollback_live_migration_at_destination(
                context, instance, *a, **kw
            )
        finally:
            self._vgpu.driver.rollback_live_migration_at_destination(
                instance.uuid
            )
