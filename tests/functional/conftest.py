"""A real Placement service (openstack-placement on SQLite), started once
per test session on a free 127.0.0.1 port, and clients for it."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest
from oslo_config import cfg

from vgpu_driver import conf as vconf
from vgpu_driver.placement.client import PlacementClient, client_from_conf
from vgpu_driver.placement.server import EmbeddedPlacement


@pytest.fixture(scope="session")
def placement_url(tmp_path_factory):
    directory = tmp_path_factory.mktemp("placement")
    with EmbeddedPlacement(directory) as placement:
        yield placement.url


def placement_conf(
    url: str, directory: Path, extra: str = ""
) -> cfg.ConfigOpts:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"placement-{time.monotonic_ns()}.conf"
    path.write_text(
        textwrap.dedent(
            f"""
            [placement]
            auth_type = admin_token
            endpoint = {url}
            token = admin
            endpoint_override = {url}
            retry_delay = 0.05
            max_attempts = 3
            """
        )
        + textwrap.dedent(extra)
    )
    conf = cfg.ConfigOpts()
    vconf.register_opts(conf)
    conf(["--config-file", str(path)], default_config_files=[])
    return conf


@pytest.fixture
def make_client(placement_url, tmp_path):
    def factory(url: str | None = None) -> PlacementClient:
        return client_from_conf(placement_conf(url or placement_url, tmp_path))

    return factory


@pytest.fixture
def client(make_client) -> PlacementClient:
    return make_client()
