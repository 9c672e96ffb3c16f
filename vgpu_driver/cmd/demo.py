"""``vgpu-driver demo``: the main job on its embedded default.

It works on a shipped simulated host (``demo`` unless
``--host-description`` names another), served by libvirt's real test
driver, with the host's own nova.conf-style configuration. It starts an
embedded Placement (the real service, SQLite) on 127.0.0.1, reports the
host to it, shows the tree as Placement holds it, and asks Placement
which pGPUs could serve a few realistic requests.
"""

from __future__ import annotations

import uuid as uuidlib
from pathlib import Path
from typing import Any

from vgpu_driver.cmd import check_config, discover, output
from vgpu_driver.cmd.context import Context
from vgpu_driver.cmd.inventory import print_table, tree_report
from vgpu_driver.cmd.sync import describe
from vgpu_driver.driver import VgpuDriver, sync_placement
from vgpu_driver.host.base import Host
from vgpu_driver.host.simulated import SimulatedHost
from vgpu_driver.placement.client import PlacementClient, client_from_conf
from vgpu_driver.placement.server import EmbeddedPlacement
from vgpu_driver.placement.sync import PlacementSync

REQUESTS = [
    ("one vGPU", "resources=VGPU:1"),
    (
        "one vGPU of type nvidia-35",
        "resources=VGPU:1&required=CUSTOM_NVIDIA_35",
    ),
    (
        "one vGPU able to drive 3840x2160",
        "resources=VGPU:1&required=HW_GPU_RESOLUTION_W3840H2160",
    ),
    (
        "two vGPUs from two different pGPUs",
        "resources1=VGPU:1&resources2=VGPU:1&group_policy=isolate",
    ),
    ("one generic mlx5 mdev", "resources=CUSTOM_MLX5:1"),
]


def _banner(title: str) -> None:
    print(f"\n=== {title} ===\n")


def candidates(
    client: PlacementClient, query: str, names: dict[str, str]
) -> list[list[str]]:
    """Allocation candidates: for each, the providers it would use."""
    body = client.request("GET", f"/allocation_candidates?{query}").body
    found: list[list[str]] = []
    for request in body["allocation_requests"]:
        used = sorted(names.get(rp, rp) for rp in request["allocations"])
        if used not in found:  # isolated groups come in both orders
            found.append(used)
    return found


def run(context: Context) -> int:
    if context.description is not None:
        _banner(f"Simulated host: {context.description.source}")
        print(context.description.summary)
        _banner("Configuration")
        print(context.description.config)
    _banner("Effective configuration")
    rc = check_config.run(context.conf)
    if rc:
        return rc
    _banner("Discovery (libvirt test driver + sysfs)")
    discover.run(context)
    workdir = Path(context.workdir.name) if context.workdir else Path(".")
    with EmbeddedPlacement(workdir / "placement") as placement:
        _banner(f"Placement at {placement.url} (openstack-placement, SQLite)")
        context.add_config(placement.conf_section())
        return _with_placement(context)


def _with_placement(context: Context) -> int:
    conf = context.conf
    host: Host = context.host
    if context.description is not None:
        # libvirt's test driver cannot create mdevs: sync and bind on the
        # simulated host, which reports the same (the contract tests).
        host = SimulatedHost(context.description)
    driver = VgpuDriver(conf, host)
    syncer = PlacementSync(client_from_conf(conf), conf.host)
    report = sync_placement(driver, syncer)
    print(f"First sync:  {describe(report)}")
    report = sync_placement(driver, syncer)
    print(f"Second sync: {describe(report)}")
    _banner("The provider tree as Placement holds it")
    syncer.refresh()
    tree = syncer.read_tree()
    tree_data = tree_report(tree, conf.host)
    print_table(tree_data)
    names = {
        tree.data(p["name"]).uuid: p["name"].removeprefix(f"{conf.host}_")
        for p in tree_data["providers"]
    }
    _banner("Allocation candidates")
    rows: list[list[Any]] = []
    for title, query in REQUESTS:
        found = candidates(syncer.client, query, names)
        shown = [" + ".join(c) for c in found[:3]]
        if len(found) > 3:
            shown.append(f"... ({len(found)} in all)")
        rows.append([title, len(found), shown or None])
    output.table(["Request", "Candidates", "Served by"], rows)
    return _bind(driver, syncer, names)


def _bind(
    driver: VgpuDriver, syncer: PlacementSync, names: dict[str, str]
) -> int:
    """Claim a candidate in Placement for a pretend instance, bind it,
    show the guest's devices, release."""
    client = syncer.client
    instance = str(uuidlib.uuid4())
    title, query = REQUESTS[3]
    body = client.request("GET", f"/allocation_candidates?{query}").body
    request = body["allocation_requests"][0]
    client.request(
        "PUT",
        f"/allocations/{instance}",
        body={
            **request,
            "project_id": "demo",
            "user_id": "demo",
            "consumer_generation": None,
        },
        ok=(204,),
    )
    allocations = request["allocations"]
    _banner(f"Binding instance {instance} ({title})")
    print("Allocations in Placement:")
    for rp, alloc in allocations.items():
        print(f"  {names.get(rp, rp)}: {alloc['resources']}")
    devices = driver.allocate_mdevs(instance, allocations)
    for device in devices:
        how = "created" if device.created else "reused"
        print(f"\n{device.kind} {device.id} on {device.parent} ({how}):")
        print(device.hostdev_xml())
    _banner(f"Deleting instance {instance}")
    released = driver.release_mdevs(instance)
    client.request("DELETE", f"/allocations/{instance}", ok=(204,))
    print(f"Released {', '.join(released)}; allocation deleted.")
    print(f"Claims left: {len(driver.binder.claims())}")
    return 0
