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
from typing import Any

from vgpu_driver.cmd import check_config, discover, output
from vgpu_driver.cmd.context import Context
from vgpu_driver.cmd.inventory import print_table, tree_report
from vgpu_driver.cmd.sync import as_json as sync_json
from vgpu_driver.cmd.sync import describe
from vgpu_driver.conf import loader
from vgpu_driver.driver import VgpuDriver, sync_placement
from vgpu_driver.host import domain_xml
from vgpu_driver.host.base import Host
from vgpu_driver.placement.client import PlacementClient, client_from_conf
from vgpu_driver.placement.server import EmbeddedPlacement
from vgpu_driver.placement.sync import PlacementSync
from vgpu_driver.sim.simulated import SimulatedHost

REQUESTS = [
    ("one vGPU", "resources=VGPU:1"),
    (
        "one vGPU of type nvidia-35",
        "resources=VGPU:1&required=CUSTOM_NVIDIA_35",
    ),
    (
        "one vGPU able to drive 2560x1600",
        "resources=VGPU:1&required=HW_GPU_RESOLUTION_W2560H1600",
    ),
    (
        "two vGPUs from two different pGPUs",
        "resources1=VGPU:1&resources2=VGPU:1&group_policy=isolate",
    ),
    ("one generic mlx5 mdev", "resources=CUSTOM_MLX5:1"),
]
# the one bound when it has candidates (else the first that has)
BOUND = REQUESTS[3][0]
Request = tuple[str, str, str | None]  # title, query, what is missing


def requests_for(report: dict[str, Any]) -> list[Request]:
    """The requests the demo asks Placement on the tree ``report``
    (:func:`~vgpu_driver.cmd.inventory.tree_report`): those of
    ``REQUESTS``, each with the resource class or trait it names that
    no provider has (Placement refuses such a request: it is not
    asked), then one device of each class offered that none of them
    asked for (another host than the demo's has its own)."""
    providers = report["providers"]
    classes = {rc for p in providers for rc in p["inventories"]}
    offered = classes | {t for p in providers for t in p["traits"]}
    found: list[Request] = []
    asked: set[str] = set()
    for title, query in REQUESTS:
        named = _named(query)
        missing = next((n for n in sorted(named) if n not in offered), None)
        found.append((title, query, missing))
        if missing is None:
            asked |= named & classes
    found.extend(
        (f"one {rc}", f"resources={rc}:1", None)
        for rc in sorted(classes - asked)
    )
    return found


def _named(query: str) -> set[str]:
    """The resource classes and traits a request names."""
    names = set()
    for part in query.split("&"):
        key, _sep, value = part.partition("=")
        for item in value.split(","):
            if key.startswith("resources"):
                names.add(item.partition(":")[0])
            elif key.startswith("required"):
                names.add(item.lstrip("!"))
    return names


class Steps:
    """What the demo shows: printed step by step as tables, or gathered
    into one JSON document printed at the end (``--format json``)."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.document: dict[str, Any] = {}

    def banner(self, title: str) -> None:
        if not self.as_json:
            print(f"\n=== {title} ===\n")

    def say(self, text: str) -> None:
        if not self.as_json:
            print(text)


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
    steps = Steps(context.conf.command.format == "json")
    rc = _show_host(context, steps)
    if rc:
        return rc
    # in the command's folder (never the current directory)
    with EmbeddedPlacement(context.folder() / "placement") as placement:
        steps.banner(
            f"Placement at {placement.url} (openstack-placement, SQLite)"
        )
        steps.document["placement"] = {"url": placement.url}
        context.add_config(placement.conf_section())
        rc = _with_placement(context, steps)
    if steps.as_json:
        output.dump_json(steps.document)
    return rc


def _show_host(context: Context, steps: Steps) -> int:
    """The simulated host, its configuration and its discovery."""
    if context.description is not None:
        steps.banner(f"Simulated host: {context.description.source}")
        steps.say(context.description.summary)
        steps.banner("Configuration")
        steps.say(context.description.config)
        steps.document["host"] = {
            "source": context.description.source,
            "summary": context.description.summary,
            "config": context.description.config,
        }
    if not steps.as_json:
        steps.banner("Effective configuration")
        rc = check_config.run(context.conf)
        if rc:
            return rc
        steps.banner("Discovery (libvirt test driver + sysfs)")
        return discover.run(context)
    config, errors = loader.read_device_config(context.conf)
    steps.document["configuration"] = {
        "types": check_config.type_rows(config),
        "warnings": [str(w) for w in config.warnings],
        "errors": [str(e) for e in errors],
    }
    if errors:
        output.dump_json(steps.document)
        return 2
    steps.document["discovery"] = discover.report(context.host.discover())
    return 0


def _with_placement(context: Context, steps: Steps) -> int:
    conf = context.conf
    host: Host = context.host
    if context.description is not None:
        # libvirt's test driver cannot create mdevs: sync and bind on the
        # simulated host, which reports the same (the contract tests).
        host = SimulatedHost(context.description)
    driver = VgpuDriver(conf, host)
    syncer = PlacementSync(client_from_conf(conf), conf.host)
    first = sync_placement(driver, syncer)
    steps.say(f"First sync:  {describe(first)}")
    second = sync_placement(driver, syncer)
    steps.say(f"Second sync: {describe(second)}")
    steps.document["placement"]["syncs"] = [
        sync_json(conf.host, first),
        sync_json(conf.host, second),
    ]
    steps.banner("The provider tree as Placement holds it")
    syncer.refresh()
    tree = syncer.read_tree()
    tree_data = tree_report(tree, conf.host)
    if steps.as_json:
        steps.document["placement"]["tree"] = tree_data
    else:
        print_table(tree_data)
    names = {
        tree.data(p["name"]).uuid: p["name"].removeprefix(f"{conf.host}_")
        for p in tree_data["providers"]
    }
    steps.banner("Allocation candidates")
    rows: list[list[Any]] = []
    found_all: list[dict[str, Any]] = []
    for title, query, missing in requests_for(tree_data):
        if missing is not None:
            found_all.append(
                {"request": title, "query": query, "not_asked": missing}
            )
            rows.append([title, None, f"not asked: no provider has {missing}"])
            continue
        found = candidates(syncer.client, query, names)
        found_all.append(
            {"request": title, "query": query, "candidates": found}
        )
        shown = [" + ".join(c) for c in found[:3]]
        if len(found) > 3:
            shown.append(f"... ({len(found)} in all)")
        rows.append([title, len(found), shown or None])
    steps.document["placement"]["allocation_candidates"] = found_all
    if not steps.as_json:
        output.table(["Request", "Candidates", "Served by"], rows)
    served = [r for r in found_all if r.get("candidates")]
    served.sort(key=lambda r: r["request"] != BOUND)
    if not served:
        steps.say("\nNo request has a candidate: nothing to bind.")
        steps.document["bind"] = None
        return 0
    return _bind(driver, syncer, names, steps, served[0])


def _bind(
    driver: VgpuDriver,
    syncer: PlacementSync,
    names: dict[str, str],
    steps: Steps,
    request: dict[str, Any],
) -> int:
    """Claim a candidate of ``request`` in Placement for a pretend
    instance, bind it, show the guest's devices, release."""
    client = syncer.client
    instance = str(uuidlib.uuid4())
    title, query = request["request"], request["query"]
    body = client.request("GET", f"/allocation_candidates?{query}").body
    chosen = body["allocation_requests"][0]
    client.request(
        "PUT",
        f"/allocations/{instance}",
        body={
            **chosen,
            "project_id": "demo",
            "user_id": "demo",
            "consumer_generation": None,
        },
        ok=(204,),
    )
    allocations = chosen["allocations"]
    steps.banner(f"Binding instance {instance} ({title})")
    steps.say("Allocations in Placement:")
    for rp, alloc in allocations.items():
        steps.say(f"  {names.get(rp, rp)}: {alloc['resources']}")
    devices = driver.allocate_mdevs(instance, allocations)
    for device in devices:
        how = "created" if device.created else "reused"
        steps.say(f"\n{device.kind} {device.id} on {device.parent} ({how}):")
        steps.say(domain_xml.hostdev_xml(device))
    steps.banner(f"Deleting instance {instance}")
    released = driver.release_mdevs(instance)
    client.request("DELETE", f"/allocations/{instance}", ok=(204,))
    left = len(driver.binder.claims())
    steps.say(f"Released {', '.join(released)}; allocation deleted.")
    steps.say(f"Claims left: {left}")
    steps.document["bind"] = {
        "instance": instance,
        "request": title,
        "allocations": {
            names.get(rp, rp): a["resources"] for rp, a in allocations.items()
        },
        "devices": [
            {**d.record(), "hostdev_xml": domain_xml.hostdev_xml(d)}
            for d in devices
        ],
        "released": released,
        "claims_left": left,
    }
    return 0
