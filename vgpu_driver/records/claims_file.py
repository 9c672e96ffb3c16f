"""The claims on disk: ``claims.json``, a snapshot replaced whole, and
``claims.journal``, the saves appended since (:mod:`.journal`).

:class:`ClaimsFile` owns that form: reading the record (the snapshot, or
the journal's last entry that follows it), writing it (one append and
one flush; a new snapshot when the journal is full or missing), and the
look that tells a reader whether anyone wrote since: the claims file is
held open, so its inode is never given to a new file, and its stat
signature and its journal's are compared. Every save appends to the
journal or replaces the file. The caller holds the store's lock around
reads and writes; a look needs none.

The devices the library made travel with the claims: the snapshot
lists them (``made``), and each entry says which were made and which
removed since the snapshot (``made_since``). A bind that makes its
device, or a release that removes one, is then still one append and one
flush, of what changed, not of every device made; and a device is
never claimed as ours on disk before it is recorded as made (both are
one write). A snapshot of an earlier release has no ``made``: the
devices are then those of ``made.json``, which each snapshot also
writes (first) for a release before this one to read.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Set
from typing import Any

from oslo_log import log as logging

from vgpu_driver.model.claims import (
    CARRIER,
    CLAIM_FIELDS,
    PURPOSES,
    Claims,
)
from vgpu_driver.model.made import Made, MadeSet, changed
from vgpu_driver.records.journal import SUFFIX, Journal, signature
from vgpu_driver.records.store import (
    StateRecordCorrupt,
    StateStore,
    StateStoreError,
    expect,
)

LOG = logging.getLogger(__name__)
CLAIMS_RECORD = "claims"
# the devices this library made: mdev uuids it created, VF addresses it
# gave a type; any other device is another manager's (an operator's
# mdevctl, Cyborg...) and is never removed, retyped or handed out.
# Kept with the claims; this record is what a release before it read
MADE_RECORD = "made"

# the stat signatures of the claims file and of its journal (None: none)
Look = tuple[tuple[int, ...], "tuple[int, ...] | None"]


class ClaimsFile:
    def __init__(self, state: StateStore) -> None:
        self.state = state
        self.journal = Journal(state.directory / f"{CLAIMS_RECORD}{SUFFIX}")
        # the epoch of the snapshot on disk as last read or written (0:
        # none, or one of the first format: no entry can follow it), and
        # the devices made it lists (None: of an earlier release, none)
        self._snapshot = 0
        self._snapshot_made: frozenset[str] | None = None
        # the devices made as last written, and (added, removed) since
        # the snapshot then: the next entry's from what changed since
        self._since: tuple[Made, tuple[set[str], set[str]]] | None = None
        # (the look as last read or written here, the claims file open)
        self._seen: tuple[Look, int] | None = None
        self._files = (state.file(CLAIMS_RECORD), os.fspath(self.journal.path))

    def current(self) -> bool:
        """Is the record what this process last read or wrote (one stat
        of each file)?"""
        return self._seen is not None and self._look() == self._seen[0]

    def read(self) -> tuple[int, Claims, frozenset[str] | None]:
        """(epoch, claims, devices made) as on disk now (under the lock);
        the devices None where the snapshot is of an earlier release
        (see ``made.json``)."""
        record = self.state.load(CLAIMS_RECORD, {}, validate_claims)
        epoch, claims = claims_of(record)
        made = self._snapshot_made = made_of(record)
        self._since = None  # (a new set of devices made is built from it)
        self._snapshot = epoch
        if epoch:
            entry = self.journal.latest(epoch, validate_claims)
            if entry is not None:
                epoch, claims = claims_of(entry)
                made = made_after(made, entry)
        self._hold()
        return epoch, claims, made

    def write(
        self, epoch: int, claims: Claims, made: Set[str], whole: bool = False
    ) -> None:
        """Appended to the journal of the snapshot on disk (one flush),
        with the devices made and removed since it; else (no snapshot of
        this format, no journal, or a full one; or ``whole``) a new
        snapshot, and the journal emptied (under the lock)."""
        record: dict[str, Any] = {"epoch": epoch, "claims": claims}
        base = self._snapshot_made
        if self._snapshot and base is not None and not whole:
            added, removed = self._made_since(made, base)
            since = {"added": sorted(added), "removed": sorted(removed)}
            if self.journal.append(
                self._snapshot, {**record, "made_since": since}
            ):
                self._hold()
                return
        listed = sorted(made)
        # a release before this one reads the devices made there
        self.state.save(MADE_RECORD, listed)
        self.state.save(CLAIMS_RECORD, {**record, "made": listed})
        self._snapshot, self._snapshot_made = epoch, frozenset(made)
        self._since = None
        try:
            self.journal.empty()
        except StateStoreError as exc:
            # its entries follow an earlier snapshot: never read; the
            # next save writes a snapshot if there is no journal
            LOG.warning("Could not empty the claims' journal: %s", exc)
        self._hold()

    def _made_since(
        self, made: Set[str], base: frozenset[str]
    ) -> tuple[set[str], set[str]]:
        """The devices made and removed since the snapshot ``base``: from
        those changed since the last write (a snapshot of ``made`` each,
        see :mod:`~vgpu_driver.model.made`), so an entry costs the
        changes since the snapshot, not every device made; by comparing
        every device otherwise."""
        now = made.frozen() if isinstance(made, MadeSet) else None
        last = self._since
        if now is not None and last is not None:
            added, removed = set(last[1][0]), set(last[1][1])
            for device in changed(now, last[0]):
                into, out = (
                    (added, removed) if device in now else (removed, added)
                )
                if (device in base) == (device in now):
                    out.discard(device)  # as in the snapshot again
                else:
                    into.add(device)
        else:
            added, removed = compared(made, base)
        self._since = (now, (added, removed)) if now is not None else None
        return added, removed

    def journal_readable(self, moved: list[str]) -> bool:
        """Is the journal readable, and its snapshot still there (the
        entries of one moved aside are kept with it; an empty journal
        has none)? Under the lock, once the records were repaired."""
        snapshot = self.state.path(CLAIMS_RECORD).name
        if any(os.path.basename(p).startswith(snapshot) for p in moved):
            return self.journal.is_empty()
        try:
            record = self.state.load(CLAIMS_RECORD, {}, validate_claims)
            self.journal.latest(claims_of(record)[0], validate_claims)
        except StateRecordCorrupt:
            return False
        return True

    def _look(self) -> Look | None:
        """The stat signatures of the claims file and of its journal;
        None without a claims file."""
        try:
            found = signature(os.stat(self._files[0]))
        except OSError:
            return None
        try:
            journal = signature(os.stat(self._files[1]))
        except OSError:
            return found, None
        return found, journal

    def _hold(self) -> None:
        """Remember both files as they are now (under the lock)."""
        now = self._look()
        if now is None:
            self.forget()
            return
        if self._seen is not None and self._seen[0][0] == now[0]:
            self._seen = (now, self._seen[1])  # the same file, held
            return
        try:
            fd = os.open(self._files[0], os.O_RDONLY)
        except OSError:
            self.forget()
            return
        self.forget()
        self._seen = ((signature(os.fstat(fd)), now[1]), fd)

    def forget(self) -> None:
        if self._seen is not None:
            os.close(self._seen[1])
            self._seen = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.forget()


def claims_of(record: Any) -> tuple[int, Claims]:
    """(epoch, claims) of a claims record, also of the first format (a
    bare mapping of claims, epoch 0)."""
    if "claims" in record and "epoch" in record:
        return int(record["epoch"]), dict(record["claims"])
    return 0, dict(record)


def made_of(record: Any) -> frozenset[str] | None:
    """The devices made a claims snapshot lists (None: one of an earlier
    release lists none)."""
    if "claims" in record and "epoch" in record and "made" in record:
        return frozenset(record["made"])
    return None


def compared(
    made: Set[str], base: frozenset[str]
) -> tuple[set[str], set[str]]:
    """(added, removed): ``made`` against ``base``, device by device."""
    return set(made - base), set(base - made)


def made_after(
    snapshot: frozenset[str] | None, entry: Any
) -> frozenset[str] | None:
    """The devices made once an entry's changes since the ``snapshot``
    it follows are made (None: the snapshot lists none)."""
    since = entry.get("made_since")
    if snapshot is None or since is None:
        return snapshot
    return (snapshot - set(since["removed"])) | set(since["added"])


def _device_ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(d, str) for d in value)


def validate_claims(record: Any) -> None:
    expect(isinstance(record, dict), "not a JSON object")
    if "claims" in record and "epoch" in record:
        expect(
            isinstance(record["epoch"], int)
            and isinstance(record["claims"], dict),
            "epoch must be a number and claims an object",
        )
        expect(
            _device_ids(record.get("made", [])),
            "made must be a list of device ids",
        )
        since = record.get("made_since", {"added": [], "removed": []})
        expect(
            isinstance(since, dict)
            and _device_ids(since.get("added"))
            and _device_ids(since.get("removed")),
            "made_since must list the device ids added and removed",
        )
        claims = record["claims"]
    else:
        claims = record
    for device_id, claim in claims.items():
        expect(
            isinstance(claim, dict), f"claim {device_id!r} is not an object"
        )
        for field, kind in CLAIM_FIELDS.items():
            expect(
                isinstance(claim.get(field), kind),
                f"claim {device_id!r} has no valid {field!r}",
            )
        expect(
            claim["purpose"] in PURPOSES
            and claim["kind"] in ("mdev", "vf", "pci")
            and claim["id"] == device_id
            and isinstance(claim.get(CARRIER, ""), str),
            f"claim {device_id!r} is inconsistent",
        )
