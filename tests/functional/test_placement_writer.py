"""The provider writer against a real Placement, when someone else got
there first: a provider made by name under another uuid is adopted, a
root Nova made meanwhile becomes the known root, a provider already
deleted is gone (not an error), and one deleted in the middle of a
write or a create is a clear error naming it."""

from __future__ import annotations

import uuid

import pytest

from tests.placement_helpers import put_inventory
from vgpu_driver.exception import PlacementError
from vgpu_driver.placement.remote import RemoteView, SyncReport
from vgpu_driver.placement.writer import ProviderWriter
from vgpu_driver.records.placement import PlacementRecord

pytestmark = pytest.mark.functional


def writer_for(client, nodename):
    view = RemoteView(
        client,
        nodename,
        PlacementRecord(None, nodename),
        refresh_interval=300.0,
        clock=lambda: 0.0,
    )
    return view, ProviderWriter(view)


def made_by_someone(client, name, parent=None):
    body = {"name": name, "uuid": str(uuid.uuid4())}
    if parent:
        body["parent_provider_uuid"] = parent
    return client.request("POST", "/resource_providers", body=body).body


def node_with_a_child(client, kind):
    """A node whose root and one device provider someone else made, and
    a writer whose view has read them: (view, writer, root, name,
    child uuid)."""
    nodename = f"writer-{kind}-{uuid.uuid4().hex[:8]}"
    root = made_by_someone(client, nodename)["uuid"]
    name = f"{nodename}_pci_0000_41_00_0"
    child = made_by_someone(client, name, parent=root)["uuid"]
    view, writer = writer_for(client, nodename)
    view.refresh()
    return view, writer, root, name, child


def test_a_root_nova_made_meanwhile_is_adopted_as_the_known_root(client):
    nodename = f"writer-root-{uuid.uuid4().hex[:8]}"
    view, writer = writer_for(client, nodename)
    view.refresh()  # nothing there yet
    nova = made_by_someone(client, nodename)
    report = SyncReport()
    got = writer.ensure_provider(str(uuid.uuid4()), nodename, None, report)
    assert got == nova["uuid"] == view.known_root == view.root_uuid
    assert report.created == []


def test_a_root_made_here_is_the_known_root(client):
    nodename = f"writer-new-{uuid.uuid4().hex[:8]}"
    view, writer = writer_for(client, nodename)
    view.refresh()
    mine = str(uuid.uuid4())
    report = SyncReport()
    assert writer.ensure_provider(mine, nodename, None, report) == mine
    assert view.known_root == mine
    assert report.created == [nodename]


def test_a_child_made_by_name_under_another_uuid_is_adopted(client):
    _view, writer, root, name, theirs = node_with_a_child(client, "child")
    report = SyncReport()
    got = writer.ensure_provider(str(uuid.uuid4()), name, root, report)
    assert got == theirs and report.created == []


def test_deleting_a_provider_someone_deleted_already_is_done(client):
    view, writer, _root, name, child = node_with_a_child(client, "gone")
    client.request("DELETE", f"/resource_providers/{child}", ok=(204,))
    report = SyncReport()
    writer.delete(view.providers[child], report)
    assert report.removed == [name] and child not in view.providers


def deleted_when_reread(client, view):
    """The provider is deleted by someone else just before it is read
    again (the race a generation conflict or a 409 can hide)."""
    reread = view.reread

    def gone_first(provider_uuid):
        client.request(
            "DELETE", f"/resource_providers/{provider_uuid}", ok=(204, 404)
        )
        return reread(provider_uuid)

    view.reread = gone_first


def test_a_provider_deleted_in_the_middle_of_a_write_is_named(client):
    view, writer, _root, name, child = node_with_a_child(client, "race")
    # someone else writes first: our generation is stale, a 409 follows
    client.request(
        "PUT",
        f"/resource_providers/{child}/traits",
        body={
            "resource_provider_generation": 0,
            "traits": ["HW_GPU_API_VULKAN"],
        },
    )
    deleted_when_reread(client, view)
    inventory = {"VGPU": {"total": 4, "reserved": 0}}
    with pytest.raises(PlacementError, match="deleted meanwhile") as caught:
        writer.set_inventory(child, name, inventory, SyncReport())
    assert name in str(caught.value)


def test_a_create_refused_for_a_provider_gone_by_then_is_named(client):
    nodename = f"writer-409-{uuid.uuid4().hex[:8]}"
    root = made_by_someone(client, nodename)["uuid"]
    # another provider holds the uuid this one would be created under
    taken = made_by_someone(client, f"{nodename}_other", parent=root)["uuid"]
    view, writer = writer_for(client, nodename)
    view.providers = {}  # read before it existed
    deleted_when_reread(client, view)
    name = f"{nodename}_pci_0000_41_00_0"
    with pytest.raises(PlacementError, match=name):
        writer.ensure_provider(taken, name, root, SyncReport())


def test_generations_after_a_batch_that_empties_a_provider(client):
    """One POST /reshaper empties one provider and changes another: the
    view's generations follow Placement's rule (one bump for an emptied
    inventory, two for another), so the next write to each is taken the
    first time."""
    from vgpu_driver.placement import reshaper

    nodename = f"writer-batch-{uuid.uuid4().hex[:8]}"
    root = made_by_someone(client, nodename)["uuid"]
    children = []
    for n in range(2):
        name = f"{nodename}_pci_0000_4{n}_00_0"
        child = made_by_someone(client, name, parent=root)["uuid"]
        put_inventory(client, child, {"VGPU": {"total": 4}})
        children.append((child, name))
    view, writer = writer_for(client, nodename)
    view.refresh()
    (emptied, emptied_name), (changed, changed_name) = children
    report = SyncReport()
    assert reshaper.batch_inventories(
        writer,
        [
            (emptied, emptied_name, {}),
            (changed, changed_name, {"VGPU": {"total": 2, "reserved": 0}}),
        ],
        report,
    )
    conflicts = client.statuses[409]
    writer.set_traits(emptied, emptied_name, {"HW_GPU_API_VULKAN"}, report)
    writer.set_traits(changed, changed_name, {"HW_GPU_API_VULKAN"}, report)
    assert client.statuses[409] == conflicts
