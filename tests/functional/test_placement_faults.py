"""Placement that restarts empty, is misconfigured or unreachable, and
providers whose device vanishes under an allocation."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

import pytest

from tests.functional.fault_proxy import FaultProxy
from tests.placement_helpers import PlacementNode as Node
from tests.placement_helpers import placement_conf, placement_view
from vgpu_driver.exception import (
    PlacementError,
    PlacementUnavailable,
)
from vgpu_driver.placement.client import client_from_conf
from vgpu_driver.placement.server import EmbeddedPlacement

pytestmark = pytest.mark.functional


def test_placement_restarted_empty_is_filled_again(
    placement_url, tmp_path, make_client
):
    """The client must not trust its cache of custom classes and traits
    once Placement lost them."""
    with FaultProxy(placement_url) as proxy:
        node = Node(proxy.url, tmp_path)
        node.sync()
        assert "CUSTOM_MLX5" in str(
            placement_view(make_client(), node.nodename)
        )
        with EmbeddedPlacement(tmp_path / "empty") as fresh:
            proxy.target = urlsplit(fresh.url)
            # a sync where nothing changed sends nothing; the restart is
            # noticed at the next re-read ([placement] refresh_interval)
            node.syncer.refresh_interval = 0
            report = node.sync()
            assert node.nodename in report.created
            node.syncer.refresh_interval = 3600
            view = placement_view(make_client(fresh.url), node.nodename)
            assert view["pci_0000_3b_00_0"][0]["CUSTOM_MLX5"][0] > 0
            assert "CUSTOM_GOLD" in view["pci_0000_84_00_0"][1]
            assert node.sync().requests == 0  # and it is steady again
            # the re-read forgot the names it knew: nothing was sent
            # naming one Placement no longer had
            assert node.syncer.client.statuses[400] == 0


def test_a_vanished_device_with_an_allocation_is_reserved(
    placement_url, tmp_path, client
):
    node = Node(placement_url, tmp_path)
    node.sync()
    rp = placement_view(client, node.nodename)["pci_0000_85_00_0"][2]
    consumer = str(uuid.uuid4())
    client.request(
        "PUT",
        f"/allocations/{consumer}",
        body={
            "allocations": {rp: {"resources": {"VGPU": 1}}},
            "project_id": str(uuid.uuid4()),
            "user_id": str(uuid.uuid4()),
            "consumer_generation": None,
        },
        ok=(204,),
    )
    node.host.unplug("pci_0000_85_00_0")
    report = node.sync()
    assert report.kept_in_use == [f"{node.nodename}_pci_0000_85_00_0"]
    [(total, reserved)] = placement_view(client, node.nodename)[
        "pci_0000_85_00_0"
    ][0].values()
    assert total == reserved >= 1


def test_a_claimed_device_on_a_vanished_parent_keeps_its_provider(
    placement_url, tmp_path, client
):
    node = Node(placement_url, tmp_path)
    node.sync()
    rp = placement_view(client, node.nodename)["pci_0000_87_00_0"][2]
    node.driver.allocate_mdevs("i1", {rp: {"resources": {"VGPU": 1}}})
    node.host.unplug("pci_0000_87_00_0")
    node.sync()
    [(total, reserved)] = placement_view(client, node.nodename)[
        "pci_0000_87_00_0"
    ][0].values()
    assert (total, reserved) == (1, 1)


# m60: two device providers, the fewest whose inventories are batched
@pytest.mark.parametrize("host_name", ["demo", "m60"])
def test_first_sync_costs_what_its_tree_needs_and_never_conflicts(
    placement_url, tmp_path, client, host_name
):
    """1 version discovery (GET /) + 1 root (created at once: a new node
    has nothing to look up) + per device provider: create and traits;
    every inventory in one POST /reshaper; plus one PUT per custom class
    and custom trait: 3 + 2 per provider. A write never conflicts with
    our own earlier write (the cached generation follows each answer,
    and the reshaper's rule)."""
    node = Node(placement_url, tmp_path, host_name)
    report = node.sync()
    view = placement_view(client, node.nodename)
    children = [v for v in view.values() if v[3] is not None]
    classes = {rc for v in children for rc in v[0] if rc.startswith("CUSTOM_")}
    traits = {t for v in children for t in v[1] if t.startswith("CUSTOM_")}
    assert len(children) >= 2
    assert report.requests == 3 + 2 * len(children) + len(classes) + len(
        traits
    )
    assert report.created[0] == node.nodename
    assert node.syncer.client.statuses[409] == 0
    assert set(node.syncer.client.statuses) <= {200, 201, 204}
    # the generations cached after the reshaper are Placement's own
    listed = client.request(
        "GET", f"/resource_providers?in_tree={node.syncer.root_uuid}"
    ).body["resource_providers"]
    cached = node.syncer.view.providers
    assert {p["uuid"]: p["generation"] for p in listed} == {
        uuid: remote.generation for uuid, remote in cached.items()
    }


def test_retries_back_off_exponentially(placement_url, tmp_path):
    from tests.functional.conftest import placement_conf

    waits = []
    with FaultProxy(placement_url) as proxy:
        client = client_from_conf(placement_conf(proxy.url, tmp_path))
        client.sleep = waits.append
        client.max_attempts, client.retry_delay = 4, 0.5
        proxy.fail_next = 3
        assert client.request("GET", "/resource_providers").status == 200
        assert waits == [0.5, 1.0, 2.0]
        proxy.fail_next = 10
        with pytest.raises(PlacementUnavailable, match="4 attempts"):
            client.request("GET", "/resource_providers")
        assert proxy.fail_next == 10 - 4  # 4 requests sent, not one more
        assert waits[3:] == [0.5, 1.0, 2.0]
        proxy.fail_next, proxy.fail_status = 1, 500  # Placement's own bug
        assert client.request("GET", "/resource_providers").status == 200
        assert waits[6:] == [0.5]


# haproxy's page when no Placement backend answers
HAPROXY_503 = (
    b"<html><body><h1>503 Service Unavailable</h1>\n"
    b"No server is available to handle this request.\n</body></html>\n"
)


KEYSTONE_401 = (
    b'{"error": {"code": 401, "title": "Unauthorized", "message": "The '
    b'request you have made requires authentication."}}'
)


def test_a_load_balancer_s_html_answer_is_retried_then_reported(
    placement_url, tmp_path
):
    """In front of Placement, haproxy answers 503 with an HTML page (no
    JSON): retried as Placement's own 503, and when it lasts, reported
    with the status and the page's words, never a parsing traceback; a
    4xx page, or keystonemiddleware's JSON refusal, at once."""
    from tests.functional.conftest import placement_conf

    with FaultProxy(placement_url) as proxy:
        proxy.fail_page = (HAPROXY_503, "text/html")
        client = client_from_conf(placement_conf(proxy.url, tmp_path))
        client.sleep = lambda _delay: None
        proxy.fail_next = 2
        assert client.request("GET", "/resource_providers").status == 200
        proxy.fail_next = 10
        with pytest.raises(PlacementUnavailable) as failed:
            client.request("GET", "/resource_providers")
        assert "503" in str(failed.value)
        assert "No server is available" in str(failed.value)
        proxy.fail_next, proxy.fail_status = 1, 403  # a 4xx page: at once
        with pytest.raises(PlacementError, match="403"):
            client.request("GET", "/resource_providers")
        # keystonemiddleware's refusal: JSON, but not Placement's errors
        proxy.fail_page = (KEYSTONE_401, "application/json")
        proxy.fail_next, proxy.fail_status = 1, 401
        with pytest.raises(PlacementError, match=r"401.*\[placement\]") as no:
            client.request("GET", "/resource_providers")
        assert "requires authentication" in str(no.value)
        assert "{" not in str(no.value)  # its words, not its JSON


def test_a_restarted_syncer_rereads_only_providers_that_changed(
    placement_url, tmp_path, client
):
    from tests.placement_helpers import add_trait
    from vgpu_driver.driver import sync_placement
    from vgpu_driver.placement.sync import PlacementSync

    node = Node(placement_url, tmp_path)

    def restarted():
        return PlacementSync(
            client_from_conf(node.conf), node.nodename, store=node.driver.state
        )

    sync_placement(node.driver, restarted())
    providers = placement_view(client, node.nodename)
    syncer = restarted()
    start = syncer.client.request_count  # the client's version discovery
    syncer.refresh()
    assert syncer.client.request_count - start == 2  # lookup + tree only
    add_trait(client, providers["pci_0000_84_00_0"][2], "CUSTOM_OPERATOR")
    syncer = restarted()
    start = syncer.client.request_count
    syncer.refresh()
    # that provider's generation moved: its inventory and traits only
    assert syncer.client.request_count - start == 2 + 2
    tree = syncer.read_tree()
    assert (
        "CUSTOM_OPERATOR"
        in tree.data(f"{node.nodename}_pci_0000_84_00_0").traits
    )
    assert not sync_placement(node.driver, syncer).changed
    assert sync_placement(node.driver, syncer).requests == 0


def test_a_409_that_is_not_a_generation_conflict_is_reported_at_once(
    placement_url, tmp_path, client
):
    """Taking a resource class out of a provider while it is allocated
    (the type's class changed) is refused by Placement (409
    placement.inventory.inuse): that is no generation race, so it is
    reported as the error it is, not re-read and retried. (Where guests
    use the devices, the provider keeps its class until they go: the
    allocation here is on 85, where no guest runs, as one whose guest
    was never defined, or is on another host, would be.)"""
    from tests.placement_helpers import allocate
    from vgpu_driver.exception import PlacementError

    node = Node(placement_url, tmp_path, host_name="m10")
    node.sync()
    rp = placement_view(client, node.nodename)["pci_0000_85_00_0"][2]
    allocate(client, str(uuid.uuid4()), rp, amount=4)
    node.configure(
        node.description.config
        + "[vgpu_nvidia-35]\nmdev_class = CUSTOM_OTHER\n"
    )
    with pytest.raises(PlacementError) as caught:
        node.sync()
    assert "inventory.inuse" in str(caught.value)
    assert "still conflicting" not in str(caught.value)


def test_a_4xx_answer_is_not_retried_and_is_reported_as_itself(
    placement_url, tmp_path
):
    from vgpu_driver.exception import PlacementError, PlacementUnavailable
    from vgpu_driver.placement.client import PlacementNameUnknown

    client = client_from_conf(placement_conf(placement_url, tmp_path))
    missing = str(uuid.uuid4())
    with pytest.raises(PlacementError) as caught:
        client.request("GET", f"/resource_providers/{missing}")
    assert not isinstance(caught.value, PlacementUnavailable)
    assert "404" in str(caught.value) and missing in str(caught.value)
    assert client.statuses[404] == 1  # asked once
    # a 400 that names no unknown class or trait: itself, at once, and
    # what the client knows of Placement's names is kept
    client.ensure_traits({"CUSTOM_KEPT_KNOWN"})
    with pytest.raises(PlacementError) as caught:
        client.request("PUT", "/traits/not-a-custom-trait", ok=(201, 204))
    assert not isinstance(caught.value, PlacementNameUnknown)
    assert "400" in str(caught.value) and client.statuses[400] == 1
    assert "CUSTOM_KEPT_KNOWN" in client._known_traits


@pytest.mark.parametrize(
    ("kind", "template", "unused", "provider"),
    [
        # a trait the pGPU's type gives, then no longer
        ("traits", "CUSTOM_GOLD", ("traits = {}\n", ""), "pci_0000_84_00_0"),
        # the mlx5 type's custom class ("Unknown resource class"), the
        # type then not enabled
        (
            "resource_classes",
            "CUSTOM_MLX5",
            ("mlx5_core-local", "mlx5_core-none"),
            "pci_0000_3b_00_0",
        ),
    ],
)
def test_a_name_deleted_behind_the_client_s_back_is_made_again(
    placement_url, tmp_path, client, kind, template, unused, provider
):
    """Without a re-read of Placement, the client still believes in a
    custom trait or resource class someone deleted once nothing used it:
    the 400 naming it makes it forget what it knew, and the write
    succeeds on the next attempt."""
    name = f"{template}_{uuid.uuid4().hex[:8].upper()}"  # this test's
    node = Node(placement_url, tmp_path)
    config = node.description.config.replace(template, name)
    node.configure(config)
    node.sync()
    node.configure(config.replace(unused[0].format(name), unused[1]))
    node.sync()
    assert name not in str(placement_view(client, node.nodename))
    client.request("DELETE", f"/{kind}/{name}", ok=(204,))
    node.configure(config)
    node.sync()
    assert name in str(placement_view(client, node.nodename)[provider])
    assert node.syncer.client.statuses[400] == 1  # the one that told


def test_inventories_batched_fall_back_one_by_one_on_a_conflict(
    placement_url, tmp_path, client
):
    """Another writer moves a provider's generation between our read and
    the batched inventories: Placement refuses the whole batch (409), and
    each inventory is then written on its own, the stale one after a
    re-read. Nothing is lost."""
    node = Node(placement_url, tmp_path)
    writer = node.syncer.writer
    checked = writer.inventory_differs
    bumped = []

    def racing(uuid, inventory):
        if not bumped and uuid != node.syncer.root_uuid:
            traits = client.request(
                "GET", f"/resource_providers/{uuid}/traits"
            ).body
            client.ensure_traits(["CUSTOM_SOMEONE_ELSE"])
            client.request(
                "PUT",
                f"/resource_providers/{uuid}/traits",
                body={
                    "resource_provider_generation": traits[
                        "resource_provider_generation"
                    ],
                    "traits": [*traits["traits"], "CUSTOM_SOMEONE_ELSE"],
                },
            )
            bumped.append(uuid)
        return checked(uuid, inventory)

    writer.inventory_differs = racing
    node.sync()
    assert bumped and node.syncer.client.statuses[409] >= 2
    assert writer.batching  # a conflict is no reason to stop batching
    placed = {
        v[2]: v[0] for v in placement_view(client, node.nodename).values()
    }
    tree = node.syncer.read_tree()
    children = [
        tree.data(u)
        for u in tree.get_provider_uuids(node.nodename)
        if tree.data(u).inventory
    ]
    assert len(children) >= 2
    for data in children:
        assert placed[data.uuid] == {
            rc: (rec["total"], rec["reserved"])
            for rc, rec in data.inventory.items()
        }


def test_a_placement_that_forbids_the_reshaper_gets_one_by_one(
    placement_url, tmp_path, client
):
    with FaultProxy(placement_url) as proxy:
        proxy.refuse, proxy.fail_status = {"/reshaper"}, 403
        node = Node(proxy.url, tmp_path)
        node.sync()
        assert not node.syncer.writer.batching
        view = placement_view(client, node.nodename)
        assert sum(1 for v in view.values() if v[0]) >= 2


def test_a_root_someone_else_made_is_adopted_not_duplicated(
    placement_url, tmp_path, client
):
    """Nova made the compute node's provider (its own uuid): the first
    sync's create is refused (409), and the tree goes under Nova's."""
    node = Node(placement_url, tmp_path)
    nova_root = str(uuid.uuid4())
    client.request(
        "POST",
        "/resource_providers",
        body={"name": node.nodename, "uuid": nova_root},
        ok=(200, 201),
    )
    report = node.sync()
    assert node.nodename not in report.created
    view = placement_view(client, node.nodename)
    children = [v for v in view.values() if v[3] is not None]
    assert children and all(v[3] == nova_root for v in children)
