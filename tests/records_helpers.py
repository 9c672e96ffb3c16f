"""The library's records as another process finds them: the claims and
the devices made read from a state directory (or made to say what a
process of the library would have written), the records written in
order, a claim as the claims file holds one, and a configuration with a
state directory of its own."""

from __future__ import annotations

import fcntl
import os
import textwrap
import uuid
from pathlib import Path

from oslo_config import cfg

from vgpu_driver import conf as vconf
from vgpu_driver.records.claims import ClaimsRecord
from vgpu_driver.records.journal import Journal
from vgpu_driver.records.store import LOCK_FILE, StateStore


def claims_on_disk(state: Path) -> dict:
    """The claims as a new process reads them from ``state`` (the claims
    file and the saves appended to its journal since)."""
    record = ClaimsRecord(StateStore(state))
    with record.locked():
        return dict(record.claims)


def seen_on_disk(state: Path) -> dict[str, tuple[str, str]]:
    """The mdevs seen, as a new process reads them from ``state`` (the
    snapshot and the changes appended to its journal since)."""
    from vgpu_driver.records.seen import SeenMdevs

    return SeenMdevs(StateStore(state)).snapshot()


def made_on_disk(state: Path) -> set[str]:
    """The devices made, as a new process reads them from ``state``
    (listed with the claims, and the changes appended since)."""
    record = ClaimsRecord(StateStore(state))
    with record.locked():
        return set(record.made)


def record_made(state: Path, made: set[str]) -> None:
    """Record ``made`` as the devices the library made, under the lock
    (as another process of the library would)."""
    record = ClaimsRecord(StateStore(state))
    with record.locked():
        record.made = set(made)
        record.save()


def saves_in_order(monkeypatch):
    """The records written, by key, in the order they are written
    (replaced whole, or appended to their journal)."""
    order: list[str] = []
    real_save = StateStore.save
    real_append = Journal.append

    def save(self, key, value):
        order.append(key)
        return real_save(self, key, value)

    def append(self, base, record):
        appended = real_append(self, base, record)
        if appended:
            order.append(self.path.stem)
        return appended

    monkeypatch.setattr(StateStore, "save", save)
    monkeypatch.setattr(Journal, "append", append)
    return order


def claim(device: str, instance: str) -> dict:
    """A spawn claim of ``device`` on m10's ``pci_0000_86_00_0``, as the
    claims file holds one."""
    return {
        "kind": "mdev",
        "id": device,
        "parent": "pci_0000_86_00_0",
        "type_id": "nvidia-36",
        "created": False,
        "instance": instance,
        "purpose": "spawn",
    }


def journal_of(state):
    """The claims' journal in ``state``."""
    return state / "claims.journal"


def lock_is_free(state: Path) -> bool:
    """Could another process (another open file description) take the
    records' lock in ``state`` now?"""
    fd = os.open(state / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def save_claims(record: ClaimsRecord, **claims: str) -> None:
    """``claims``: device -> instance, the whole record written."""
    with record.locked():
        record.save({d: claim(d, i) for d, i in claims.items()})


def read_claims(state: Path) -> dict[str, str]:
    """device -> instance, as a new process reads them."""
    record = ClaimsRecord(StateStore(state))
    with record.locked():
        return {d: c["instance"] for d, c in record.claims.items()}


def conf_with_state(
    state: Path, config_text: str, directory: Path
) -> cfg.ConfigOpts:
    """``config_text`` (written in ``directory``) read, its records in
    ``state``."""
    path = directory / f"nova-{uuid.uuid4()}.conf"
    path.write_text(textwrap.dedent(config_text))
    conf = cfg.ConfigOpts()
    vconf.register_opts(conf)
    conf(["--config-file", str(path)], default_config_files=[])
    conf.set_override("state_path", str(state), "devices")
    return conf
