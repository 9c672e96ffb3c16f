"""What the tests of the Nova integration share: the compute node's
name, an mdev of m10 no guest has, and what they read of an adapter
(the children of its tree's root, the integration's Nova driver over
it). Nova is imported where it is used: this module imports without
it."""

from __future__ import annotations

NODE = "compute7"
FREE_ON_86 = "386818c0-9f18-5b12-8c04-386dbef1b1ab"  # m10: no guest has it


def children(tree, root):
    return {
        tree.data(u).name: tree.data(u)
        for u in tree.get_provider_uuids(root)
        if u != root
    }


def nova_driver_over(nova):
    """The integration's Nova driver, its adapter the one on the test
    driver's host (its tree reported once), and the events Nova queues
    for itself."""
    from nova.virt import fake

    from vgpu_driver.nova import driver as vgpu_nova

    adapter, tree, _root = nova
    adapter.update_provider_tree(tree, NODE)
    driver = vgpu_nova.LibvirtDriver(fake.FakeVirtAPI(), False)
    driver._vgpu_adapter = adapter
    queued = []
    driver._host._event_handler._queue_event = queued.append
    return adapter, driver, queued
