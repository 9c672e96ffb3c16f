"""The claims record and the VF types record, read and written together
under the store's lock.

:class:`ClaimsRecord` owns the claims (device id -> claim, see
:mod:`vgpu_driver.model.claims`) and the vGPU types this library set on
VFs (restored after a reboot), as last read from disk, and the epoch of
the claims record. Every write gives the claims record a new random
epoch: a reader that finds an epoch it did not write knows another
process changed the host meanwhile (:attr:`ClaimsRecord.stale`). It
never touches the host.

The claims are ``claims.json`` (a snapshot, replaced whole) and the
saves appended since to ``claims.journal`` (:mod:`.journal`): a bind or
a release is one append and one flush to disk, not the two flushes and
the freed inode of a file replaced. The devices made travel with them
(:mod:`.claims_file`): a bind that makes its mdev is one append too.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterable, Iterator
from typing import Any

from oslo_log import log as logging

from vgpu_driver.model.claims import Claims
from vgpu_driver.model.made import MadeSet
from vgpu_driver.records.claims_file import (
    CLAIMS_RECORD,
    MADE_RECORD,
    ClaimsFile,
    made_after,
    validate_claims,
)
from vgpu_driver.records.store import (
    StateRecordCorrupt,
    StateStore,
    StateStoreError,
    expect,
    validate_str_map,
)

LOG = logging.getLogger(__name__)
VF_TYPES_RECORD = "vf-types"


class ClaimsRecord:
    def __init__(self, state: StateStore | None) -> None:
        """``state`` None: nothing is kept on disk (the records live as
        long as this object)."""
        self.state = state
        # as last read under the lock, or as last written: never trusted
        # across operations (each re-reads them)
        self.claims: Claims = {}
        self.vf_types: dict[str, int] = {}
        # (notes what changed since read or saved: see model.made)
        self._made = MadeSet()
        self._claims_on_disk: Claims = {}
        # False until the made record exists (the library's first start
        # on this host: the devices it finds are adopted once)
        self.made_known = state is None
        self._vf_types_on_disk: dict[str, int] = {}
        self._epoch: int | None = None  # the claims epoch we last saw
        # the claims epoch the VF types and devices made were last read
        # or written at, and what they were (see _others)
        self._others_epoch = 0
        self._others_value: tuple[dict[str, int], Any] = ({}, None)
        # another process wrote since we last saw (reset by the reader
        # once it has read the host again)
        self.stale = False
        # the claims on disk: the snapshot, its journal, the file held
        self._file = ClaimsFile(state) if state is not None else None

    @property
    def made(self) -> MadeSet:
        """The devices made (changed in place by add and discard)."""
        return self._made

    @made.setter
    def made(self, devices: Iterable[str]) -> None:
        """Replaced whole: unsaved until saved."""
        self._made = MadeSet(devices, saved=False)

    def made_frozen(self) -> frozenset[str]:
        """``made`` as a frozenset, made again only after it changed (a
        refresh asks it at every guest's change), a snapshot that knows
        what changed since the last ones (see :func:`~vgpu_driver.model.
        made.changed`)."""
        return self._made.frozen()

    def current(self) -> bool:
        """Are the records what this process last read or wrote? True
        when the claims file is that very file (the same inode, held open
        since, so not a new file given a reused number) with the same
        size and times, and so is its journal: every writer appends to
        the one or replaces the other, with a new epoch, whatever record
        it changes. A read-only caller that finds them current needs
        neither the lock nor a read."""
        return self._file is None or self._file.current()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the store's cross-process lock with both records freshly
        read from disk."""
        if self.state is None:
            yield
            return
        with self.state.locked():
            # the file is the one last read or written here and what is
            # held is what it says: nothing to read again
            if not self._unchanged_since_read():
                self._read()
            yield

    def _read(self) -> None:
        """Read the records (under the lock)."""
        assert self._file is not None
        epoch, self.claims, made = self._file.read()
        self._claims_on_disk = _copy(self.claims)
        vf_types, made_apart = self._others(epoch, made is None)
        made = made if made is not None else made_apart
        self.vf_types = dict(vf_types)
        self._vf_types_on_disk = dict(self.vf_types)
        self.made_known = made is not None
        self._made = MadeSet(made or ())
        if self._epoch is not None and epoch != self._epoch:
            self.stale = True
        self._epoch = epoch

    def _unchanged_since_read(self) -> bool:
        """Under the lock: the claims file is the very one this process
        last read or wrote (one look), and the claims, VF types and
        devices made held here are still what was read or written then
        (an operation that changed them and failed to save is undone by
        reading them again)."""
        return (
            self._epoch is not None
            and self._others_epoch == self._epoch
            and self.current()
            and self.claims == self._claims_on_disk
            and self.vf_types == self._vf_types_on_disk
            and not self._made.unsaved
        )

    def _others(
        self, epoch: int, made_apart: bool
    ) -> tuple[dict[str, int], Any]:
        """The VF types, and the devices made where the claims do not
        list them (``made_apart``: a snapshot of an earlier release; its
        ``made.json``), as on disk (under the lock). Every save of the
        VF types also gives the claims record a new random epoch, which
        is always read: the same epoch as when they were last read or
        written here means they did not change, and they are not read
        again (a record moved aside is read again: repair)."""
        assert self.state is not None
        if epoch and self._others_epoch == epoch:
            return self._others_value
        vf_types = self.state.load(VF_TYPES_RECORD, {}, _validate_vf_types)
        made = _made_apart(self.state) if made_apart else None
        self._others_epoch = epoch
        self._others_value = (dict(vf_types), made)
        return self._others_value

    def compact(self) -> bool:
        """Write the claims and the devices made as a new snapshot, its
        journal emptied, when the journal has entries (at a clean stop:
        a release without the journal then reads them all). Under the
        lock, with the records as on disk now; False: nothing to write.
        Raises StateStoreError if it cannot be written (the records stay
        as they were: a snapshot is renamed into place whole)."""
        if self._file is None:
            return False
        with self.locked():
            if self._file.journal.is_empty():
                return False
            self.save(whole=True)
        return True

    def save(
        self,
        claims: Claims | None = None,
        vf_types: dict[str, int] | None = None,
        whole: bool = False,
    ) -> None:
        """Write the records (inside :meth:`locked`): ours as they are,
        or ``claims`` and ``vf_types``, which become ours once written (a
        write that fails leaves what we hold as it was on disk). The
        claims are written last, the commit: a failed write leaves the
        claims (the decisions taken) as they were, never half of what
        was asked recorded, with the devices made (one write: a device
        is never claimed as ours on disk before it is recorded as made).
        Before them, the VF types (a type recorded for a VF no claim
        names is only set again at a reboot, to a free VF of ours).
        ``whole``: the claims written as a new snapshot, not appended."""
        claims = self.claims if claims is None else claims
        vf_types = self.vf_types if vf_types is None else vf_types
        if self.state is not None and self._file is not None:
            try:
                self._write(claims, vf_types, whole)
            except StateStoreError:
                # held again as on disk: nothing of a failed save is held
                # (a reader without the lock would take it as written)
                self._read()
                raise
        self.claims, self.vf_types = claims, vf_types

    def _write(
        self, claims: Claims, vf_types: dict[str, int], whole: bool
    ) -> None:
        """:meth:`save`'s writes, the claims last."""
        assert self.state is not None and self._file is not None
        # one durable write per bind of an mdev, made or not: the VF
        # types only when they changed
        if vf_types != self._vf_types_on_disk:
            self._others_epoch = 0
            self.state.save(VF_TYPES_RECORD, vf_types)
            self._vf_types_on_disk = dict(vf_types)
        # a fresh random number, not a counter: after a record was
        # moved aside, a reader must never see its old value again
        epoch = secrets.randbits(62) + 1
        self._others_epoch = 0  # read again should the write fail
        self._file.write(epoch, claims, self.made, whole)
        self._claims_on_disk = _copy(claims)
        self._made.saved()
        self.made_known = True
        self._epoch = epoch
        # what is on disk now, at the epoch just written
        self._others_epoch = epoch
        # (the set as written: a snapshot, made once per change)
        self._others_value = (
            dict(self._vf_types_on_disk),
            self._made.frozen(),
        )

    def _keep_made(self) -> None:
        """The claims snapshot cannot be read, nor so the devices made it
        lists: keep them in ``made.json`` (written with each snapshot,
        before it) with the changes its journal's last entry says since
        (an entry's changes are already in a ``made.json`` written
        after it: adding what is there and removing what is not changes
        nothing), before both are moved aside (under the lock)."""
        assert self.state is not None and self._file is not None
        try:
            made = _made_apart(self.state)
            last = self._file.journal.last(validate_claims)
        except (StateRecordCorrupt, StateStoreError):
            return  # nothing better to keep
        if made is None or last is None:
            return
        kept = made_after(made, last[1])
        if kept is not None and kept != made:
            try:
                self.state.save(MADE_RECORD, sorted(kept))
            except StateStoreError as exc:
                LOG.warning("Could not keep the devices made: %s", exc)

    def repair(self) -> list[str]:
        """Move unreadable records aside (they are kept) so they can be
        rebuilt from the host. Returns their new paths."""
        moved: list[str] = []
        if self.state is None:
            return moved
        self._others_epoch = 0  # read them again, whatever happens here
        with self.state.locked():
            try:
                self._read()  # all readable: held as read
                return moved
            except StateRecordCorrupt:
                self._others_epoch = 0
            for key, validate in (
                (CLAIMS_RECORD, validate_claims),
                (VF_TYPES_RECORD, _validate_vf_types),
                (MADE_RECORD, _validate_made),
            ):
                try:
                    self.state.load(key, {}, validate)
                except StateRecordCorrupt:
                    if key == CLAIMS_RECORD:
                        self._keep_made()
                    where = self.state.quarantine(key)
                    if where is not None:
                        moved.append(str(where))
            assert self._file is not None
            if not self._file.journal_readable(moved):
                where = self.state.move_aside(self._file.journal.path)
                if where is not None:
                    moved.append(str(where))
            if moved:
                self.stale = True
        return moved


def made_on_disk(state: StateStore) -> frozenset[str] | None:
    """The devices this library made, as its records say now (None: no
    record yet). A look for a report, without the lock: a snapshot is
    renamed into place whole, and an entry is read only after the
    snapshot it follows."""
    found = ClaimsFile(state)
    try:
        made = found.read()[2]
    finally:
        found.forget()
    return made if made is not None else _made_apart(state)


def _made_apart(state: StateStore) -> frozenset[str] | None:
    """The devices made as ``made.json`` lists them (None: no such
    record): the record of a release before this one, and the copy each
    snapshot writes."""
    made = state.load(MADE_RECORD, None, _validate_made)
    return frozenset(made) if made is not None else None


_validate_vf_types = validate_str_map(
    lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
    "a vGPU type number",
)


def _validate_made(record: Any) -> None:
    expect(
        isinstance(record, list) and all(isinstance(d, str) for d in record),
        "not a list of device ids",
    )


def _copy(claims: Claims) -> Claims:
    """A copy whose claims are copies too (an operation may change a
    claim in place before it saves)."""
    return {device_id: dict(claim) for device_id, claim in claims.items()}
