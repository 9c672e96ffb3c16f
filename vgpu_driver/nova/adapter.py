"""Nova's shapes in, this library's calls out.

:class:`NovaAdapter` is everything the Nova driver subclass needs, kept
apart from Nova's ``LibvirtDriver`` so it can be used (and tested) with
Nova's real ``CONF`` and ``ProviderTree`` and any libvirt connection. It
imports Nova only to raise Nova's own exceptions, so that Nova's compute
manager reacts as it does to its in-tree code (reschedule, reshape,
migration pre-check failure).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from oslo_config import cfg
from oslo_log import log as logging

from vgpu_driver import conf as vconf
from vgpu_driver import exception
from vgpu_driver.conf import devices as device_opts
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.host import nvml
from vgpu_driver.host.libvirt_host import Creator, LibvirtHost
from vgpu_driver.model import naming
from vgpu_driver.model import nvml as nvml_model
from vgpu_driver.model.config import Problem
from vgpu_driver.nova import nova_state_path
from vgpu_driver.placement.allocations import in_flight_candidates

LOG = logging.getLogger(__name__)

# Errors that mean "this host cannot give the instance its devices":
# Nova reschedules the instance elsewhere.
RESCHEDULE = (
    exception.DeviceCapacityExhausted,
    exception.ProviderUnknown,
    exception.DeviceOperationFailed,
)


def _nova_exception() -> ModuleType:
    return importlib.import_module("nova.exception")


def is_mdev(device_id: str) -> bool:
    """An mdev uuid (a VF is named by its PCI address)."""
    return ":" not in device_id


class NovaAdapter:
    """One compute node's vGPU work, with Nova's method shapes."""

    def __init__(
        self,
        conf: cfg.ConfigOpts,
        nodename: str,
        connect: Callable[[], Any],
        *,
        api: Any = None,
        creator: Creator | None = None,
        sysfs_root: str | Path = "/sys",
    ) -> None:
        """``conf``: Nova's CONF (its ``[devices]`` and ``[mdev_*]``
        options stay Nova's; the library's extra ones are added).
        ``connect``: Nova's ``Host.get_connection``. ``api``: the libvirt
        module Nova uses. ``creator``: Nova's own mdev creation.
        Records are kept under ``[devices] state_path``/``nodename``."""
        vconf.register_opts(conf)
        self.nodename = nodename
        host = LibvirtHost(
            sysfs_root=sysfs_root,
            connect=connect,
            api=api,
            creator=creator,
            nvml=nvml.maybe_load(
                conf.devices.use_nvml, conf.devices.gpu_error_hold
            ),
        )
        # Nova runs libvirt's event loop on a thread of its own from the
        # start: node-device events can tell which parents changed
        host.watch_node_device_events()
        state_path = nova_state_path(device_opts.records_path(conf), nodename)
        listen = conf.devices.metrics_listen
        if listen:
            self.driver = served_driver(conf, host, state_path, listen)
        else:
            self.driver = VgpuDriver(conf, host, state_path=state_path)

    # -- start and configuration ---------------------------------------

    def init_host(
        self, instances: Iterable[str] | None = None
    ) -> dict[str, list[str]]:
        """``instances``: those Nova has on this host (None: unknown)."""
        done = self.driver.init_host(
            list(instances) if instances is not None else None
        )
        moved = done.get("records_moved_aside", [])
        if any(Path(p).name.startswith("claims") for p in moved):
            done["held_in_flight"] = self._hold_in_flight()
        for key, items in sorted(done.items()):
            if items:
                LOG.info("vGPU start-up: %s: %s", key, ", ".join(items))
        return done

    def _hold_in_flight(self) -> list[str]:
        """The claims were lost: hold the devices of spawns in flight,
        from the allocations Placement has on this node's device
        providers (Nova's ``[placement]``)."""
        try:
            candidates = in_flight_candidates(
                self.driver.conf, self.nodename, self.driver.managed_classes()
            )
        except exception.VgpuDriverError as exc:
            LOG.warning(
                "The vGPU claims were lost and Placement cannot be read "
                "(%s): devices of spawns in flight are not held; run "
                "'vgpu-driver --nova-node %s audit' once Placement answers",
                exc,
                self.nodename,
            )
            return []
        held = self.driver.hold_in_flight(candidates)
        return [f"{c}: {', '.join(d)}" for c, d in sorted(held.items())]

    def cleanup_host(self) -> list[str]:
        return self.driver.cleanup_host()

    def domain_event(self, instance_uuid: str, defined: bool) -> None:
        """From Nova's lifecycle callback, in libvirt's event thread."""
        self.driver.domain_event(instance_uuid, defined)

    def reload_config(self) -> None:
        try:
            self.driver.reload_config()
        except exception.ConfigInvalid as exc:
            raise _nova_exception().InvalidLibvirtMdevConfig(
                reason=str(exc)
            ) from exc

    def enabled_types(self) -> list[str]:
        return [t.type_id for t in self.driver.config.types]

    # -- the provider tree ---------------------------------------------

    def update_provider_tree(
        self,
        provider_tree: Any,
        nodename: str,
        allocations: Mapping[str, Any] | None = None,
    ) -> None:
        nova_exception = _nova_exception()
        # Nova flushed the previous tree before asking again.
        self.driver.confirm_flushed()
        try:
            self.driver.update_provider_tree(
                provider_tree, nodename, allocations
            )
        except exception.ReshapeNeeded as exc:
            raise nova_exception.ReshapeNeeded() from exc
        except exception.ReshapeFailed as exc:
            raise nova_exception.ReshapeFailed(error=str(exc)) from exc

    def gpu_inventories(self) -> dict[str, dict[str, int | float]]:
        """Nova's ``_get_gpu_inventories`` shape: parent name -> the
        inventory record of its provider, as last written."""
        found: dict[str, dict[str, int | float]] = {}
        for plan in self.driver.last_plans:  # a device's first type's
            held = plan.inventory()  # none: it holds its other types only
            if held:
                found.setdefault(plan.device, held[plan.resource_class])
        return found

    # -- devices -------------------------------------------------------

    def asks_devices(self, allocations: Mapping[str, Any] | None) -> bool:
        """Whether ``allocations`` hold units of an enabled type's class
        (Nova's ``_vgpu_allocations`` is not empty)."""
        classes = self.driver.config.resource_classes()
        return any(
            amount
            for alloc in (allocations or {}).values()
            for rc, amount in alloc.get("resources", {}).items()
            if rc in classes
        )

    def allocate(
        self, instance_uuid: str, allocations: Mapping[str, Any]
    ) -> list[str]:
        """Nova's ``_allocate_mdevs``: the devices for the allocations, an
        mdev uuid or (an NVIDIA SR-IOV vGPU) a VF's PCI address each."""
        try:
            devices = self.driver.allocate_mdevs(instance_uuid, allocations)
        except RESCHEDULE as exc:
            raise _nova_exception().ComputeResourcesUnavailable(
                reason=str(exc)
            ) from exc
        return [d.id for d in devices]

    def assigned(self, instance_uuid: str | None = None) -> dict[str, str]:
        """Nova's ``_get_all_assigned_mediated_devices``: device id ->
        instance uuid, for what guests have and what is claimed (binds
        not yet in a guest, incoming live migrations): mdevs, and VFs of
        SR-IOV vGPU cards (never another PCI device: those are Nova's).
        No libvirt call."""
        found = {}
        vfs = self.driver.vf_devices()
        for instance, devices in self.driver.instance_devices().items():
            if instance_uuid is not None and instance != instance_uuid:
                continue
            for device_id in (*devices["in_use"], *devices["claimed"]):
                if is_mdev(device_id) or device_id in vfs:
                    found[device_id] = instance
        return found

    def vfs_of(self, instance_uuid: str) -> list[str]:
        """The SR-IOV vGPU VFs the instance has or is bound to."""
        return sorted(
            d for d in self.assigned(instance_uuid) if not is_mdev(d)
        )

    def vf_devices(self) -> dict[str, bool]:
        return self.driver.vf_devices()

    def mdev_types(self, uuids: Iterable[str]) -> dict[str, str]:
        """Nova's ``_get_mdev_types_from_uuids``. No libvirt call."""
        return self.driver.mdev_types(uuids)

    def free_mdevs(
        self, parent: str | None, types: Iterable[str] | None = None
    ) -> set[str]:
        """Nova's ``_get_existing_mdevs_not_assigned``."""
        return self.driver.free_mdevs(parent, types)

    def host_driver_traits(self) -> set[str]:
        """The host-driver traits this host's providers carry."""
        inventory = self.driver.discover(guests=False)
        found = {
            naming.host_driver_trait(driver, version)
            for driver, version in inventory.driver_versions
        }
        said = inventory.nvml
        if said is not None and any(g.migration for g in said.gpus):
            found.add(naming.MIGRATION_TRAIT)
        return found

    def check_driver_compatible(
        self, instance_uuid: str, source_traits: set[str]
    ) -> None:
        """Destination side: refuse a source on another vGPU host driver
        (Nova's MigrationPreCheckError, with both versions)."""
        why = naming.driver_mismatch(
            source_traits, self.host_driver_traits()
        ) or nvml_model.migration_refusal(
            self.driver.discover(guests=False).nvml
        )
        if why:
            raise _nova_exception().MigrationPreCheckError(
                reason=f"Unable to migrate {instance_uuid}: {why}"
            )

    def claim_for_live_migration(
        self,
        instance_uuid: str,
        source_types: Mapping[str, str],
        allocations: Mapping[str, Any],
    ) -> dict[str, str]:
        """Destination side: ``{source mdev: destination mdev}``, claimed
        on disk until the migration ends. Raises Nova's
        MigrationPreCheckError, with Nova's wording, when it cannot."""
        nova_exception = _nova_exception()
        enabled = self.enabled_types()
        if not all(t in enabled for t in source_types.values()):
            raise nova_exception.MigrationPreCheckError(
                reason=f"Unable to migrate {instance_uuid}: Source mdev "
                f"types {sorted(set(source_types.values()))} are not "
                f"supported by this compute : {enabled} "
            )
        try:
            return self.driver.claim_for_live_migration(
                instance_uuid, source_types, allocations
            )
        except (exception.MigrationTypeMismatch, *RESCHEDULE) as exc:
            raise nova_exception.MigrationPreCheckError(
                reason=f"Unable to migrate {instance_uuid}: {exc}"
            ) from exc


def served_driver(
    conf: cfg.ConfigOpts, host: LibvirtHost, state_path: str, listen: str
) -> VgpuDriver:
    """A driver whose metrics the service serves on ``listen``."""
    from prometheus_client import CollectorRegistry, start_http_server

    from vgpu_driver.metrics import MeteredDriver

    address, _, port = listen.rpartition(":")
    if not port.isdigit():
        raise exception.ConfigInvalid(
            [
                Problem(
                    "devices",
                    "metrics_listen",
                    listen,
                    "give ADDRESS:PORT, e.g. 127.0.0.1:9847",
                )
            ]
        )
    registry = CollectorRegistry()
    driver = MeteredDriver(
        conf, host, state_path=state_path, registry=registry
    )
    server, _thread = start_http_server(
        int(port), address or "127.0.0.1", registry
    )
    driver.served_at = f"{address or '127.0.0.1'}:{server.server_port}"
    LOG.info("Serving vGPU metrics on http://%s/", driver.served_at)
    return driver
