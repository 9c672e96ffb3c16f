"""One sync pass against a real Placement, with Nova's reshape
handshake."""

from __future__ import annotations

from typing import Any

from vgpu_driver.exception import ReshapeNeeded


def sync_placement(driver: Any, syncer: Any) -> Any:
    """One sync pass: Placement's tree, updated from the host, flushed."""
    # from where the last report stopped: the first pass of a process
    # also counts the client's version discovery (GET /)
    before = syncer.reported_requests
    created_root = syncer.claim_root()
    tree = syncer.read_tree()
    reshaped = None
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
        reshaped = syncer.reshape(tree, allocations)
        tree = syncer.read_tree()
        driver.update_provider_tree(tree, syncer.nodename)
    report = syncer.flush(tree)
    if reshaped is not None:
        # what the reshape wrote is this pass's too (the flush after it
        # finds those providers as wanted)
        report.created[:0] = reshaped.created
        for name in reshaped.updated:
            report.note_updated(name)
    if created_root:
        report.created.insert(0, created_root)
    driver.confirm_flushed()
    report.requests = syncer.client.request_count - before
    syncer.reported_requests = syncer.client.request_count
    return report
