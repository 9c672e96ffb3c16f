"""A real Placement service (openstack-placement on SQLite), started once
per test session on a free 127.0.0.1 port, and clients for it."""

from __future__ import annotations

import pytest

from tests.placement_helpers import placement_conf
from vgpu_driver.placement.client import PlacementClient, client_from_conf
from vgpu_driver.placement.server import EmbeddedPlacement


@pytest.fixture(scope="session")
def placement_url(tmp_path_factory):
    directory = tmp_path_factory.mktemp("placement")
    with EmbeddedPlacement(directory) as placement:
        yield placement.url


@pytest.fixture
def make_client(placement_url, tmp_path):
    def factory(url: str | None = None) -> PlacementClient:
        return client_from_conf(placement_conf(url or placement_url, tmp_path))

    return factory


@pytest.fixture
def client(make_client) -> PlacementClient:
    return make_client()
