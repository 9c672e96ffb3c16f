"""A release claim names the process carrying it out: in flight while
that process lives (its lock held), cut short once it is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from vgpu_driver.model.binding import BoundDevice
from vgpu_driver.model.claims import claim_of, release_claim
from vgpu_driver.records.carriers import CARRIERS, Carrier

VF = BoundDevice("vf", "0000:41:00.5", "pci_0000_41_00_0", "1155", True)


def test_a_release_is_in_flight_while_its_carrier_lives(tmp_path):
    carrier, other = Carrier(tmp_path), Carrier(tmp_path)
    claim = release_claim(VF, "i1", carrier.held())
    assert (tmp_path / CARRIERS / carrier.token).exists()
    assert other.in_flight(claim)
    carrier.let_go()  # as its process's end does
    carrier.let_go()  # once is enough: a second does nothing
    assert not other.in_flight(claim)
    # the one that found it gone took its file away
    assert not (tmp_path / CARRIERS / carrier.token).exists()


def test_a_carrier_killed_leaves_its_releases_to_others(tmp_path):
    """A real process holds a carrier and is killed (no clean-up of its
    own runs): the kernel let go of its lock, so its release is no
    longer in flight."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from vgpu_driver.records.carriers import Carrier
        print(Carrier(Path({str(tmp_path)!r})).held(), flush=True)
        time.sleep(60)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True
    )
    try:
        token = child.stdout.readline().strip()
        claim = release_claim(VF, "i1", token)
        watcher = Carrier(tmp_path)
        assert watcher.in_flight(claim)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    assert (tmp_path / CARRIERS / token).exists()  # nothing of it ran
    assert not watcher.in_flight(claim)


def test_own_releases_are_in_flight_while_a_thread_carries_them(tmp_path):
    carrier = Carrier(tmp_path)
    claim = release_claim(VF, "i1", carrier.held())
    assert not carrier.in_flight(claim)  # recorded, carried by no one
    carrier.carrying.add(VF.id)
    assert carrier.in_flight(claim)


def test_a_release_claim_without_a_carrier_was_cut_short(tmp_path):
    """Written before carriers were recorded: finished as it always
    was."""
    assert not Carrier(tmp_path).in_flight(claim_of(VF, "i1", "release"))


def test_the_files_of_carriers_gone_are_swept_at_the_next_hold(tmp_path):
    gone, alive = Carrier(tmp_path), Carrier(tmp_path)
    gone.held(), alive.held()
    gone.let_go()
    Carrier(tmp_path).held()
    left = set(os.listdir(tmp_path / CARRIERS))
    assert gone.token not in left
    assert alive.token in left


def test_a_carrier_file_being_made_is_left_by_the_sweep(tmp_path):
    """Another process is making its carrier's file (not yet locked nor
    renamed) when this one sweeps: the file is its maker's, left, so its
    rename does not fail."""
    Carrier(tmp_path).held()
    making = tmp_path / CARRIERS / ".making-another"
    making.touch()
    Carrier(tmp_path).held()
    assert making.exists()


def test_a_carrier_whose_lock_cannot_be_asked_is_taken_as_alive(
    tmp_path, monkeypatch
):
    """Asking for the lock fails for another reason than its being held
    (``ENOLCK`` where locks run out): its release is left to it, never
    done twice, and its file stays."""
    import errno

    from vgpu_driver.records import carriers

    carrier, other = Carrier(tmp_path), Carrier(tmp_path)
    claim = release_claim(VF, "i1", carrier.held())

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(carriers.fcntl, "flock", no_locks)
    assert other.in_flight(claim)
    assert (tmp_path / CARRIERS / carrier.token).exists()


def test_without_records_nothing_is_made(tmp_path):
    carrier = Carrier(None)
    claim = release_claim(VF, "i1", carrier.held())
    assert not (tmp_path / CARRIERS).exists()
    assert not Carrier(None).in_flight(claim)


def test_a_carrier_that_cannot_be_told_is_taken_as_alive(tmp_path):
    """A carrier's file that cannot be opened (here a link to itself):
    whether its process lives cannot be told, so its release is left to
    it, never done twice."""
    carrier, other = Carrier(tmp_path), Carrier(tmp_path)
    claim = release_claim(VF, "i1", carrier.held())
    path = tmp_path / CARRIERS / carrier.token
    path.unlink()
    path.symlink_to(path)
    assert other.in_flight(claim)


def test_two_asking_at_once_do_not_take_each_other_for_the_carrier(
    tmp_path,
):
    """A carrier gone, and another process in the middle of asking
    about it (its lock on the file taken to ask) when this one asks: the
    carrier is gone to both."""
    import fcntl

    carrier, other = Carrier(tmp_path), Carrier(tmp_path)
    claim = release_claim(VF, "i1", carrier.held())
    carrier.let_go()
    asking = os.open(tmp_path / CARRIERS / carrier.token, os.O_RDONLY)
    try:
        fcntl.flock(asking, fcntl.LOCK_SH | fcntl.LOCK_NB)
        assert not other.in_flight(claim)
    finally:
        os.close(asking)
