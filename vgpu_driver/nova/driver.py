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
  of nova-compute until the migration succeeds or is rolled back;
* a graceful stop (``cleanup_host``) writes the library's records whole
  as snapshots before Nova's own cleanup.

Nova calls are wrapped at their entry points; Nova's own code is not
changed. Nova loads compute drivers from ``nova.virt``: see
:mod:`vgpu_driver.nova` for how this one is enabled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nova import context as nova_context
from nova import objects
from oslo_log import log as logging

from vgpu_driver.nova.base import BINDING, CONF, KEEPING, binding, keeping
from vgpu_driver.nova.moves import Moves
from vgpu_driver.nova.sriov import SriovVfs

LOG = logging.getLogger(__name__)


class LibvirtDriver(SriovVfs, Moves):
    """``compute_driver = vgpu_libvirt.LibvirtDriver``: Nova's driver
    with the parts in :mod:`.base`, :mod:`.sriov` and :mod:`.moves`."""

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
        instance_uuid = BINDING.get()
        if instance_uuid is None:
            if not self._vgpu.asks_devices(allocations):
                return []  # Nova's contract: nothing asked, nothing given
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

    def spawn(self, context: Any, instance: Any, *args: Any, **kw: Any) -> Any:
        with binding(instance.uuid):
            return super().spawn(context, instance, *args, **kw)

    def finish_migration(
        self, context: Any, migration: Any, instance: Any, *a: Any, **kw: Any
    ) -> Any:
        with binding(instance.uuid):
            return super().finish_migration(
                context, migration, instance, *a, **kw
            )

    def _hard_reboot(
        self, context: Any, instance: Any, *args: Any, **kw: Any
    ) -> Any:
        self._vgpu.driver.hold_devices(instance.uuid)
        with binding(instance.uuid), keeping(instance.uuid):
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
        if instance.uuid not in KEEPING.get():
            self._vgpu.driver.release_mdevs(instance.uuid)
        return result
