"""Time to build the provider tree on top of discovery.

Hosts of 16 and 64 pGPUs (2048 mdevs, 2048 guests) served by libvirt's
test driver, the library run as a compute service runs it: its records
on (kept in a scratch ``state_path``), libvirt's event loop running and
the node-device events watched. Reports the first update_provider_tree
(which reads no guest when they cannot change it), the guest scan a
service does once (init_host or its first bind), then a steady
discovery and a steady update_provider_tree (which discovers too) with
its CPU time.

    python -m benchmarks.provider_tree
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from benchmarks.common import conf_for, dense, event_loop, machine, spread
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.model.provider_tree import ProviderTree
from vgpu_driver.sim import description as hostdesc


def measure(parents: int, mdevs: int, guests: int) -> dict[str, float]:
    description = dense(parents, mdevs, guests)
    with tempfile.TemporaryDirectory() as tmp:
        uri, sysfs = hostdesc.materialize(description, Path(tmp))
        conf = conf_for(description.config, Path(tmp))  # records on
        event_loop()  # before the connection, as a service opens it
        host = LibvirtHost(uri, sysfs)
        host.watch_node_device_events()  # as the Nova integration does
        host.connection()
        driver = VgpuDriver(conf, host)
        tree = ProviderTree()
        tree.new_root("bench", "8f0b2c1e-1d7a-4b6e-9a51-0c3f5e7d9b21")
        start = time.perf_counter()
        plans = driver.update_provider_tree(tree, "bench")
        first = time.perf_counter() - start
        assert len(plans) == parents
        # the guests, read once (init_host or the first bind does it)
        start = time.perf_counter()
        driver.discover()
        scan = time.perf_counter() - start
        runs = 20
        discovery: list[float] = []
        total: list[float] = []
        cpu: list[float] = []
        for _ in range(runs):
            start = time.perf_counter()
            driver.discover()
            middle = time.perf_counter()
            cpu_start = time.process_time()
            driver.update_provider_tree(tree, "bench")
            cpu.append((time.process_time() - cpu_start) * 1000)
            end = time.perf_counter()
            discovery.append((middle - start) * 1000)
            total.append((end - middle) * 1000)
    return {
        "parents": parents,
        "first_ms": first * 1000,
        "scan_ms": scan * 1000,
        "discovery_ms": spread(discovery),
        "update_ms": spread(total),
        "update_cpu_ms": spread(cpu),
    }


def main() -> None:
    print(machine())
    print(
        "records on, node-device events watched; steady figures: "
        "min/median/max of 20 runs, milliseconds"
    )
    print(
        f"{'pGPUs':>5} {'mdevs':>5} | {'first ms':>8} | {'guests ms':>9} | "
        f"{'discovery':>17} | {'update_provider_tree':>20} | {'its CPU':>17}"
    )
    for parents in (16, 64):
        r = measure(parents, 2048, 2048)
        print(
            f"{r['parents']:>5} {2048:>5} | {r['first_ms']:>8.1f} | "
            f"{r['scan_ms']:>9.1f} | "
            f"{r['discovery_ms']:>17} | {r['update_ms']:>20} | "
            f"{r['update_cpu_ms']:>17}"
        )


if __name__ == "__main__":
    main()
