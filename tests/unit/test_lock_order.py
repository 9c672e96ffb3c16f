"""Two threads of one service (a refresh, and a spawn's calls beside
it, as Nova runs them) take the locks they share in one order, so
neither waits on the other for ever."""

from __future__ import annotations

import threading
import time

from tests.helpers import Node

PARENT = "pci_0000_85_00_0"


def test_a_bind_saving_the_mdevs_seen_and_a_refresh_saving_them_at_once(
    make_conf, tmp_path
):
    """One thread holds the records' lock (as ``guest_defined`` does when
    it ends spawn claims) and then saves the mdevs seen; another saves
    them meanwhile (as a refresh taking a guest's mdev in does). It used
    to take the record's own lock first and wait for the records' lock,
    while the first waited for the record's own: both hung."""
    n = Node(make_conf, tmp_path / "state")
    ledger = n.driver.binder.ledger
    seen = ledger.seen
    done = []

    def refresh() -> None:
        seen.save({"00000000-0000-0000-0000-0000000000a1": (PARENT, "a")})
        done.append("refresh")

    def bind() -> None:
        with ledger.locked():
            beside = threading.Thread(target=refresh, daemon=True)
            beside.start()
            time.sleep(0.2)  # as far as it gets while the lock is held
            seen.remember(
                {"00000000-0000-0000-0000-0000000000b2": (PARENT, "b")}
            )
        done.append("bind")

    first = threading.Thread(target=bind, daemon=True)
    first.start()
    first.join(timeout=10)
    deadline = time.monotonic() + 10
    while len(done) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(done) == ["bind", "refresh"]
    assert {
        "00000000-0000-0000-0000-0000000000a1",
        "00000000-0000-0000-0000-0000000000b2",
    } <= set(n.driver.seen_mdevs())
