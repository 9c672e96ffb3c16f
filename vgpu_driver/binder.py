"""Binding Placement allocations to devices, through an instance's life.

Claims: a bind records, before anything is created, which devices it
gives to which instance (persisted atomically under ``[devices]
state_path``). A claimed device is never given to anyone else, between
the bind and the guest being defined, across a restart of the service,
and for the length of a live migration, until it is released or (for a
spawn) seen in the guest's domain.

Several processes may bind on one host (two driver objects, a compute
service and an operator's tool), so choosing and claiming happen under
the records' lock, which holds across processes, after re-reading the
claims from disk; creating happens outside it, on devices already
claimed. Every write gives the claims record a new random ``epoch``: a
binder that finds an epoch it did not write knows another process
changed the host (created an mdev, ended a claim because its guest now
has the device), so it re-reads the host, guests included, before it
chooses anything.

Failure undoes the bind: mdevs it created are removed, VF types it set
are cleared, its claims are dropped. A parent whose device fails (not one
that is merely full) is marked unschedulable, so its provider is
reserved, until an operation on it works again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from oslo_log import log as logging

from vgpu_driver.exception import (
    ClaimConflict,
    DeviceCapacityExhausted,
    DeviceOperationFailed,
    HostUnreachable,
    ProviderUnknown,
    VgpuDriverError,
)
from vgpu_driver.host.base import Host
from vgpu_driver.model import naming
from vgpu_driver.model.binding import (
    BoundDevice,
    ParentView,
    PfView,
    choose,
)
from vgpu_driver.model.device import Guest, HostInventory, Mdev, Parent
from vgpu_driver.model.naming import sriov_type_number
from vgpu_driver.records.store import (
    StateRecordCorrupt,
    StateStore,
    StateStoreError,
    expect,
    validate_str_map,
)

LOG = logging.getLogger(__name__)
CLAIMS_RECORD = "claims"
VF_TYPES_RECORD = "vf-types"
SPAWN, MIGRATION = "spawn", "migration"
# a device being handed back to the host (its VF type cleared, the mdev
# removed): nobody takes it until that is done
RELEASE = "release"


@dataclasses.dataclass(frozen=True)
class Target:
    """What a provider stands for."""

    device: str
    type_id: str
    resource_class: str


class DeviceBinder:
    def __init__(
        self,
        host: Host,
        state: StateStore | None,
        *,
        remove_unused: bool = False,
    ) -> None:
        self.host = host
        self.state = state
        self.remove_unused = remove_unused
        # parent name -> when it failed (time.monotonic)
        self.unschedulable: dict[str, float] = {}
        self._lock = threading.RLock()
        # the records as last read under the lock (refreshed by every
        # operation, so never trusted across operations)
        self._claims: dict[str, dict[str, Any]] = {}
        self._vf_types: dict[str, int] = {}
        self._epoch: int | None = None  # the claims epoch we last saw
        self._stale = False  # another process wrote since we last saw
        self._targets: dict[str, Target] = {}
        self._parents: dict[str, ParentView] = {}
        self._parent_objects: dict[str, Parent] = {}
        self._pfs: dict[str, PfView] = {}
        self._mdevs: dict[str, Mdev] = {}
        self._used: dict[str, str] = {}  # device id -> guest uuid
        self._has_view = False  # a reading with guests was taken

    # -- records -------------------------------------------------------

    @contextlib.contextmanager
    def _records(
        self, *, fresh_view: bool = False, view: bool = True
    ) -> Iterator[None]:
        """Hold the thread lock and the records' cross-process lock, with
        the claims and VF types freshly read from disk. ``fresh_view``:
        also re-read the host if another process changed the records (do
        it before choosing or removing devices). ``view``: the operation
        reads the view of the host, which is built now (guests included)
        if no reading with guests was taken yet, and brought up to date
        with the guests domain events reported since."""
        with self._lock:
            if self.state is None:
                if view and not self._has_view:
                    self._rebuild_view("the first operation needs it")
                elif view and self.host.guests_changed():
                    self._apply_guest_changes()
                yield
                return
            with self.state.locked():
                claims = self.state.load(CLAIMS_RECORD, {}, _validate_claims)
                epoch, self._claims = _claims_of(claims)
                self._vf_types = dict(
                    self.state.load(VF_TYPES_RECORD, {}, _validate_vf_types)
                )
                if self._epoch is not None and epoch != self._epoch:
                    self._stale = True
                self._epoch = epoch
                if fresh_view and self._stale:
                    self._rebuild_view("another process changed the claims")
                elif view and not self._has_view:
                    self._rebuild_view("the first operation needs it")
                elif view and self.host.guests_changed():
                    self._apply_guest_changes()
                yield

    def _save(
        self,
        claims: dict[str, dict[str, Any]] | None = None,
        vf_types: dict[str, int] | None = None,
    ) -> None:
        """Write both records (inside :meth:`_records`): ours as they are,
        or ``claims`` and ``vf_types``, which become ours once written (a
        write that fails leaves what we hold as it was on disk)."""
        claims = self._claims if claims is None else claims
        vf_types = self._vf_types if vf_types is None else vf_types
        if self.state is not None:
            # a fresh random number, not a counter: after a record was
            # moved aside, a reader must never see its old value again
            epoch = secrets.randbits(62) + 1
            self.state.save(CLAIMS_RECORD, {"epoch": epoch, "claims": claims})
            self._epoch = epoch
            self._claims = claims
            self.state.save(VF_TYPES_RECORD, vf_types)
        self._claims, self._vf_types = claims, vf_types

    def view_is_stale(self) -> bool:
        """Has another process changed the records since we last read
        them (so our reading of the host may be out of date)?"""
        if self.state is None:
            return False
        with self._records(view=False):
            return self._stale

    def repair_records(self) -> list[str]:
        """At service start: move unreadable records aside (they are
        kept) so they can be rebuilt from the host. Returns their new
        paths."""
        moved: list[str] = []
        if self.state is None:
            return moved
        with self._lock, self.state.locked():
            for key, validate in (
                (CLAIMS_RECORD, _validate_claims),
                (VF_TYPES_RECORD, _validate_vf_types),
            ):
                try:
                    self.state.load(key, {}, validate)
                except StateRecordCorrupt:
                    where = self.state.quarantine(key)
                    if where is not None:
                        moved.append(str(where))
            if moved:
                self._stale = True
        return moved

    def claims(self) -> dict[str, dict[str, Any]]:
        with self._records():
            return {k: dict(v) for k, v in self._claims.items()}

    @property
    def vf_types(self) -> dict[str, int]:
        with self._records():
            return dict(self._vf_types)

    def claimed_devices(self) -> list[tuple[str, str, str]]:
        """(device id, parent, type id) of every claim, as on disk now."""
        with self._records(view=False):
            return [
                (device_id, c["parent"], c["type_id"])
                for device_id, c in sorted(self._claims.items())
            ]

    # -- the view of the host ------------------------------------------

    def refresh(
        self, inventory: HostInventory, targets: Mapping[str, Target]
    ) -> None:
        """Take a new reading of the host and of the providers."""
        with self._records(view=False):
            self._targets = dict(targets)
            self._take_view(inventory)

    def set_targets(self, targets: Mapping[str, Target]) -> None:
        """What each provider stands for (after the tree is updated)."""
        with self._lock:
            self._targets = dict(targets)

    def _rebuild_view(self, why: str) -> tuple[Guest, ...]:
        """Read the host again, guests too (inside :meth:`_records`).
        Returns the guests read."""
        LOG.info("Reading the host and every guest: %s", why)
        inventory = self.host.discover(rescan_guests=True)
        self._take_view(inventory)
        return inventory.guests

    def _take_view(self, inventory: HostInventory) -> None:
        self._has_view = True
        changed = False
        self._stale = False
        self._used = {
            **inventory.mdev_users(),
            **inventory.pci_users(),
        }
        # a spawn claim ends when the guest's domain has the device
        for device_id, claim in list(self._claims.items()):
            if (
                claim["purpose"] == SPAWN
                and self._used.get(device_id) == claim["instance"]
            ):
                del self._claims[device_id]
                changed = True
        self._mdevs = {m.uuid: m for m in inventory.mdevs}
        self._parent_objects = {p.name: p for p in inventory.parents}
        free: dict[str, dict[str, list[str]]] = {
            p.name: {} for p in inventory.parents
        }
        for mdev in inventory.mdevs:
            if mdev.uuid not in self._used and mdev.parent in free:
                free[mdev.parent].setdefault(mdev.type_id, []).append(
                    mdev.uuid
                )
        self._parents = {
            parent.name: ParentView(
                parent.name,
                {t.id: t.available for t in parent.types},
                free[parent.name],
            )
            for parent in inventory.parents
        }
        # every VF a guest uses keeps its type across reboots, even one
        # this library did not set
        for pf in inventory.pfs:
            for vf in pf.vfs:
                if (
                    vf.current_type
                    and vf.address in self._used
                    and vf.address not in self._vf_types
                ):
                    self._vf_types[vf.address] = vf.current_type
                    changed = True
        if changed:
            # ending claims the domains now hold and recording VF types in
            # use can wait for a later reading: never stop one for it
            try:
                self._save()
            except StateStoreError as exc:
                LOG.warning("Could not update the claims now: %s", exc)
        self._pfs = {
            pf.name: PfView(
                pf.name,
                {vf.address: vf.current_type for vf in pf.vfs},
                {vf.address: {t.id for t in vf.creatable} for vf in pf.vfs},
            )
            for pf in inventory.pfs
        }

    def guest_defined(self, guest: Guest) -> list[str]:
        """The caller defined ``guest``: its spawn claims on devices the
        domain now has end (the domain itself keeps them from now on).
        Returns the device ids whose claims ended."""
        with self._records(fresh_view=True):
            ended = self._note_guest(guest)
            if ended:
                self._save()
        return ended

    def _note_guest(self, guest: Guest) -> list[str]:
        """The guest as defined now: its devices are in use, what it no
        longer has is handed back, its spawn claims on what it has end
        (returned; inside :meth:`_records`, the caller saves)."""
        has = {*guest.mdevs, *guest.pci_devices}
        self._let_go(guest.uuid, keep=has)
        for device_id in has:
            self._used[device_id] = guest.uuid
            self._take_off_free_list(device_id)
        ended = [
            device_id
            for device_id, claim in self._claims.items()
            if claim["purpose"] == SPAWN
            and claim["instance"] == guest.uuid
            and self._used.get(device_id) == guest.uuid
        ]
        for device_id in ended:
            del self._claims[device_id]
        return ended

    def _apply_guest_changes(self) -> None:
        """Guests someone else defined or undefined (domain events): only
        those domains are read, and the view follows (inside
        :meth:`_records`)."""
        ended = []
        for uuid, guest in self.host.take_guest_changes():
            if guest is None:
                self._let_go(uuid, keep=set())
            else:
                ended += self._note_guest(guest)
        if ended:
            self._save()

    def guest_undefined(self, instance: str) -> list[str]:
        """The instance's guest is gone: the devices it had are free again,
        except those still claimed for it (e.g. held across a hard
        reboot). Returns the device ids freed."""
        with self._records():
            freed = self._let_go(instance, keep=set())
        self.host.forget_guest(instance)
        return freed

    def _let_go(self, instance: str, keep: set[str]) -> list[str]:
        """Hand back what the instance's guest had and no longer has
        (inside :meth:`_records`)."""
        freed = []
        for device_id, guest in list(self._used.items()):
            if guest != instance or device_id in keep:
                continue
            del self._used[device_id]
            if device_id in self._claims:
                continue
            device = self._device(device_id, None)
            if device is not None:
                try:
                    self._hand_back(device)
                except VgpuDriverError as exc:
                    LOG.error("Freeing %s: %s", device_id, exc)
                freed.append(device_id)
        return freed

    def hold(self, instance: str) -> list[str]:
        """Claim the devices the instance's guest has, so nothing else
        takes them while the caller undefines and defines it again (a hard
        reboot). The claims end when the guest is defined with them."""
        with self._records():
            held = []
            for device_id, guest in sorted(self._used.items()):
                if guest != instance or device_id in self._claims:
                    continue
                device = self._device(device_id, None)
                if device is not None:
                    self._claims[device_id] = {
                        **device.record(),
                        "instance": instance,
                        "purpose": SPAWN,
                    }
                    held.append(device_id)
            if held:
                self._save()
        return held

    def _take_off_free_list(self, device_id: str) -> None:
        """An mdev is no longer free (a guest has it, or it is gone)."""
        mdev = self._mdevs.get(device_id)
        view = self._parents.get(mdev.parent) if mdev else None
        if mdev is not None and view is not None:
            free = view.free.get(mdev.type_id, [])
            if device_id in free:
                free.remove(device_id)

    def instance_devices(self) -> dict[str, dict[str, list[str]]]:
        """instance -> {"in_use": device ids its guest has, "claimed":
        device ids claimed for it (spawns and incoming migrations)}."""
        found: dict[str, dict[str, list[str]]] = {}
        with self._records():
            for device_id, guest in sorted(self._used.items()):
                entry = found.setdefault(guest, {"in_use": [], "claimed": []})
                entry["in_use"].append(device_id)
            for device_id, claim in sorted(self._claims.items()):
                entry = found.setdefault(
                    claim["instance"], {"in_use": [], "claimed": []}
                )
                entry["claimed"].append(device_id)
        return found

    def vf_addresses(self) -> set[str]:
        """PCI addresses of the VFs of NVIDIA SR-IOV vGPU cards."""
        with self._records():
            return {vf for pf in self._pfs.values() for vf in pf.vfs}

    def mdev_types(self, uuids: Iterable[str]) -> dict[str, str]:
        """mdev uuid -> type, from the current view (mdevs made since
        the last discovery included)."""
        with self._records():
            return {
                u: self._mdevs[u].type_id for u in uuids if u in self._mdevs
            }

    def free_mdevs(
        self, parent: str | None = None, types: Iterable[str] | None = None
    ) -> set[str]:
        wanted = None if types is None else set(types)
        with self._records():
            busy = self._busy()
            return {
                uuid
                for view in self._parents.values()
                if parent is None or view.name == parent
                for type_id, uuids in view.free.items()
                if wanted is None or type_id in wanted
                for uuid in uuids
                if uuid not in busy
            }

    def _busy(self) -> set[str]:
        return set(self._used) | set(self._claims)

    # -- binding -------------------------------------------------------

    def wanted(
        self, allocations: Mapping[str, Any], classes: Iterable[str]
    ) -> list[tuple[str, str, int]]:
        """(device, type, units) for the allocations this library
        manages; other resource classes are ignored."""
        managed = set(classes)
        wanted = []
        for rp_uuid, alloc in allocations.items():
            for rc, amount in alloc.get("resources", {}).items():
                if rc not in managed:
                    continue
                target = self._targets.get(rp_uuid)
                if target is None or target.resource_class != rc:
                    raise ProviderUnknown(rp_uuid=rp_uuid)
                wanted.append((target.device, target.type_id, int(amount)))
        return wanted

    def spread(
        self, resource_class: str, units: int, candidates: Mapping[str, str]
    ) -> list[tuple[str, str, int]]:
        """(device, type, 1) for ``units`` not tied to a device:
        ``candidates`` maps parent -> its configured type. Parents with a
        free mdev first, then the one with the most room."""
        with self._records():
            busy = self._busy()
            room: dict[str, list[int]] = {}
            for parent, type_id in candidates.items():
                view = self._parents.get(parent)
                if view is None:
                    continue
                free = [u for u in view.free.get(type_id, []) if u not in busy]
                room[parent] = [len(free), view.available.get(type_id, 0)]
        wanted = []
        for _ in range(units):
            usable = [p for p in sorted(room) if sum(room[p])]
            if not usable:
                raise DeviceCapacityExhausted(
                    count=units,
                    type_id=resource_class,
                    parent=", ".join(sorted(candidates)) or "no parent",
                )
            best = max(usable, key=lambda p: (room[p][0] > 0, sum(room[p])))
            room[best][0 if room[best][0] else 1] -= 1
            wanted.append((best, candidates[best], 1))
        return wanted

    def bind(
        self,
        instance: str,
        wanted: list[tuple[str, str, int]],
        purpose: str = SPAWN,
        *,
        any_parent: bool = False,
    ) -> list[BoundDevice]:
        """Claim, then make, the devices ``wanted`` asks for. The same
        bind again returns what it claimed; a bind of an instance that
        holds claims for other devices than ``wanted`` is refused
        (ClaimConflict). ``any_parent``: the parents of ``wanted`` were
        picked by room (units allocated on the compute node's own
        provider), so only the types are compared."""
        with self._records(fresh_view=True):
            mine = [
                BoundDevice(**{k: c[k] for k in _DEVICE_FIELDS})
                for c in self._claims.values()
                if c["instance"] == instance and c["purpose"] == purpose
            ]
            if mine:
                _check_same_bind(instance, mine, wanted, any_parent)
                return mine  # the same bind again: idempotent
            chosen = self._choose_existing(wanted)
            for device in chosen:
                self._claim(instance, device, purpose)
            self._save()
        done: list[BoundDevice] = []
        try:
            self._make(chosen, done)
        except VgpuDriverError as exc:
            self._undo(instance, chosen, done, exc)
            if _is_exhaustion(exc) and not isinstance(
                exc, DeviceCapacityExhausted
            ):
                first = next(d for d in chosen if d not in done and d.created)
                raise DeviceCapacityExhausted(
                    count=1, type_id=first.type_id, parent=first.parent
                ) from exc
            raise
        with self._lock:
            for device in done:
                self.unschedulable.pop(device.parent, None)
        LOG.info(
            "Bound %s to instance %s: %s",
            ", ".join(f"{d.kind} {d.id}" for d in chosen) or "nothing",
            instance,
            "; ".join(
                f"{d.id} on {d.parent} ({'new' if d.created else 'reused'})"
                for d in chosen
            ),
        )
        return chosen

    def _choose_existing(
        self, wanted: list[tuple[str, str, int]]
    ) -> list[BoundDevice]:
        """Choose; a free mdev that vanished behind our back (one lookup
        each) is dropped from the view and the choice made again."""
        for _attempt in range(8):
            chosen = choose(wanted, self._parents, self._pfs, self._busy())
            gone = [
                d
                for d in chosen
                if d.kind == "mdev"
                and not d.created
                and not self.host.mdev_exists(self._mdevs[d.id])
            ]
            if not gone:
                return chosen
            for device in gone:
                LOG.warning("mdev %s vanished; not reusing it", device.id)
                self._parents[device.parent].free[device.type_id].remove(
                    device.id
                )
                self._mdevs.pop(device.id, None)
        raise DeviceCapacityExhausted(
            count=sum(n for _, _, n in wanted),
            type_id=",".join({t for _, t, _ in wanted}),
            parent=",".join({d for d, _, _ in wanted}),
        )

    def _claim(self, instance: str, device: BoundDevice, purpose: str) -> None:
        self._claims[device.id] = {
            **device.record(),
            "instance": instance,
            "purpose": purpose,
        }
        if device.kind == "vf":
            number = sriov_type_number(device.type_id)
            self._pfs[device.parent].vfs[device.id] = number
            self._vf_types[device.id] = number  # restored after a reboot
            return
        view = self._parents[device.parent]
        if device.created:
            view.available[device.type_id] -= 1
        else:
            view.free[device.type_id].remove(device.id)

    def _make(
        self, chosen: list[BoundDevice], done: list[BoundDevice]
    ) -> None:
        """Create what the bind needs, appending each device made to
        ``done`` as soon as it exists (so a failure can undo exactly it)."""
        for device in chosen:
            if device.kind == "vf" and device.created:
                number = sriov_type_number(device.type_id)
                self.host.set_vf_type(device.id, number)
                done.append(device)
            elif device.kind == "mdev" and device.created:
                parent = self._parent_objects[device.parent]
                mdev = self.host.create_mdev(parent, device.type_id, device.id)
                with self._lock:
                    self._mdevs[mdev.uuid] = mdev
                done.append(device)
            elif device.kind == "mdev":
                mdev = self._mdevs[device.id]
                if not mdev.active:
                    self.host.start_mdev(mdev)

    def _undo(
        self,
        instance: str,
        chosen: list[BoundDevice],
        done: list[BoundDevice],
        exc: VgpuDriverError,
    ) -> None:
        for device in done:
            try:
                self._unmake(device)
            except VgpuDriverError as cleanup:
                LOG.error("Could not undo %s: %s", device.id, cleanup)
        with self._records():
            for device in done:
                if device.kind == "vf":
                    self._vf_types.pop(device.id, None)
            for device in chosen:
                claim = self._claims.get(device.id)
                if claim and claim["instance"] == instance:
                    del self._claims[device.id]
                    self._return_to_view(device, made=device in done)
            failing = {d.parent for d in chosen if d.created and d not in done}
            # a full parent or a libvirtd restarting says nothing of the
            # device itself
            if not _is_exhaustion(exc) and not isinstance(
                exc, HostUnreachable
            ):
                for parent in failing:
                    if parent not in self.unschedulable:
                        LOG.error(
                            "Parent %s failed (%s); its provider takes no "
                            "new guests until it works again",
                            parent,
                            exc,
                        )
                    self.unschedulable[parent] = time.monotonic()
            self._save()
        LOG.warning(
            "Bind for instance %s failed and was undone: %s", instance, exc
        )

    def _unmake(self, device: BoundDevice) -> None:
        if device.kind == "vf":
            self.host.set_vf_type(device.id, 0)
        else:
            mdev = self._mdevs.get(device.id)
            if mdev is not None:
                self.host.remove_mdev(mdev)
                with self._lock:
                    self._mdevs.pop(device.id, None)

    def _return_to_view(self, device: BoundDevice, made: bool) -> None:
        """Give a device back to the view after its claim is dropped;
        ``made``: it was created and has since been removed."""
        if device.kind == "vf":
            pf = self._pfs.get(device.parent)
            if pf is not None and device.created:
                pf.vfs[device.id] = 0
            return
        view = self._parents.get(device.parent)
        if view is None:
            return
        if device.created and (made or device.id not in self._mdevs):
            view.available[device.type_id] = (
                view.available.get(device.type_id, 0) + 1
            )
        elif device.id in self._mdevs:
            view.free.setdefault(device.type_id, []).append(device.id)

    # -- release -------------------------------------------------------

    def release(
        self, instance: str, guest_devices: Iterable[str] = ()
    ) -> list[str]:
        """Drop an instance's claims and hand its devices back: mdevs stay
        for reuse (or are removed with ``remove_unused``), VF types are
        cleared. Returns the device ids released.

        Decided and recorded first: the claims go, and a device that must
        change on the host (a VF's type cleared, an mdev removed) gets a
        release claim in their place, so no bind takes it while it
        changes. Only then is the host changed, outside the lock, and the
        release claims dropped. A write that fails (a full disk) leaves
        the host untouched and the claims as they were; a release cut
        short is finished by the next release of the instance or at the
        next start (:meth:`recover`)."""
        with self._records(fresh_view=True):
            ids = {
                k for k, c in self._claims.items() if c["instance"] == instance
            }
            ids |= {k for k, g in self._used.items() if g == instance}
            ids |= set(guest_devices)
            claims = dict(self._claims)
            vf_types = dict(self._vf_types)
            released: list[BoundDevice] = []
            changing: list[BoundDevice] = []
            for device_id in sorted(ids):
                device = self._device(device_id, claims.pop(device_id, None))
                if device is None:
                    continue
                released.append(device)
                if device.kind == "vf":
                    vf_types.pop(device.id, None)
                if self._changes_host(device):
                    changing.append(device)
                    claims[device.id] = _claim_of(device, instance, RELEASE)
            self._save(claims, vf_types)
            for device in released:
                self._used.pop(device.id, None)
                if device not in changing:
                    self._return_to_view(device, made=False)
        self.host.forget_guest(instance)
        self._finish_release(instance, changing)
        if released:
            LOG.info(
                "Released %s of instance %s",
                ", ".join(d.id for d in released),
                instance,
            )
        return [d.id for d in released]

    def _changes_host(self, device: BoundDevice) -> bool:
        """Does handing ``device`` back change the host?"""
        if device.kind == "vf":
            pf = self._pfs.get(device.parent)
            return pf is None or pf.vfs.get(device.id) != 0
        return self.remove_unused and device.id in self._mdevs

    def _finish_release(
        self, instance: str, devices: Iterable[BoundDevice]
    ) -> None:
        """Outside the lock: change the host for each device under a
        release claim of ``instance``, then drop that claim (if it is
        still that claim)."""
        for device in devices:
            try:
                if self._changes_host(device):
                    self._unmake(device)
                done = True
            except VgpuDriverError as exc:
                LOG.error("Releasing %s: %s", device.id, exc)
                with self._lock:
                    self.unschedulable[device.parent] = time.monotonic()
                done = False
            with self._records(view=False):
                if self._claims.get(device.id) == _claim_of(
                    device, instance, RELEASE
                ):
                    claims = dict(self._claims)
                    del claims[device.id]
                    self._save(claims)
                self._after_release(device, done)

    def _after_release(self, device: BoundDevice, done: bool) -> None:
        """The view once the host is handed ``device`` back (``done``) or
        refused it (it stays as it is: a typed VF, a free mdev)."""
        if device.kind == "vf":
            pf = self._pfs.get(device.parent)
            if pf is not None and done:
                pf.vfs[device.id] = 0
                pf.creatable.setdefault(device.id, set()).add(
                    sriov_type_number(device.type_id)
                )
            return
        view = self._parents.get(device.parent)
        if view is None:
            return
        if device.id in self._mdevs:  # kept (or its removal failed)
            view.free.setdefault(device.type_id, []).append(device.id)
        elif done:
            view.available[device.type_id] = (
                view.available.get(device.type_id, 0) + 1
            )

    def _device(
        self, device_id: str, claim: dict[str, Any] | None
    ) -> BoundDevice | None:
        if claim is not None:
            return BoundDevice(**{k: claim[k] for k in _DEVICE_FIELDS})
        mdev = self._mdevs.get(device_id)
        if mdev is not None:
            return BoundDevice("mdev", mdev.uuid, mdev.parent, mdev.type_id)
        for pf in self._pfs.values():
            if device_id in pf.vfs:
                number = pf.vfs[device_id]
                return BoundDevice(
                    "vf", device_id, pf.name, naming.sriov_type_id(number)
                )
        return None

    def _hand_back(self, device: BoundDevice) -> None:
        """Give a device no claim holds back, changing the host in place
        (inside :meth:`_records`; a guest let go of it)."""
        if device.kind == "mdev" and device.id not in self._mdevs:
            return  # gone already
        if device.kind == "vf":
            self._vf_types.pop(device.id, None)
        if self._changes_host(device):
            self._unmake(device)
        self._after_release(device, done=True)

    def retry_failed(self, interval: float) -> list[str]:
        """Offer failed parents again once ``interval`` seconds passed."""
        with self._lock:
            now = time.monotonic()
            due = [
                name
                for name, since in self.unschedulable.items()
                if now - since >= interval
            ]
            for name in due:
                del self.unschedulable[name]
                LOG.info("Offering %s again after its failure", name)
            return due

    # -- repairs (vgpu-driver audit --fix) -------------------------------

    def drop_claims(
        self, expected: Mapping[str, Mapping[str, Any]]
    ) -> list[str]:
        """Drop claims of instances that are gone: compare-and-act under
        the records' lock. ``expected``: device id -> the claim as it was
        read when its instance was found gone. A claim is dropped only if
        it is still that very claim (the same instance, purpose and
        device) and that instance has no guest now; one released and
        made again for another instance since is left alone."""
        with self._records(view=False):  # the view is rebuilt just below
            guests = {
                g.uuid
                for g in self._rebuild_view("checking claims under the lock")
            }
            dropped = [
                device_id
                for device_id, claim in sorted(expected.items())
                if self._claims.get(device_id) == dict(claim)
                and claim["instance"] not in guests
            ]
            for device_id in dropped:
                del self._claims[device_id]
            if dropped:
                self._save()
        return dropped

    def record_vf_types(self, types: Mapping[str, int]) -> list[str]:
        """Record the vGPU types of VFs guests use, to restore them."""
        with self._records():
            changed = [
                a for a, t in types.items() if self._vf_types.get(a) != t
            ]
            self._vf_types.update({a: types[a] for a in changed})
            if changed:
                self._save()
        return changed

    def remove_free_mdevs(self, uuids: Iterable[str]) -> list[str]:
        """Remove mdevs that are still free and unclaimed when checked
        under the records' lock (with a fresh view of the guests)."""
        removed = []
        with self._records(view=False):  # the view is rebuilt just below
            self._rebuild_view("checking free mdevs under the lock")
            for uuid in uuids:
                mdev = self._mdevs.get(uuid)
                if mdev is None or uuid in self._used or uuid in self._claims:
                    continue
                try:
                    self.host.remove_mdev(mdev)
                except VgpuDriverError as exc:
                    LOG.error("Could not remove mdev %s: %s", uuid, exc)
                    continue
                self._take_off_free_list(uuid)
                self._mdevs.pop(uuid, None)
                removed.append(uuid)
            if removed:
                self._save()
        return removed

    # -- migration -----------------------------------------------------

    def end_migration(self, instance: str) -> None:
        """A live migration succeeded: its claims become spawn claims,
        ended as soon as the guest's domain is seen with them."""
        with self._records():
            for claim in self._claims.values():
                if (
                    claim["instance"] == instance
                    and claim["purpose"] == MIGRATION
                ):
                    claim["purpose"] = SPAWN
            self._save()

    # -- start of the service ------------------------------------------

    def recover(
        self,
        inventory: HostInventory,
        seen: Mapping[str, tuple[str, str]],
        instances: Iterable[str] | None = None,
    ) -> dict[str, list[str]]:
        """What a compute service does at start. Recreates mdevs guests
        need but that are gone (same uuid, same parent), starts the ones
        only defined, re-applies recorded VF types, and (when the caller
        lists the instances it has) drops the bind claims of unknown
        instances (live-migration claims stay)."""
        done: dict[str, list[str]] = {
            "released": [],
            "recreated": [],
            "started": [],
            "vf_types": [],
            "dropped_claims": [],
            "failed": [],
        }
        done["released"] = self._finish_interrupted_releases()
        present = {m.uuid: m for m in inventory.mdevs}
        parents = {p.name: p for p in inventory.parents}
        for guest in inventory.guests:
            for uuid in guest.mdevs:
                mdev = present.get(uuid)
                if mdev is not None and not mdev.active:
                    self._try(
                        done, "started", uuid, self.host.start_mdev, mdev
                    )
                elif mdev is None:
                    where = seen.get(uuid) or self._claimed_where(uuid)
                    if where is None or where[0] not in parents:
                        LOG.error(
                            "Guest %s needs mdev %s, which is gone, and its "
                            "parent is unknown or absent; it cannot start",
                            guest.name,
                            uuid,
                        )
                        done["failed"].append(uuid)
                        continue
                    parent, type_id = where
                    self._try(
                        done,
                        "recreated",
                        uuid,
                        self.host.create_mdev,
                        parents[parent],
                        type_id,
                        uuid,
                    )
        done["vf_types"] = self.restore_vf_types(inventory, done["failed"])
        if instances is not None:
            # an incoming live migration's instance is still the source
            # host's: its claims end at success or rollback, not here
            known = set(instances)
            with self._records():
                for device_id, claim in list(self._claims.items()):
                    if (
                        claim["purpose"] == SPAWN
                        and claim["instance"] not in known
                    ):
                        del self._claims[device_id]
                        done["dropped_claims"].append(device_id)
                if done["dropped_claims"]:
                    self._save()
        return done

    def _finish_interrupted_releases(self) -> list[str]:
        """Releases cut short (the process died between recording them
        and changing the host): done now."""
        with self._records():
            leftover = [
                (
                    c["instance"],
                    BoundDevice(**{k: c[k] for k in _DEVICE_FIELDS}),
                )
                for c in self._claims.values()
                if c["purpose"] == RELEASE
            ]
        for instance, device in leftover:
            LOG.info("Finishing the release of %s (%s)", device.id, instance)
            self._finish_release(instance, [device])
        return [device.id for _, device in leftover]

    def _claimed_where(self, uuid: str) -> tuple[str, str] | None:
        claim = self.claims().get(uuid)
        return (claim["parent"], claim["type_id"]) if claim else None

    def _try(
        self,
        done: dict[str, list[str]],
        key: str,
        name: str,
        fn: Any,
        *args: Any,
    ) -> None:
        try:
            fn(*args)
            done[key].append(name)
            LOG.info("Recovery: %s %s", key, name)
        except VgpuDriverError as exc:
            LOG.error("Recovery of %s failed: %s", name, exc)
            done["failed"].append(name)

    def restore_vf_types(
        self, inventory: HostInventory, failed: list[str] | None = None
    ) -> list[str]:
        """Re-apply the VF types this library set (the card forgets them
        at reboot or driver reload). A VF that refuses its type is logged
        and added to ``failed``; the others are still restored."""
        current = {
            vf.address: vf.current_type
            for pf in inventory.pfs
            for vf in pf.vfs
        }
        restored = []
        for address, number in sorted(self.vf_types.items()):
            if address not in current:
                LOG.warning(
                    "VF %s is not on the host; its type waits", address
                )
                continue
            if current[address] == number:
                continue
            if current[address]:
                LOG.error(
                    "VF %s has type %d, not the recorded %d; leaving it",
                    address,
                    current[address],
                    number,
                )
                continue
            try:
                self.host.set_vf_type(address, number)
            except VgpuDriverError as exc:
                LOG.error(
                    "Could not restore the type of VF %s: %s", address, exc
                )
                if failed is not None:
                    failed.append(f"{address}: {exc}")
                continue
            restored.append(address)
        if restored:
            LOG.info("Restored vGPU types of VFs %s", ", ".join(restored))
        return restored

    # -- type changes --------------------------------------------------

    def remove_stale_free_mdevs(
        self, configured: Mapping[str, str]
    ) -> list[str]:
        """Free mdevs of another type than the parent's configured one
        block the switch (one type per pGPU): remove them. Done under the
        records' lock, so no other process can claim one meanwhile."""
        removed: list[str] = []
        with self._records(fresh_view=True):
            stale = [
                (parent, type_id, uuid)
                for parent, view in self._parents.items()
                if parent in configured
                for type_id, uuids in view.free.items()
                if type_id != configured[parent]
                for uuid in list(uuids)
                if uuid not in self._claims
            ]
            if stale:
                # others must re-read the host: told before it changes,
                # and nothing is removed if they cannot be told
                try:
                    self._save()
                except StateStoreError as exc:
                    LOG.warning("Not removing stale free mdevs now: %s", exc)
                    return []
            for parent, type_id, uuid in stale:
                mdev = self._mdevs.get(uuid)
                if mdev is None:
                    continue
                try:
                    self.host.remove_mdev(mdev)
                except VgpuDriverError as exc:
                    LOG.error("Could not remove stale mdev %s: %s", uuid, exc)
                    continue
                self._parents[parent].free[type_id].remove(uuid)
                self._mdevs.pop(uuid, None)
                removed.append(uuid)
                LOG.info(
                    "Removed free %s mdev %s: %s now serves %s",
                    type_id,
                    uuid,
                    parent,
                    configured[parent],
                )
        return removed


_DEVICE_FIELDS = ("kind", "id", "parent", "type_id", "created")


def _claim_of(
    device: BoundDevice, instance: str, purpose: str
) -> dict[str, Any]:
    return {**device.record(), "instance": instance, "purpose": purpose}


def _check_same_bind(
    instance: str,
    held: list[BoundDevice],
    wanted: list[tuple[str, str, int]],
    any_parent: bool,
) -> None:
    """Raise ClaimConflict unless ``held`` is what ``wanted`` asks for."""

    def key(parent: str, type_id: str) -> tuple[str, str]:
        return ("", type_id) if any_parent else (parent, type_id)

    has = Counter(key(d.parent, d.type_id) for d in held)
    asks: Counter[tuple[str, str]] = Counter()
    for parent, type_id, units in wanted:
        asks[key(parent, type_id)] += units
    if has != asks:
        raise ClaimConflict(
            instance=instance,
            held=_describe_units(has),
            wanted=_describe_units(asks) or "no device",
        )


def _describe_units(units: Counter[tuple[str, str]]) -> str:
    return ", ".join(
        f"{n} x {type_id}" + (f" on {parent}" if parent else "")
        for (parent, type_id), n in sorted(units.items())
    )


def _is_exhaustion(exc: VgpuDriverError) -> bool:
    return isinstance(exc, DeviceCapacityExhausted) or (
        isinstance(exc, DeviceOperationFailed)
        and "available" in str(exc).lower()
    )


def _claims_of(record: Any) -> tuple[int, dict[str, dict[str, Any]]]:
    """(epoch, claims) of a claims record, also of the first format (a
    bare mapping of claims, epoch 0)."""
    if "claims" in record and "epoch" in record:
        return int(record["epoch"]), dict(record["claims"])
    return 0, dict(record)


_CLAIM_FIELDS = {
    "kind": str,
    "id": str,
    "parent": str,
    "type_id": str,
    "created": bool,
    "instance": str,
    "purpose": str,
}


def _validate_claims(record: Any) -> None:
    expect(isinstance(record, dict), "not a JSON object")
    if "claims" in record and "epoch" in record:
        expect(
            isinstance(record["epoch"], int)
            and isinstance(record["claims"], dict),
            "epoch must be a number and claims an object",
        )
        claims = record["claims"]
    else:
        claims = record
    for device_id, claim in claims.items():
        expect(
            isinstance(claim, dict), f"claim {device_id!r} is not an object"
        )
        for field, kind in _CLAIM_FIELDS.items():
            expect(
                isinstance(claim.get(field), kind),
                f"claim {device_id!r} has no valid {field!r}",
            )
        expect(
            claim["purpose"] in (SPAWN, MIGRATION, RELEASE)
            and claim["kind"] in ("mdev", "vf")
            and claim["id"] == device_id,
            f"claim {device_id!r} is inconsistent",
        )


_validate_vf_types = validate_str_map(
    lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
    "a vGPU type number",
)
