"""Cost of a bind: libvirt calls and time, for 16 and 2048 guests.

Dense hosts served by libvirt's test driver (16 pGPUs), each with free
mdevs to reuse (the test driver cannot create mdevs; a create adds its
own create + define + autostart calls). After the first refresh (which
reads no guest here), binds are timed and their libvirt calls counted.
The first bind reads every guest once (a service does it in init_host);
the count of every later bind must not grow with the number of guests or
mdevs. Each bound guest is then defined in libvirt
and reported with ``guest_defined`` (two calls, not counted as the
bind's), as a compute service does, so spawn claims end and the claims
file stays the size of the unfinished binds.

    python -m benchmarks.bind [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks.common import conf_for, dense, machine
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.model.provider_tree import ProviderTree
from vgpu_driver.records.claims import ClaimsRecord
from vgpu_driver.records.store import StateStore
from vgpu_driver.sim import description as hostdesc

PARENTS = 16
FREE = 64  # free mdevs to reuse, 4 per pGPU


def _claims_on_disk(state_path: str) -> dict[str, object]:
    """The claims as another process reads them (the claims file and the
    saves appended to its journal since)."""
    record = ClaimsRecord(StateStore(state_path))
    with record.locked():
        return dict(record.claims)


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
        binds = 32
        calls: list[int] = []
        cpu: list[float] = []
        largest_claims = 0
        for i in range(binds):
            allocations = {uuids[i % len(uuids)]: {"resources": {"VGPU": 1}}}
            instance = str(uuid.uuid4())
            host.calls.clear()
            start = time.process_time()
            devices = driver.allocate_mdevs(instance, allocations)
            cpu.append((time.process_time() - start) * 1000)
            calls.append(host.call_count)
            assert not devices[0].created
            largest_claims = max(
                largest_claims, len(_claims_on_disk(conf.devices.state_path))
            )
            host.connection().defineXML(
                _domain(instance, f"bench-{i}", driver, devices)
            )
            assert driver.guest_defined(instance) == [devices[0].id]
        left = len(driver.binder.claims())
    return {
        "guests": guests,
        "mdevs": guests + FREE,
        "first_calls": calls[0],
        "first_cpu_ms": cpu[0],
        "calls_per_bind": max(calls[1:]),
        "cpu_ms": (min(cpu[1:]), statistics.median(cpu[1:]), max(cpu[1:])),
        "largest_claims": largest_claims,
        "claims_left": left,
    }


def _domain(instance: str, name: str, driver, devices) -> str:  # type: ignore[no-untyped-def]
    hostdevs = "".join(driver.guest_hostdev_xml(devices))
    return (
        f"<domain type='test'><name>{name}</name><uuid>{instance}</uuid>"
        "<memory>1048576</memory><os><type>hvm</type></os>"
        f"<devices>{hostdevs}</devices></domain>"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="the 16-guest host only"
    )
    args = parser.parse_args()
    print(machine())
    print(
        f"{'pGPUs':>5} {'guests':>6} {'mdevs':>5} | "
        f"{'first bind calls / CPU ms':>25} | "
        f"{'later: calls (max)':>18} | {'CPU ms min/med/max':>23} | "
        "claims on disk (max / after)"
    )
    for guests in (16,) if args.quick else (16, 2048):
        r = measure(guests)
        low, mid, high = r["cpu_ms"]
        print(
            f"{PARENTS:>5} {r['guests']:>6} {r['mdevs']:>5} | "
            f"{r['first_calls']:>14} / {r['first_cpu_ms']:>8.1f} | "
            f"{r['calls_per_bind']:>18} | "
            f"{low:>7.2f} {mid:>7.2f} {high:>7.2f} | "
            f"{r['largest_claims']} / {r['claims_left']}"
        )


if __name__ == "__main__":
    main()
