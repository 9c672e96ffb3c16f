"""The facade a compute service calls, with Nova's method names.

Each method hands its work to the part that owns it:

* :class:`~vgpu_driver.service.refresh.Refresher`: reading the host and
  writing the provider tree (this library's
  :class:`~vgpu_driver.model.provider_tree.ProviderTree` or Nova's, which
  has the same interface);
* :class:`~vgpu_driver.service.binder.DeviceBinder`: claims and devices
  through an instance's life;
* :mod:`vgpu_driver.service.lifecycle`: allocations on the compute node's
  own provider, live-migration claims, a guest's devices recreated;
* the records (:mod:`vgpu_driver.records`): what is kept under
  ``[devices] state_path``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from oslo_config import cfg
from oslo_log import log as logging

from vgpu_driver.conf import devices, loader
from vgpu_driver.host import domain_xml
from vgpu_driver.host.base import Host
from vgpu_driver.instance_moves import InstanceMoves
from vgpu_driver.model import usage
from vgpu_driver.model.binding import BoundDevice
from vgpu_driver.model.config import DeviceConfig
from vgpu_driver.model.device import HostInventory
from vgpu_driver.model.inventory import ProviderPlan
from vgpu_driver.model.usage import Allocations
from vgpu_driver.placement.handshake import sync_placement
from vgpu_driver.records.store import StateStore
from vgpu_driver.records.traits import OwnedTraits
from vgpu_driver.records.writers import Writers
from vgpu_driver.service import lifecycle, recovery
from vgpu_driver.service.binder import DeviceBinder
from vgpu_driver.service.refresh import Refresher
from vgpu_driver.service.settings import Settings

LOG = logging.getLogger(__name__)

__all__ = ["Allocations", "VgpuDriver", "sync_placement"]


class VgpuDriver(InstanceMoves):
    def __init__(
        self,
        conf: cfg.ConfigOpts,
        host: Host,
        config: DeviceConfig | None = None,
        *,
        persist: bool = True,
        state_path: str | None = None,
        yields: bool = False,
    ) -> None:
        """``persist=False`` keeps no records on disk (for a report on a
        throwaway tree). ``state_path``: where the records are kept, if
        not ``[devices] state_path`` (e.g. one directory per node when a
        process serves several). ``yields``: an operator's tool, which
        refuses to write over providers another configuration wrote after
        it (WriterConflict); a compute service warns and writes on."""
        self.conf = conf
        self.host = host
        self.settings = Settings(
            conf, config or loader.load_device_config(conf), yields=yields
        )
        # capability traits come from the enabled types' descriptions
        # alone: the others' sysfs files are not read (a GRID pGPU lists
        # about 18 types)
        if host.described_types is None:
            host.described_types = self.settings
        self.state = (
            StateStore(state_path or devices.records_path(conf))
            if persist
            else None
        )
        self.binder = DeviceBinder(
            host,
            self.state,
            remove_unused=conf.devices.remove_unused_mdevs,
        )
        # parents whose device fails: their providers are reserved
        self.unschedulable = self.binder.unschedulable
        self._seen = self.binder.ledger.seen
        self._traits = OwnedTraits(self.state)
        self._refresher = Refresher(
            self.settings,
            host,
            self.binder,
            self._seen,
            self._traits,
            Writers(self.state),
        )

    @property
    def config(self) -> DeviceConfig:
        return self.settings.config

    @property
    def last_plans(self) -> list[ProviderPlan]:
        return self._refresher.last_plans

    def seen_mdevs(self) -> dict[str, tuple[str, str]]:
        """mdev uuid -> (parent, type) of every mdev seen (also gone ones
        a guest still names)."""
        return self._seen.snapshot()

    def reload_config(self) -> DeviceConfig:
        """Read the device configuration again (call it after the caller
        re-read its files, e.g. on SIGHUP): a type enabled on a running
        service is offered at the next update_provider_tree. An invalid
        new configuration raises ConfigInvalid and the current one stays.
        """
        config = loader.load_device_config(self.conf)
        with self._refresher.lock:
            if config != self.settings.config:
                LOG.info(
                    "Device configuration reloaded: types %s",
                    ", ".join(t.type_id for t in config.types) or "none",
                )
            self.settings.config = config
            self._refresher.reading.warned_addresses = False
        return config

    # -- discovery and the provider tree --------------------------------

    def discover(
        self, *, rescan_guests: bool = False, guests: bool = True
    ) -> HostInventory:
        """Read the host (see :meth:`~vgpu_driver.service.reading.
        HostReading.discover`)."""
        return self._refresher.discover(
            rescan_guests=rescan_guests, guests=guests
        )

    def held_devices(
        self,
        inventory: HostInventory,
        claims: Sequence[tuple[str, str, str]] | None = None,
    ) -> dict[str, Counter[str]]:
        """Device name -> type id -> devices of that type in use or
        claimed. ``claims``: as read for this pass (read now if not
        given)."""
        if claims is None:
            claims = self.binder.claimed_devices()
        return usage.held_devices(inventory, self._seen.snapshot(), claims)

    def update_provider_tree(
        self,
        provider_tree: Any,
        nodename: str,
        allocations: Allocations | None = None,
    ) -> list[ProviderPlan]:
        """Make the device providers under ``nodename`` match the host.

        ``provider_tree`` is this library's ``ProviderTree`` or Nova's;
        the root (the compute node) is the caller's and must exist.
        Raises ReshapeNeeded when the tree has an older layout and no
        ``allocations`` were given (Nova calls again with them). Returns
        the plans written, for reporting.
        """
        return self._refresher.update_provider_tree(
            provider_tree, nodename, allocations
        )

    def confirm_flushed(self) -> None:
        """The tree last updated is now in Placement: from here on this
        library owns exactly the traits it planned."""
        with self._refresher.lock:
            self._traits.confirm()

    def configured_types(self, inventory: HostInventory) -> dict[str, str]:
        """Parent name -> the type the configuration gives it."""
        return usage.configured_types(self.settings.config, inventory)

    def managed_classes(self) -> set[str]:
        """Resource classes of the devices this library manages."""
        return self.settings.managed_classes()

    # -- devices through an instance's life ----------------------------

    def allocate_mdevs(
        self, instance_uuid: str, allocations: Mapping[str, Any]
    ) -> list[BoundDevice]:
        """Devices for an instance's allocations (``{rp_uuid:
        {"resources": {rc: n}}}``): a free mdev reused or one created per
        unit, or a VF set to the type. Claimed until released or seen in
        the guest's domain. Raises ProviderUnknown or
        DeviceCapacityExhausted (the instance must be rescheduled), having
        undone anything it made."""
        wanted, any_parent = lifecycle.wanted(self._refresher, allocations)
        self._refresher.name_instances([instance_uuid])
        return self.binder.bind(instance_uuid, wanted, any_parent=any_parent)

    def guest_defined(self, instance_uuid: str) -> list[str]:
        """The caller defined (or redefined) the instance's guest: re-read
        that one domain, so its devices count as in use and its spawn
        claims end. Returns the device ids whose claims ended."""
        self._refresher.name_instances([instance_uuid])
        guest = self.host.refresh_guest(instance_uuid)
        if guest is None:
            return []
        return self.binder.guest_defined(guest)

    def guest_undefined(self, instance_uuid: str) -> list[str]:
        """The caller undefined the instance's guest: its devices are free
        again, except those still claimed for it (claims stay until
        :meth:`release_mdevs`). Returns the device ids freed."""
        return self.binder.guest_undefined(instance_uuid)

    def hold_devices(self, instance_uuid: str) -> list[str]:
        """Before the caller undefines a guest to define it again (a hard
        reboot): claim its devices so no other instance takes them in
        between, and recreate any that went away (same uuid, same
        parent). The claims end at :meth:`guest_defined`."""
        lifecycle.recover_guest(self._refresher, instance_uuid)
        return self.binder.hold(instance_uuid)

    def mdev_types(self, uuids: Iterable[str]) -> dict[str, str]:
        """mdev uuid -> its type, for those known (a gone mdev a guest
        still names included). No host call."""
        wanted = list(uuids)
        seen = self._seen.snapshot()
        found = {u: seen[u][1] for u in wanted if u in seen}
        found.update(self.binder.mdev_types(wanted))
        return found

    def vf_devices(self) -> dict[str, bool]:
        """The VFs this library gives to guests (any other PCI device a
        guest has is the caller's), each with whether libvirt manages it
        (True: a VF given as it is, AMD or Intel; False: an NVIDIA SR-IOV
        vGPU's, which stays bound to NVIDIA's driver). No host call."""
        return self.binder.vf_addresses()

    def domain_event(self, instance_uuid: str, defined: bool) -> None:
        """libvirt reported the guest defined (or redefined), started or
        stopped (``defined`` True: a transient guest sends only those
        two) or undefined, by anyone: pass it from the caller's own
        lifecycle callback (a compute service has one; else
        ``LibvirtHost.watch_domain_events`` registers one). The next
        bind, query or discovery re-reads that guest alone (forgets it
        when it is gone). Safe from libvirt's event thread: no lock, no
        call, no logging."""
        self.host.domain_event(instance_uuid, defined)

    def free_mdevs(
        self, parent: str | None = None, types: Iterable[str] | None = None
    ) -> set[str]:
        """mdevs no guest uses and nobody claimed (on ``parent``, of
        ``types``, when given)."""
        return self.binder.free_mdevs(parent, types)

    def create_free_mdev(
        self, parent: str | None = None, uuid: str | None = None
    ) -> str | None:
        """One unclaimed mdev of the configured type, on ``parent`` or on
        the first parent with room (for reuse by a later bind). Returns
        its uuid, or None when there is no room."""
        return lifecycle.create_free_mdev(self._refresher, parent, uuid)

    def instance_devices(self) -> dict[str, dict[str, list[str]]]:
        """Per instance, the devices its guest uses and those claimed for
        it (binds not yet in a guest, incoming live migrations)."""
        return self.binder.instance_devices()

    @staticmethod
    def guest_hostdev_xml(devices: list[BoundDevice]) -> list[str]:
        """The ``<hostdev>`` elements to put in the guest's XML."""
        return [domain_xml.hostdev_xml(device) for device in devices]

    def release_mdevs(self, instance_uuid: str) -> list[str]:
        """On delete: drop the instance's claims; its mdevs stay for reuse
        (or go, with ``[devices] remove_unused_mdevs``); VF types are
        cleared. The instance is no longer named the caller's."""
        released = self.binder.release(instance_uuid)
        self._refresher.forget_instance(instance_uuid)
        return released

    def init_host(
        self, instances: list[str] | None = None
    ) -> dict[str, list[str]]:
        """At service start: rebuild who uses what from every guest and the
        library's claims, recreate mdevs guests need that are gone (same
        uuid, same parent), start defined-only ones, re-apply VF types.
        ``instances``: the instances the service has on this host (the
        bind claims of any other, made before a crash and never ended, are
        dropped; claims for incoming live migrations stay)."""
        if instances is not None:
            self._refresher.name_instances(instances)
        moved = self.binder.repair_records()
        inventory = self.discover(rescan_guests=True)
        done = self.binder.recover(inventory, self._seen.snapshot(), instances)
        done["records_moved_aside"] = moved
        if any(
            done[k] for k in ("released", "recreated", "started", "vf_types")
        ):
            self.discover()  # the host changed: read what it is now
        return done

    def cleanup_host(self) -> list[str]:
        """At a clean stop: each record with a journal is written whole
        as a new snapshot (see :func:`~.service.recovery.write_snapshots`).
        Returns the records written."""
        return recovery.write_snapshots(self.binder.ledger)

    def hold_in_flight(
        self, in_flight: Mapping[str, Mapping[str, int]]
    ) -> dict[str, list[str]]:
        """After :meth:`init_host` (or ``restore``) moved an unreadable
        claims record aside: keep the devices of spawns in flight from
        being handed out. ``in_flight``: consumer -> parent or PF name ->
        units it holds in Placement on that device's provider (the
        caller reads Placement). Returns consumer -> device ids held."""
        return self.binder.hold_in_flight(in_flight)

    def restore_vf_types(self, failed: list[str] | None = None) -> list[str]:
        """``vgpu-driver restore``: re-apply recorded VF vGPU types, going
        on past a VF that refuses (listed in ``failed``)."""
        return self.binder.restore_vf_types(self.discover(), failed)
