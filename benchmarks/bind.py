"""Cost of a bind: libvirt calls and time, for 16 and 2048 guests.

Dense hosts served by libvirt's test driver (16 pGPUs), each with free
mdevs to reuse (the test driver cannot create mdevs; a create adds its
own create + define + autostart calls). After one discovery, binds are
timed and their libvirt calls counted; the count must not grow with the
number of guests or mdevs.

    python -m benchmarks.bind
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from benchmarks.common import conf_for, dense
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.host import description as hostdesc
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.model.provider_tree import ProviderTree

PARENTS = 16
FREE = 64  # free mdevs to reuse, 4 per pGPU


def measure(guests: int) -> dict[str, float]:
    description = dense(PARENTS, guests + FREE, guests)
    with tempfile.TemporaryDirectory() as tmp:
        uri, sysfs = hostdesc.materialize(description, Path(tmp))
        conf = conf_for(description.config, Path(tmp))
        host = LibvirtHost(uri, sysfs)
        driver = VgpuDriver(conf, host)
        tree = ProviderTree()
        tree.new_root("bench", "8f0b2c1e-1d7a-4b6e-9a51-0c3f5e7d9b21")
        plans = driver.update_provider_tree(tree, "bench")
        uuids = [tree.data(p.name).uuid for p in plans]
        host.calls.clear()
        binds = 32
        start = time.perf_counter()
        for i in range(binds):
            allocations = {uuids[i % len(uuids)]: {"resources": {"VGPU": 1}}}
            devices = driver.allocate_mdevs(f"bench-{i}", allocations)
            assert not devices[0].created
        elapsed = time.perf_counter() - start
        calls = host.call_count
    return {
        "guests": guests,
        "mdevs": guests + FREE,
        "calls_per_bind": calls / binds,
        "ms_per_bind": elapsed / binds * 1000,
    }


def main() -> None:
    print(
        f"{'pGPUs':>5} {'guests':>6} {'mdevs':>5} | "
        f"{'libvirt calls/bind':>18} {'ms/bind':>8}"
    )
    for guests in (16, 2048):
        r = measure(guests)
        print(
            f"{PARENTS:>5} {r['guests']:>6} {r['mdevs']:>5} | "
            f"{r['calls_per_bind']:>18.1f} {r['ms_per_bind']:>8.2f}"
        )


if __name__ == "__main__":
    main()
