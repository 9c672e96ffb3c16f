"""The facade a compute service calls, with Nova's method names.

It ties the pieces together: the host adapter discovers, the pure model
plans, and the result is written into the caller's provider tree (this
library's own :class:`~vgpu_driver.model.provider_tree.ProviderTree` or
Nova's, which has the same interface).
"""

from __future__ import annotations

import threading
import uuid as uuidlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import os_resource_classes as orc
from oslo_config import cfg
from oslo_log import log as logging

from vgpu_driver.conf import loader
from vgpu_driver.exception import (
    DeviceCapacityExhausted,
    MigrationTypeMismatch,
    ReshapeFailed,
    ReshapeNeeded,
)
from vgpu_driver.host import domain_xml
from vgpu_driver.host.base import Host
from vgpu_driver.model import naming, trait
from vgpu_driver.model.binding import BoundDevice, Target
from vgpu_driver.model.check import host_problems
from vgpu_driver.model.claims import MIGRATION
from vgpu_driver.model.config import DeviceConfig
from vgpu_driver.model.device import HostInventory
from vgpu_driver.model.inventory import ProviderPlan, plan_providers
from vgpu_driver.records.store import (
    StateStore,
    StateStoreError,
    Validator,
    validate_str_map,
)
from vgpu_driver.service.binder import DeviceBinder

LOG = logging.getLogger(__name__)

# {consumer: {"allocations": {rp_uuid: {"resources": {rc: n}}}}}, as Nova
# passes to update_provider_tree.
Allocations = Mapping[str, Mapping[str, Any]]
TRAITS_RECORD = "provider-traits"
MDEVS_RECORD = "mdev-parents"


class VgpuDriver:
    def __init__(
        self,
        conf: cfg.ConfigOpts,
        host: Host,
        config: DeviceConfig | None = None,
        *,
        persist: bool = True,
        state_path: str | None = None,
    ) -> None:
        """``persist=False`` keeps no records on disk (for a report on a
        throwaway tree). ``state_path``: where the records are kept, if
        not ``[devices] state_path`` (e.g. one directory per node when a
        process serves several)."""
        self.conf = conf
        self.host = host
        self.config = config or loader.load_device_config(conf)
        # capability traits come from the enabled types' descriptions
        # alone: the others' sysfs files are not read (a GRID pGPU lists
        # about 18 types). The host is handed the set, not a method of
        # this driver: no reference cycle, so a driver the caller drops
        # is freed at once, not at the next full garbage collection.
        self._enabled = _EnabledTypes(self.config)
        if host.described_types is None:
            host.described_types = self._enabled
        self._lock = threading.RLock()
        self.state = (
            StateStore(state_path or conf.devices.state_path)
            if persist
            else None
        )
        # the compute nodes' own providers seen in update_provider_tree:
        # units allocated there are pre-reshape allocations
        self._roots: set[str] = set()
        self.last_plans: list[ProviderPlan] = []
        self._last_inventory: HostInventory | None = None
        # what the last update_provider_tree depended on and wrote
        self._written: tuple[Any, ...] | None = None
        # mdev uuid -> (parent, type) of every mdev seen, kept on disk: a
        # guest's device whose parent vanished (even while the service was
        # down) is still counted against its provider.
        self._seen_mdevs: dict[str, tuple[str, str]] = _as_seen(
            self._load(MDEVS_RECORD, _validate_seen)
        )
        # provider name -> traits this library last set on it (kept on
        # disk: a trait dropped from the config while the service was
        # down is still known as ours, unlike an operator's).
        self._written_traits: dict[str, frozenset[str]] = _as_traits(
            self._load(TRAITS_RECORD, _validate_traits)
        )
        self._planned_traits: dict[str, frozenset[str]] = {}
        # the traits record on disk while a save of it failed (else None)
        self._traits_on_disk: dict[str, frozenset[str]] | None = None
        self._reasons: dict[str, str | None] = {}
        self._warned_addresses = False
        self.binder = DeviceBinder(
            host,
            self.state,
            remove_unused=conf.devices.remove_unused_mdevs,
        )
        # parents whose device fails: their providers are reserved
        self.unschedulable = self.binder.unschedulable
        self._targets: dict[str, Target] = {}

    def seen_mdevs(self) -> dict[str, tuple[str, str]]:
        """mdev uuid -> (parent, type) of every mdev seen (also gone ones
        a guest still names)."""
        with self._lock:
            return dict(self._seen_mdevs)

    def reload_config(self) -> DeviceConfig:
        """Read the device configuration again (call it after the caller
        re-read its files, e.g. on SIGHUP): a type enabled on a running
        service is offered at the next update_provider_tree. An invalid
        new configuration raises ConfigInvalid and the current one stays.
        """
        config = loader.load_device_config(self.conf)
        with self._lock:
            if config != self.config:
                LOG.info(
                    "Device configuration reloaded: types %s",
                    ", ".join(t.type_id for t in config.types) or "none",
                )
            self.config = config
            self._enabled.config = config
            self._warned_addresses = False
        return config

    def _load(self, key: str, validate: Validator) -> dict[str, Any]:
        """One of the driver's records: caches of what the host showed,
        so an unreadable one is moved aside and rebuilt."""
        if self.state is None:
            return {}
        return dict(self.state.load_or_rebuild(key, {}, validate))

    def _merge(
        self,
        key: str,
        validate: Validator,
        changed: Mapping[str, Any],
        removed: set[str],
    ) -> dict[str, Any]:
        """Apply our changes to the record as it is on disk now (another
        process may have written other entries): returns the merged
        record."""
        if self.state is None:
            return dict(changed)

        def merge(current: dict[str, Any]) -> dict[str, Any]:
            kept = {k: v for k, v in current.items() if k not in removed}
            return {**kept, **changed}

        return dict(self.state.update(key, merge, {}, validate))

    def _keep(self, what: str, save: Callable[[], None]) -> bool:
        """Save a record that only helps (what was seen, what we own):
        one that cannot be written now (a full ``state_path``) is logged
        and written by a later pass; reporting goes on."""
        try:
            save()
        except StateStoreError as exc:
            LOG.warning(
                "Could not record %s; trying again later: %s", what, exc
            )
            return False
        return True

    def _save_seen(self, new: dict[str, tuple[str, str]]) -> None:
        old = self._seen_mdevs
        merged = self._merge(
            MDEVS_RECORD,
            _validate_seen,
            {u: list(w) for u, w in new.items() if old.get(u) != w},
            set(old) - set(new),
        )
        self._seen_mdevs = _as_seen(merged) if self.state else new

    def _save_traits_or_retry(self, before: dict[str, frozenset[str]]) -> None:
        """Record the traits we own now, ``before`` being what is on
        disk; if it cannot be written, the next pass tries again."""
        if before == self._written_traits:
            self._traits_on_disk = None
            return
        saved = self._keep("the traits set", lambda: self._save_traits(before))
        self._traits_on_disk = None if saved else before

    def _save_traits(self, before: Mapping[str, frozenset[str]]) -> None:
        after = self._written_traits
        merged = self._merge(
            TRAITS_RECORD,
            _validate_traits,
            {n: sorted(t) for n, t in after.items() if before.get(n) != t},
            set(before) - set(after),
        )
        if self.state is not None:
            self._written_traits = _as_traits(merged)

    # -- discovery -----------------------------------------------------

    def discover(
        self, *, rescan_guests: bool = False, guests: bool = True
    ) -> HostInventory:
        """Read the host. ``guests=False``: guests never read so far stay
        unread (``guests_known`` False); nothing that needs them (the
        binder's view, the record of mdevs seen) is touched then."""
        # Guests defined by another process are re-read when that process
        # changed the claims (it ended a claim because the guest has it).
        rescan = rescan_guests or self.binder.view_is_stale()
        inventory = self.host.discover(rescan_guests=rescan, guests=guests)
        with self._lock:
            if not self._warned_addresses:
                for problem in host_problems(self.config, inventory):
                    LOG.warning("Configuration: %s", problem)
                self._warned_addresses = True
            if inventory is self._last_inventory:
                # the adapter saw no change: the binder's view, kept
                # current by its own binds, stays
                return inventory
            self._last_inventory = inventory
            if not inventory.guests_known:
                return inventory
            seen = {m.uuid: (m.parent, m.type_id) for m in inventory.mdevs}
            # forget devices no guest uses any more and that are gone
            users = inventory.mdev_users()
            kept = {
                uuid: where
                for uuid, where in self._seen_mdevs.items()
                if uuid in users and uuid not in seen
            }
            if {**kept, **seen} != self._seen_mdevs and not self._keep(
                "the mdevs seen", lambda: self._save_seen({**kept, **seen})
            ):
                self._last_inventory = None  # the next discovery retries
            self.binder.refresh(inventory, self._targets)
        return inventory

    def held_devices(
        self,
        inventory: HostInventory,
        claims: Sequence[tuple[str, str, str]] | None = None,
    ) -> dict[str, Counter[str]]:
        """Device name -> type id -> devices of that type that guests use
        or that are claimed (bound, not yet in a guest; or reserved for an
        incoming live migration). ``claims``: the binder's claims as read
        for this pass (read now if not given)."""
        if claims is None:
            claims = self.binder.claimed_devices()
        held: dict[str, Counter[str]] = defaultdict(Counter)
        users = inventory.mdev_users()
        for uuid in users:
            known = self._seen_mdevs.get(uuid)
            if known is not None:
                parent, type_id = known
                held[parent][type_id] += 1
        pci_users = inventory.pci_users()
        for device_id, parent, type_id in claims:
            if device_id not in users and device_id not in pci_users:
                held[parent][type_id] += 1
        vf_owner = {
            vf.address: (pf.name, vf.current_type)
            for pf in inventory.pfs
            for vf in pf.vfs
        }
        for address in pci_users:
            if address in vf_owner and vf_owner[address][1]:
                pf_name, type_number = vf_owner[address]
                held[pf_name][naming.sriov_type_id(type_number)] += 1
        return dict(held)

    # -- the provider tree ---------------------------------------------

    def update_provider_tree(
        self,
        provider_tree: Any,
        nodename: str,
        allocations: Allocations | None = None,
    ) -> list[ProviderPlan]:
        """Make the device providers under ``nodename`` match the host.

        ``provider_tree`` is this library's ``ProviderTree`` or Nova's;
        the root (the compute node) is the caller's and must exist.
        Returns the plans written, for reporting.
        """
        inventory = self.discover(guests=False)
        self.binder.retry_failed(
            self.conf.devices.failed_device_retry_interval
        )
        with self._lock:
            # the claims are read once a pass (on disk, under the records'
            # lock): what the plan counts is what the pass remembers
            claims = tuple(self.binder.claimed_devices())
            if allocations is None and self._unchanged(
                provider_tree, nodename, inventory, claims
            ):
                return self.last_plans
            root = provider_tree.data(nodename)
            configured_traits = self._configured_traits()
            under = _providers_under(provider_tree, root.uuid)
            mine = self._device_providers(under, root.uuid, nodename)
            if not inventory.guests_known and self._guests_matter(
                mine, nodename, inventory, allocations
            ):
                inventory = self.discover()
                # the guests read may have ended spawn claims
                claims = tuple(self.binder.claimed_devices())
            self._roots.add(root.uuid)
            old = self._old_layout(under, root, nodename, inventory)
            if old and allocations is None:
                raise ReshapeNeeded(nodename=nodename)
            moves = (
                self._plan_moves(provider_tree, old, allocations, inventory)
                if old and allocations is not None
                else {}
            )
            for vf_provider in old[1:]:
                provider_tree.remove(vf_provider)
            if old and old[0]:
                kept = {
                    rc: rec
                    for rc, rec in root.inventory.items()
                    if rc not in self.managed_classes()
                }
                provider_tree.update_inventory(nodename, kept)
            if old:
                under = _providers_under(provider_tree, root.uuid)
                mine = self._device_providers(under, root.uuid, nodename)
            plans = plan_providers(
                nodename,
                self.config,
                inventory,
                held=self.held_devices(inventory, claims),
                allocated=_by_provider_name(provider_tree, allocations),
                existing={n: list(d.inventory) for n, d in mine.items()},
                unschedulable=self.unschedulable,
                owner_trait=configured_traits.owner,
            )
            # what is on disk: what we held before this pass, or before
            # a pass whose save failed (a full state_path)
            written = (
                dict(self._written_traits)
                if self._traits_on_disk is None
                else self._traits_on_disk
            )
            placed = [
                self._write(
                    provider_tree,
                    root.uuid,
                    plan,
                    inventory,
                    configured_traits,
                    mine.get(plan.name),
                )
                for plan in plans
            ]
            if moves:
                assert allocations is not None
                self._move_allocations(
                    provider_tree, nodename, moves, allocations
                )
            self._targets = {
                p.uuid: Target(plan.device, plan.type_id, plan.resource_class)
                for p, plan in zip(placed, plans, strict=True)
            }
            self.binder.set_targets(self._targets)
            if inventory.guests_known:
                self.binder.remove_stale_free_mdevs(
                    self.configured_types(inventory)
                )
            for name in sorted(set(mine) - {p.name for p in plans}):
                LOG.info(
                    "Removing provider %s: its device has nothing to offer "
                    "and nothing in use",
                    name,
                )
                provider_tree.remove(name)
                self._written_traits.pop(name, None)
                self._reasons.pop(name, None)
            self._save_traits_or_retry(written)
            self.last_plans = plans
            self._written = self._fingerprint(
                provider_tree, nodename, inventory, placed, claims
            )
            return plans

    def _guests_matter(
        self,
        mine: Mapping[str, Any],
        nodename: str,
        inventory: HostInventory,
        allocations: Allocations | None,
    ) -> bool:
        """Whether knowing which guest uses what could change the plan
        (if not, a service's first pass need not read every guest: their
        devices are all of the types their parents serve, so in use or
        not they count the same). True when a reshape needs them, a type
        has max_instances (in-use devices count first), a device is of a
        type its parent does not serve (kept only while in use), an mdev
        seen before is gone (still counted while a guest names it), or a
        device provider has no parent serving an enabled type."""
        if allocations is not None:
            return True
        if any(t.max_instances for t in self.config.types):
            return True
        present = {m.uuid for m in inventory.mdevs}
        if any(uuid not in present for uuid in self._seen_mdevs):
            return True
        configured = self.configured_types(inventory)
        for mdev in inventory.mdevs:
            if configured.get(mdev.parent) != mdev.type_id:
                return True
        for pf in inventory.pfs:
            current = [
                naming.sriov_type_id(v.current_type)
                for v in pf.vfs
                if v.current_type
            ]
            supported = [t.type_id for t in pf.known_types()]
            type_cfg = self.config.type_for_parent(
                pf.keys, tuple(dict.fromkeys([*supported, *current]))
            )
            if any(type_cfg is None or t != type_cfg.type_id for t in current):
                return True
        serving = {
            naming.provider_name(nodename, device)
            for device in (
                *configured,
                *(pf.name for pf in inventory.pfs),
            )
        }
        return any(name not in serving for name in mine)

    def _fingerprint(
        self,
        tree: Any,
        nodename: str,
        inventory: HostInventory,
        placed: list[_Placed],
        claims: tuple[tuple[str, str, str], ...],
    ) -> tuple[Any, ...]:
        """What a pass depended on and what it left in the tree (each
        provider by uuid: Nova's tree finds a child of the root by its
        uuid at once, by its name only by walking the tree)."""
        written = {p.uuid: (p.inventory, p.traits) for p in placed}
        return (
            nodename,
            inventory,
            self.config,
            claims,
            written,
            set(tree.get_provider_uuids(nodename)),
        )

    def _unchanged(
        self,
        tree: Any,
        nodename: str,
        inventory: HostInventory,
        claims: tuple[tuple[str, str, str], ...],
    ) -> bool:
        """Nothing a pass depends on changed since the last one, and the
        tree still holds what it wrote: the pass would change nothing
        (its cost is then independent of the number of mdevs and
        guests)."""
        if (
            self._written is None
            or self.unschedulable
            or self._traits_on_disk is not None
        ):
            return False
        last_node, last_inventory, config, last_claims, written, uuids = (
            self._written
        )
        if (
            last_node != nodename
            or last_inventory is not inventory
            or config is not self.config
            or last_claims != claims
        ):
            return False
        if set(tree.get_provider_uuids(nodename)) != uuids:
            return False  # a provider came or went under the node
        try:
            return not any(
                tree.has_inventory_changed(uuid, inv)
                or tree.have_traits_changed(uuid, traits)
                for uuid, (inv, traits) in written.items()
            )
        except ValueError:  # a provider of ours is gone (both trees say so)
            return False

    def configured_types(self, inventory: HostInventory) -> dict[str, str]:
        """Parent name -> the type the configuration gives it."""
        configured = {}
        for parent in inventory.parents:
            type_cfg = self.config.type_for_parent(
                parent.keys, parent.type_ids
            )
            if type_cfg is not None:
                configured[parent.name] = type_cfg.type_id
        return configured

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
        wanted, any_parent = self._wanted(allocations)
        return self.binder.bind(instance_uuid, wanted, any_parent=any_parent)

    def _wanted(
        self, allocations: Mapping[str, Any]
    ) -> tuple[list[tuple[str, str, int]], bool]:
        """(device, type, units) for the allocations, and whether some
        parents were picked by room. Units on a compute node's own
        provider (the layout before a reshape, e.g. an instance spawned
        while an upgrade is half done) go to parents whose configured
        type is of that class, free mdevs first."""
        classes = self.managed_classes()
        ours = {
            rp: a for rp, a in allocations.items() if rp not in self._roots
        }
        wanted = self.binder.wanted(ours, classes)
        on_root: Counter[str] = Counter()
        for rp_uuid in set(allocations) & self._roots:
            resources = allocations[rp_uuid].get("resources", {})
            for rc, amount in resources.items():
                if rc in classes:
                    on_root[rc] += int(amount)
        if on_root:
            inventory = self.discover()
            configured = self.configured_types(inventory)
            for rc, amount in sorted(on_root.items()):
                candidates = {
                    parent: type_id
                    for parent, type_id in configured.items()
                    if (cfg := self.config.get(type_id)) is not None
                    and cfg.resource_class == rc
                }
                wanted.extend(self.binder.spread(rc, amount, candidates))
        return wanted, bool(on_root)

    def guest_defined(self, instance_uuid: str) -> list[str]:
        """The caller defined (or redefined) the instance's guest: re-read
        that one domain, so its devices count as in use and its spawn
        claims end. Returns the device ids whose claims ended."""
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
        self._recover_guest(instance_uuid)
        return self.binder.hold(instance_uuid)

    def mdev_types(self, uuids: Iterable[str]) -> dict[str, str]:
        """mdev uuid -> its type, for those known (a gone mdev a guest
        still names included). No host call."""
        wanted = list(uuids)
        with self._lock:
            found = {
                u: self._seen_mdevs[u][1]
                for u in wanted
                if u in self._seen_mdevs
            }
        found.update(self.binder.mdev_types(wanted))
        return found

    def vf_devices(self) -> set[str]:
        """PCI addresses of the VFs of NVIDIA SR-IOV vGPU cards: the PCI
        devices this library gives to guests (any other PCI device a
        guest has is the caller's). No host call."""
        return self.binder.vf_addresses()

    def domain_event(self, instance_uuid: str, defined: bool) -> None:
        """libvirt reported the guest defined (or redefined) or undefined,
        by anyone: pass it from the caller's own lifecycle callback (a
        compute service has one; else ``LibvirtHost.watch_domain_events``
        registers one). The next bind, query or discovery re-reads that
        guest alone. Safe from libvirt's event thread: no lock, no call,
        no logging."""
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
        inventory = self.discover()
        for name, type_id in sorted(self.configured_types(inventory).items()):
            found = inventory.parent(name)
            if found is None or (parent is not None and name != parent):
                continue
            mdev_type = found.type(type_id)
            if mdev_type is None or mdev_type.available < 1:
                continue
            mdev = self.host.create_mdev(
                found, type_id, uuid or str(uuidlib.uuid4())
            )
            self.discover()
            return mdev.uuid
        return None

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
        cleared."""
        return self.binder.release(instance_uuid)

    def init_host(
        self, instances: list[str] | None = None
    ) -> dict[str, list[str]]:
        """At service start: rebuild who uses what from every guest and the
        library's claims, recreate mdevs guests need that are gone (same
        uuid, same parent), start defined-only ones, re-apply VF types.
        ``instances``: the instances the service has on this host (the
        bind claims of any other, made before a crash and never ended, are
        dropped; claims for incoming live migrations stay)."""
        moved = self.binder.repair_records()
        inventory = self.discover(rescan_guests=True)
        done = self.binder.recover(inventory, self._seen_mdevs, instances)
        done["records_moved_aside"] = moved
        self.discover()
        return done

    def restore_vf_types(self, failed: list[str] | None = None) -> list[str]:
        """``vgpu-driver restore``: re-apply recorded VF vGPU types, going
        on past a VF that refuses (listed in ``failed``)."""
        return self.binder.restore_vf_types(self.discover(), failed)

    # resize and cold migration
    def finish_migration(
        self, instance_uuid: str, allocations: Mapping[str, Any]
    ) -> list[BoundDevice]:
        """On the destination: bind from the new allocations."""
        return self.allocate_mdevs(instance_uuid, allocations)

    def finish_revert_migration(self, instance_uuid: str) -> list[BoundDevice]:
        """On the source: the guest's own devices again (recreated if they
        went away meanwhile)."""
        return self._recover_guest(instance_uuid)

    def _recover_guest(self, instance_uuid: str) -> list[BoundDevice]:
        inventory = self.discover()
        guest = next(
            (g for g in inventory.guests if g.uuid == instance_uuid), None
        )
        if guest is None:
            return []
        self.binder.recover(
            HostInventory(
                inventory.parents, inventory.mdevs, inventory.pfs, (guest,)
            ),
            self._seen_mdevs,
        )
        inventory = self.discover()
        present = {m.uuid: m for m in inventory.mdevs}
        devices = [
            BoundDevice("mdev", u, present[u].parent, present[u].type_id)
            for u in guest.mdevs
            if u in present
        ]
        return devices

    def confirm_migration(self, instance_uuid: str) -> list[str]:
        """On the source, once the move is confirmed: release."""
        return self.release_mdevs(instance_uuid)

    # live migration (destination side)
    def claim_for_live_migration(
        self,
        instance_uuid: str,
        source_mdevs: Mapping[str, str],
        allocations: Mapping[str, Any],
    ) -> dict[str, str]:
        """Claim destination devices of the same types as the source's
        mdevs (``{source uuid: type id}``) and return ``{source uuid:
        destination uuid}`` for the guest's XML. The claim is on disk: it
        survives a restart of the service until success or rollback."""
        wanted, any_parent = self._wanted(allocations)
        offered = {type_id for _, type_id, _ in wanted}
        for source, type_id in sorted(source_mdevs.items()):
            if type_id not in offered:
                raise MigrationTypeMismatch(
                    instance=instance_uuid,
                    source=source,
                    type_id=type_id,
                    offered=", ".join(sorted(offered)) or "no device",
                )
        bound = self.binder.bind(
            instance_uuid, wanted, MIGRATION, any_parent=any_parent
        )
        pool = {d.type_id: [] for d in bound}  # type: dict[str, list[str]]
        for device in bound:
            pool[device.type_id].append(device.id)
        mapping = {}
        for source, type_id in sorted(source_mdevs.items()):
            if not pool.get(type_id):
                self.binder.release(instance_uuid)
                raise DeviceCapacityExhausted(
                    count=1, type_id=type_id, parent="the destination"
                )
            mapping[source] = pool[type_id].pop(0)
        return mapping

    def live_migration_succeeded(self, instance_uuid: str) -> None:
        self.binder.end_migration(instance_uuid)

    def rollback_live_migration_at_destination(
        self, instance_uuid: str
    ) -> list[str]:
        return self.binder.release(instance_uuid)

    # -- reshape (upgrades from older layouts) --------------------------

    def _old_layout(
        self,
        under: list[Any],
        root: Any,
        nodename: str,
        inventory: HostInventory,
    ) -> list[str]:
        """[root-has-VGPU flag ("" or root name), per-VF provider names...]
        or [] when the tree already has this library's layout."""
        classes = self.managed_classes()
        on_root = nodename if set(root.inventory) & classes else ""
        vf_names = {
            f"{nodename}_{vf.address}" for pf in inventory.pfs for vf in pf.vfs
        }
        per_vf = sorted(
            p.name
            for p in under
            if p.name in vf_names and set(p.inventory) & classes
        )
        if not on_root and not per_vf:
            return []
        return [on_root, *per_vf]

    def _plan_moves(
        self,
        tree: Any,
        old: list[str],
        allocations: Allocations,
        inventory: HostInventory,
    ) -> dict[str, dict[str, Counter[str]]]:
        """consumer -> device name -> resource class -> units to move,
        found from the guests' devices. Raises ReshapeFailed, having
        changed nothing, when a consumer cannot be matched."""
        classes = self.managed_classes()
        old_uuids = {tree.data(name).uuid for name in old if name}
        guests = {g.uuid: g for g in inventory.guests}
        vf_pf = {vf.address: pf.name for pf in inventory.pfs for vf in pf.vfs}
        moves: dict[str, dict[str, Counter[str]]] = {}
        for consumer, record in allocations.items():
            wanted: Counter[str] = Counter()
            for rp_uuid, alloc in record.get("allocations", {}).items():
                if rp_uuid in old_uuids:
                    for rc, amount in alloc.get("resources", {}).items():
                        if rc in classes:
                            wanted[rc] += int(amount)
            if not wanted:
                continue
            guest = guests.get(consumer)
            if guest is None:
                raise ReshapeFailed(
                    nodename=tree.data(old_uuids.pop()).name,
                    reason=f"consumer {consumer} holds "
                    f"{dict(wanted)} but no guest of that uuid is on the "
                    "host, so its devices cannot be placed on a pGPU. "
                    "Delete or heal that allocation, then restart",
                )
            devices: list[tuple[str, str]] = []
            for uuid in guest.mdevs:
                if uuid in self._seen_mdevs:
                    parent, type_id = self._seen_mdevs[uuid]
                    type_cfg = self.config.get(type_id)
                    rc = type_cfg.resource_class if type_cfg else str(orc.VGPU)
                    devices.append((parent, rc))
            for address in guest.pci_devices:
                if address in vf_pf:
                    devices.append((vf_pf[address], str(orc.VGPU)))
            placed: dict[str, Counter[str]] = {}
            for rc, amount in wanted.items():
                matching = [d for d, c in devices if c == rc]
                if len(matching) != amount:
                    raise ReshapeFailed(
                        nodename=guest.name,
                        reason=f"consumer {consumer} holds {amount} {rc} but "
                        f"its guest {guest.name} has {len(matching)} such "
                        "device(s) on the host",
                    )
                for device in matching:
                    placed.setdefault(device, Counter())[rc] += 1
            moves[consumer] = placed
        return moves

    def _move_allocations(
        self,
        tree: Any,
        nodename: str,
        moves: dict[str, dict[str, Counter[str]]],
        allocations: Allocations,
    ) -> None:
        """Rewrite ``allocations`` in place (Nova's contract): the moved
        units leave the old providers and land on the per-pGPU ones."""
        classes = self.managed_classes()
        for consumer, placed in moves.items():
            record = allocations[consumer]
            current = record["allocations"]
            for rp_uuid in list(current):
                resources = current[rp_uuid].get("resources", {})
                for rc in list(resources):
                    if rc in classes:
                        del resources[rc]
                if not resources:
                    del current[rp_uuid]
            for device, counts in placed.items():
                rp = tree.data(naming.provider_name(nodename, device)).uuid
                entry = current.setdefault(rp, {"resources": {}})
                for rc, amount in counts.items():
                    entry["resources"][rc] = (
                        entry["resources"].get(rc, 0) + amount
                    )
            LOG.info(
                "Reshape moves the devices of consumer %s to %s",
                consumer,
                ", ".join(sorted(placed)),
            )

    def confirm_flushed(self) -> None:
        """The tree last updated is now in Placement: from here on this
        library owns exactly the traits it planned."""
        with self._lock:
            if not self._planned_traits:
                return
            before = dict(self._written_traits)
            self._written_traits.update(self._planned_traits)
            self._planned_traits = {}
            if self._traits_on_disk is not None:
                before = self._traits_on_disk
            self._save_traits_or_retry(before)

    def managed_classes(self) -> set[str]:
        """Resource classes of the devices this library manages."""
        return {str(orc.VGPU), *self.config.resource_classes()}

    def _device_providers(
        self, under: list[Any], root_uuid: str, nodename: str
    ) -> dict[str, Any]:
        """The root's children that are device providers of this library
        (or of Nova's vGPU code, which named them the same way)."""
        classes = self.managed_classes()
        found = {}
        for data in under:
            if data.parent_uuid != root_uuid:
                continue
            if not data.name.startswith(f"{nodename}_"):
                continue
            if set(data.inventory) <= classes:
                found[data.name] = data
        return found

    def _configured_traits(self) -> _ConfiguredTraits:
        """The traits the configuration names (its options read once per
        pass, not once per provider)."""
        owner = self.conf.devices.owner_trait
        names = {owner}
        for type_cfg in self.config.types:
            names.add(naming.type_trait(type_cfg.type_id))
            names.update(type_cfg.traits)
        return _ConfiguredTraits(owner, frozenset(names))

    def _managed_traits(
        self,
        plan: ProviderPlan,
        inventory: HostInventory,
        configured: _ConfiguredTraits,
    ) -> set[str]:
        """Traits this library may add or remove; any other trait on the
        provider (an operator's) is left alone."""
        managed = set(configured.names)
        parent = inventory.parent(plan.device)
        if parent is not None:
            managed.update(naming.type_trait(t) for t in parent.type_ids)
        if plan.type_id:
            managed.add(naming.type_trait(plan.type_id))
        managed.update(self._written_traits.get(plan.name, ()))
        return managed

    def _write(
        self,
        tree: Any,
        root_uuid: str,
        plan: ProviderPlan,
        inventory: HostInventory,
        configured: _ConfiguredTraits,
        data: Any | None,
    ) -> _Placed:
        """Write one plan; returns what its provider holds now. ``data``:
        its provider as read at the start of the pass, if it is one of
        ours (found by name otherwise)."""
        current: set[str]
        if data is None and tree.exists(plan.name):
            data = tree.data(plan.name)
        if data is not None:
            uuid, current = str(data.uuid), set(data.traits)
        else:
            uuid = naming.child_provider_uuid(root_uuid, plan.name)
            current = set()
            tree.new_child(plan.name, root_uuid, uuid=uuid)
            LOG.info(
                "New provider %s: %s x%d of type %s",
                plan.name,
                plan.resource_class,
                plan.total,
                plan.type_id,
            )
        managed = self._managed_traits(plan, inventory, configured)
        kept = {
            t for t in current - managed if not trait.is_capability_trait(t)
        }
        placed = _Placed(uuid, plan.inventory(), frozenset(kept | plan.traits))
        # by uuid: Nova's tree finds a name by walking the tree. (The tree
        # gets its own inventory: what a pass remembers is not shared.)
        tree.update_inventory(uuid, plan.inventory())
        tree.update_traits(uuid, placed.traits)
        # Until the caller confirms the tree reached Placement, we own both
        # what we wrote before and what we write now.
        previous = self._written_traits.get(plan.name, frozenset())
        self._written_traits[plan.name] = previous | plan.traits
        self._planned_traits[plan.name] = plan.traits
        if self._reasons.get(plan.name) != plan.reason:
            if plan.reason:
                LOG.warning(
                    "Provider %s takes no new guests (reserved %d of %d): %s",
                    plan.name,
                    plan.reserved,
                    plan.total,
                    plan.reason,
                )
            elif plan.name in self._reasons:
                LOG.info("Provider %s takes guests again", plan.name)
            self._reasons[plan.name] = plan.reason
        return placed


def _providers_under(tree: Any, root_uuid: str) -> list[Any]:
    """Every provider of the root's tree, each read once, parents first."""
    return [tree.data(uuid) for uuid in tree.get_provider_uuids(root_uuid)]


class _Placed(NamedTuple):
    """A provider as a pass left it."""

    uuid: str
    inventory: dict[str, dict[str, int | float]]
    traits: frozenset[str]  # the plan's and the operator's


class _ConfiguredTraits(NamedTuple):
    owner: str  # [devices] owner_trait
    names: frozenset[str]  # it, the enabled types' and their extra traits


class _EnabledTypes:
    """The ids of the enabled types, as the host asks for them."""

    def __init__(self, config: DeviceConfig) -> None:
        self.config = config

    def __call__(self) -> frozenset[str]:
        return frozenset(t.type_id for t in self.config.types)


def sync_placement(driver: VgpuDriver, syncer: Any) -> Any:
    """One sync pass: Placement's tree, updated from the host, flushed."""
    # from where the last report stopped: the first pass of a process
    # also counts the client's version discovery (GET /)
    before = syncer.reported_requests
    tree = syncer.read_tree()
    try:
        driver.update_provider_tree(tree, syncer.nodename)
    except ReshapeNeeded:
        # Nova's handshake: again, with the allocations, then one atomic
        # POST /reshaper; then a normal pass for traits and removals.
        allocations = syncer.allocations_for_tree()
        tree = syncer.read_tree()
        driver.update_provider_tree(
            tree, syncer.nodename, allocations=allocations
        )
        syncer.reshape(tree, allocations)
        tree = syncer.read_tree()
        driver.update_provider_tree(tree, syncer.nodename)
    report = syncer.flush(tree)
    driver.confirm_flushed()
    report.requests = syncer.client.request_count - before
    syncer.reported_requests = syncer.client.request_count
    return report


def _by_provider_name(
    tree: Any, allocations: Allocations | None
) -> dict[str, dict[str, int]]:
    """Nova's allocations, summed per provider name and resource class."""
    used: dict[str, Counter[str]] = {}
    for consumer in (allocations or {}).values():
        for rp_uuid, alloc in consumer.get("allocations", {}).items():
            if not tree.exists(rp_uuid):
                continue
            name = tree.data(rp_uuid).name
            for rc, amount in alloc.get("resources", {}).items():
                used.setdefault(name, Counter())[rc] += int(amount)
    return {name: dict(counts) for name, counts in used.items()}


def _is_string_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


_validate_traits = validate_str_map(_is_string_list, "a list of traits")
_validate_seen = validate_str_map(
    lambda v: _is_string_list(v) and len(v) == 2, "a [parent, type] pair"
)


def _as_seen(record: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    return {u: (str(w[0]), str(w[1])) for u, w in record.items()}


def _as_traits(record: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    return {n: frozenset(t) for n, t in record.items()}
