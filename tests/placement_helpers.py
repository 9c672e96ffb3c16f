"""Helpers of the tests against a real Placement (tests/functional,
tests/nova): a configuration pointed at it, simulated compute nodes
syncing to it, and what it holds, read back or written as Nova would."""

from __future__ import annotations

import textwrap
import threading
import time
import uuid
from pathlib import Path

from oslo_config import cfg

from tests.helpers import load
from vgpu_driver import conf as vconf
from vgpu_driver.driver import VgpuDriver, sync_placement
from vgpu_driver.placement.client import client_from_conf
from vgpu_driver.placement.sync import PlacementSync
from vgpu_driver.sim.simulated import SimulatedHost


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


class PlacementNode:
    """A simulated compute node syncing to the real Placement."""

    def __init__(
        self,
        url,
        tmp_path,
        host_name="demo",
        config=None,
        nodename=None,
        host=None,
    ):
        self.description = load(host_name)
        self.host = host or SimulatedHost(self.description)
        self.nodename = nodename or f"node-{uuid.uuid4().hex[:8]}"
        self.url, self.tmp_path = url, tmp_path
        self.configure(config or self.description.config)
        self.syncer = PlacementSync(
            client_from_conf(self.conf), self.nodename, refresh_interval=3600
        )

    def configure(self, config):
        self.conf = placement_conf(
            self.url, self.tmp_path, textwrap.dedent(config)
        )
        self.conf.set_override(
            "state_path", str(self.tmp_path / self.nodename), "devices"
        )
        self.driver = VgpuDriver(self.conf, self.host)

    def sync(self):
        return sync_placement(self.driver, self.syncer)


def sync_all_at_once(nodes, rounds=1):
    """Every node syncs in its own thread; returns the errors."""
    errors = []

    def run(node):
        try:
            for _ in range(rounds):
                node.sync()
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def placement_view(client, nodename):
    """name -> (inventory summary, traits), read straight from Placement."""
    [root] = client.request(
        "GET", f"/resource_providers?name={nodename}"
    ).body["resource_providers"]
    providers = client.request(
        "GET", f"/resource_providers?in_tree={root['uuid']}"
    ).body["resource_providers"]
    view = {}
    for provider in providers:
        inv = client.request(
            "GET", f"/resource_providers/{provider['uuid']}/inventories"
        ).body["inventories"]
        traits = client.request(
            "GET", f"/resource_providers/{provider['uuid']}/traits"
        ).body["traits"]
        short = provider["name"].removeprefix(f"{nodename}_")
        view[short] = (
            {rc: (r["total"], r["reserved"]) for rc, r in inv.items()},
            set(traits),
            provider["uuid"],
            provider["parent_provider_uuid"],
        )
    return view


def summary(view):
    return {name: v[0] for name, v in view.items()}


def add_trait(client, rp, trait):
    """An operator adds a trait (as osc-placement would)."""
    current = client.request("GET", f"/resource_providers/{rp}/traits").body
    client.ensure_traits([trait])
    client.request(
        "PUT",
        f"/resource_providers/{rp}/traits",
        body={
            "resource_provider_generation": current[
                "resource_provider_generation"
            ],
            "traits": [*current["traits"], trait],
        },
    )


def put_inventory(client, rp, inventory):
    """Someone else (Nova's periodic, an operator) sets a provider's
    inventory."""
    current = client.request("GET", f"/resource_providers/{rp}").body
    client.request(
        "PUT",
        f"/resource_providers/{rp}/inventories",
        body={
            "resource_provider_generation": current["generation"],
            "inventories": inventory,
        },
    )


def put_allocations(client, consumer, allocations, project="p", user="u"):
    """Replace ``consumer``'s allocations (provider uuid -> resources).
    The Placement is the session's and the hosts' guests have fixed
    uuids, so another test may have left this consumer allocations: its
    generation is read first (a new consumer's is None)."""
    held = client.request("GET", f"/allocations/{consumer}").body
    client.request(
        "PUT",
        f"/allocations/{consumer}",
        body={
            "allocations": {
                rp: {"resources": res} for rp, res in allocations.items()
            },
            "project_id": project,
            "user_id": user,
            "consumer_generation": held.get("consumer_generation"),
        },
        ok=(204,),
    )


def allocate(client, consumer, rp_uuid, rc="VGPU", amount=1):
    put_allocations(client, consumer, {rp_uuid: {rc: amount}})
