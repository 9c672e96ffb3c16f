"""A service through random sequences of what happens on a compute host
(as in ``test_refresh_sequences``), restarted at random points (its
process dead, or stopped cleanly) and with ``vgpu-driver restore`` run
beside it: after each refresh the view has each guest use the mdevs its
domain names, read from libvirt itself; a new service on the same host
and records, once started, plans, reports and holds what the one it
replaces did."""

from __future__ import annotations

import random

import pytest

from benchmarks.service import held
from tests.random_host import RandomHost, in_use, tree_figures, view_in_use


def _restarted(host: RandomHost, rng: random.Random) -> None:
    """The service replaced by a new one on the same host and records,
    started as nova-compute starts it; it must end where the old one
    was."""
    old, tree = host.driver, host.service.tree
    plans, providers = list(old.last_plans), tree_figures(tree)
    free, devices = old.free_mdevs(), old.instance_devices()
    if rng.random() < 0.5:
        old.cleanup_host()  # a clean stop (else: its process died)
    old.binder.ledger.carrier.let_go()
    new, _unused = host.service._new(None, host.conn)
    tree = held(tree)  # the providers as Placement holds them
    done = new.init_host(sorted(host.bound))
    assert done["failed"] == []
    new.update_provider_tree(tree, "bench")
    assert new.last_plans == plans
    assert tree_figures(tree) == providers
    assert new.free_mdevs() == free
    assert new.instance_devices() == devices
    host.driver = host.service.driver = new
    host.service.tree = tree


def _restored(host: RandomHost) -> None:
    """``vgpu-driver restore``, another process on the same records."""
    tool, _unused = host.service._new(None, host.conn)
    reading = tool.discover(rescan_guests=True)
    done = tool.binder.recover(reading, tool.seen_mdevs())
    tool.binder.ledger.carrier.let_go()
    assert done["failed"] == []


@pytest.mark.parametrize("seed", range(12))
def test_the_view_is_the_host_s_through_restarts_and_restores(tmp_path, seed):
    rng = random.Random(seed)
    host = RandomHost(rng, tmp_path, making=seed % 2 == 1)
    happenings = host.happenings()
    if rng.random() < 0.5:
        happenings.append(lambda: _restored(host))
    refreshes = 0
    for _step in range(200):
        rng.choice(happenings)()
        if rng.random() < 0.3:  # several changes between two refreshes
            continue
        host.driver.update_provider_tree(host.service.tree, "bench")
        assert view_in_use(host.driver) == in_use(host)
        refreshes += 1
        if refreshes % 30 == 0:  # (at least 4 restarts a sequence)
            _restarted(host, rng)
