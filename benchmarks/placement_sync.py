"""Placement sync: HTTP requests and time, against the embedded Placement.

* one host (the demo host, 6 device providers): first sync and no-op sync;
* 100 simulated hosts with 8 pGPUs each, syncing at once (16 threads)
  against one embedded Placement, then a no-op round.

    python -m benchmarks.placement_sync [--hosts N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.common import conf_for, dense, machine, spread
from vgpu_driver.driver import VgpuDriver, sync_placement
from vgpu_driver.placement.client import client_from_conf
from vgpu_driver.placement.server import EmbeddedPlacement
from vgpu_driver.placement.sync import PlacementSync, SyncReport
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim.simulated import SimulatedHost


def make_node(
    directory: Path,
    section: str,
    description: hostdesc.HostDescription,
    nodename: str,
) -> tuple[VgpuDriver, PlacementSync]:
    conf = conf_for(description.config + section, directory, nodename)
    driver = VgpuDriver(conf, SimulatedHost(description))
    syncer = PlacementSync(
        client_from_conf(conf), nodename, store=driver.state
    )
    return driver, syncer


def timed(
    driver: VgpuDriver, syncer: PlacementSync
) -> tuple[SyncReport, float]:
    start = time.perf_counter()
    report = sync_placement(driver, syncer)
    return report, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--pgpus", type=int, default=8)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        EmbeddedPlacement(Path(tmp) / "placement") as placement,
    ):
        directory = Path(tmp)
        section = placement.conf_section()
        demo = hostdesc.load("demo")
        print(machine())
        print("times: min/median/max ms")
        firsts, noops, restarts = [], [], []
        for i in range(5):  # five new hosts: a first sync each
            driver, syncer = make_node(directory, section, demo, f"demo-{i}")
            first, first_s = timed(driver, syncer)
            firsts.append(first_s * 1000)
        for _ in range(20):
            noop, noop_s = timed(driver, syncer)
            noops.append(noop_s * 1000)
        for _ in range(10):
            # a new process: new client (version discovery), cache on disk
            restarted = PlacementSync(
                client_from_conf(driver.conf), "demo-4", store=driver.state
            )
            again, again_s = timed(driver, restarted)
            restarts.append(again_s * 1000)
        print("One host (demo: 6 device providers)")
        print(f"  first sync: {first.requests:4d} requests {spread(firsts)}")
        print(f"  no-op sync: {noop.requests:4d} requests {spread(noops)}")
        print(
            f"  restarted, no change: {again.requests:4d} requests "
            f"{spread(restarts)} (GET /, lookup, tree listing)"
        )

        host = dense(args.pgpus, args.pgpus * 4, args.pgpus * 2)
        nodes = [
            make_node(directory, section, host, f"bench-{i:03d}")
            for i in range(args.hosts)
        ]

        def one(node: tuple[VgpuDriver, PlacementSync]) -> float:
            return timed(*node)[1] * 1000

        with ThreadPoolExecutor(16) as pool:
            start = time.perf_counter()
            per_host = list(pool.map(one, nodes))
            first_all = time.perf_counter() - start
            total = sum(n[1].reported_requests for n in nodes)
            start = time.perf_counter()
            per_host_noop = list(pool.map(one, nodes))
            noop_all = time.perf_counter() - start
            noop_total = sum(n[1].reported_requests for n in nodes) - total
        print(f"{args.hosts} hosts x {args.pgpus} pGPUs, 16 at a time")
        print(
            f"  first sync: {total:5d} requests {first_all:8.2f} s "
            f"({total / first_all:.0f} req/s); per host {spread(per_host)}"
        )
        print(
            f"  no-op sync: {noop_total:5d} requests {noop_all:8.2f} s; "
            f"per host {spread(per_host_noop)}"
        )
        providers = placement_count(syncer)
        print(f"  providers in Placement: {providers}")


def placement_count(syncer: PlacementSync) -> int:
    body = syncer.client.request("GET", "/resource_providers").body
    return len(body["resource_providers"])


if __name__ == "__main__":
    main()
