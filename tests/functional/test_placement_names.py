"""A name Placement does not know (a custom resource class or trait it
lost, restarted on an empty database), told apart from Placement's other
refusals by its own answers: on every request that can send one, the
client raises :class:`PlacementNameUnknown` (the writer then creates the
names again and resends); a request that is wrong otherwise is a plain
error, sent once."""

from __future__ import annotations

import uuid

import pytest

from vgpu_driver.exception import PlacementError
from vgpu_driver.placement.client import PlacementNameUnknown

pytestmark = pytest.mark.functional

LOST = "CUSTOM_LOST_" + uuid.uuid4().hex[:8].upper()


@pytest.fixture
def provider(client):
    rp = str(uuid.uuid4())
    client.request(
        "POST", "/resource_providers", body={"name": f"names-{rp}", "uuid": rp}
    )
    return rp


def _unknown_name_requests(rp):
    """Each request that names ``LOST``: its kind -> (method, path,
    body)."""
    inventory = {"resource_provider_generation": 0}
    return {
        "inventories": (
            "PUT",
            f"/resource_providers/{rp}/inventories",
            {**inventory, "inventories": {LOST: {"total": 1}}},
        ),
        "traits": (
            "PUT",
            f"/resource_providers/{rp}/traits",
            {**inventory, "traits": [LOST]},
        ),
        "reshaper": (
            "POST",
            "/reshaper",
            {
                "inventories": {
                    rp: {**inventory, "inventories": {LOST: {"total": 1}}}
                },
                "allocations": {},
            },
        ),
        "allocations": (
            "PUT",
            f"/allocations/{uuid.uuid4()}",
            {
                "allocations": {rp: {"resources": {LOST: 1}}},
                "project_id": "p",
                "user_id": "u",
                "consumer_generation": None,
            },
        ),
    }


@pytest.mark.parametrize(
    "which", ["inventories", "traits", "reshaper", "allocations"]
)
def test_a_name_placement_does_not_know_is_told_as_such(
    client, provider, which
):
    method, path, body = _unknown_name_requests(provider)[which]
    client._known_classes.add(LOST)
    client._known_traits.add(LOST)
    sent = client.request_count
    with pytest.raises(PlacementNameUnknown, match=LOST):
        client.request(method, path, body=body, ok=(200, 204))
    assert client.request_count - sent == 1
    # what it knew is forgotten: the next write creates the names again
    assert LOST not in client._known_classes | client._known_traits


@pytest.mark.parametrize(
    "inventory",
    [
        {"VGPU": {"total": "four"}},  # not an integer
        {"VGPU": {"total": 4, "unknown_field": 1}},  # not in the schema
    ],
)
def test_a_request_wrong_otherwise_is_a_plain_error_sent_once(
    client, provider, inventory
):
    client._known_classes.add(LOST)
    sent = client.request_count
    with pytest.raises(PlacementError, match="400") as refused:
        client.request(
            "PUT",
            f"/resource_providers/{provider}/inventories",
            body={"resource_provider_generation": 0, "inventories": inventory},
        )
    assert not isinstance(refused.value, PlacementNameUnknown)
    assert client.request_count - sent == 1
    assert LOST in client._known_classes  # nothing Placement lost
