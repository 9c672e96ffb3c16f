"""Discovery cost: libvirt calls and time, against Nova's in-tree cost.

Builds libvirt test-driver hosts (1, 16 and 64 pGPUs with up to 2048
mdevs and 2048 domains), then measures a first discovery (with the full
guest scan a service does at start) and a steady-state refresh. Nova's
in-tree code costs 2 + 2 * (parents + mdevs) calls per inventory refresh.

Then NVIDIA SR-IOV hosts (1 and 8 L40s, 32 VFs each, half of them in
use), whose vGPUs are VFs read from sysfs: the same two figures, and the
sysfs files a steady scan reads.

    python -m benchmarks.discovery [--quick]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from benchmarks.common import machine, spread, sriov
from vgpu_driver.host import sysfs_files
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.sim import description as hostdesc

SHAPES = [(1, 16, 16), (16, 256, 256), (16, 2048, 2048), (64, 2048, 2048)]
QUICK = [(1, 16, 16), (16, 256, 256)]
SRIOV_CARDS = [1, 8]


def measure(parents: int, mdevs: int, guests: int) -> dict[str, float]:
    raw = hostdesc.dense_raw(parents, mdevs, guests)
    description = hostdesc.parse(json.dumps(raw), "bench")
    with tempfile.TemporaryDirectory() as tmp:
        uri, sysfs = hostdesc.materialize(description, Path(tmp))
        host = LibvirtHost(uri, sysfs)
        host.connection()  # opening parses the XML file: not our cost
        host.calls.clear()
        start = time.perf_counter()
        first = host.discover()
        first_time = time.perf_counter() - start
        first_calls = host.call_count
        assert len(first.mdevs) == mdevs and len(first.guests) == guests
        host.calls.clear()
        runs = 20
        samples = []
        for _ in range(runs):
            start = time.perf_counter()
            host.discover()
            samples.append((time.perf_counter() - start) * 1000)
        steady_calls = host.call_count / runs
        host.close()
    return {
        "parents": parents,
        "mdevs": mdevs,
        "guests": guests,
        "first_calls": first_calls,
        "first_ms": first_time * 1000,
        "steady_calls": steady_calls,
        "steady_ms": spread(samples),
        "nova_calls": 2 + 2 * (parents + mdevs),
    }


def measure_sriov(cards: int) -> dict[str, float | str]:
    """First and steady discovery of ``cards`` L40s, and the sysfs files
    a steady scan reads (counted by wrapping the attribute reader)."""
    description = sriov(cards)
    with tempfile.TemporaryDirectory() as tmp:
        uri, sysfs = hostdesc.materialize(description, Path(tmp))
        host = LibvirtHost(uri, sysfs)
        host.connection()
        start = time.perf_counter()
        first = host.discover()
        first_ms = (time.perf_counter() - start) * 1000
        assert len(first.pfs) == cards
        samples = []
        for _ in range(20):
            start = time.perf_counter()
            host.discover()
            samples.append((time.perf_counter() - start) * 1000)
        read = [0]
        real_read = sysfs_files.read

        def counted(path: str, dir_fd: int | None = None) -> str | None:
            read[0] += 1
            return real_read(path, dir_fd)

        sysfs_files.read = counted  # type: ignore[assignment]
        try:
            host.discover()
        finally:
            sysfs_files.read = real_read
        host.close()
    return {
        "vfs": sum(pf.vf_count for pf in description.pfs),
        "first_ms": first_ms,
        "steady_ms": spread(samples),
        "files": read[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    header = (
        f"{'pGPUs':>5} {'mdevs':>5} {'guests':>6} | {'first calls':>11} "
        f"{'first ms':>8} | {'steady calls':>12} "
        f"{'steady ms min/med/max':>22} | "
        f"{'Nova calls':>10}"
    )
    print(machine())
    print(header)
    print("-" * len(header))
    for shape in QUICK if args.quick else SHAPES:
        r = measure(*shape)
        print(
            f"{r['parents']:>5} {r['mdevs']:>5} {r['guests']:>6} | "
            f"{r['first_calls']:>11} {r['first_ms']:>8.1f} | "
            f"{r['steady_calls']:>12.0f} {r['steady_ms']:>22} | "
            f"{r['nova_calls']:>10}"
        )
    print()
    header = (
        f"{'L40s':>5} {'VFs':>5} | {'first ms':>8} | "
        f"{'steady ms min/med/max':>22} {'files read':>10}"
    )
    print("NVIDIA SR-IOV (VFs read from sysfs)")
    print(header)
    print("-" * len(header))
    for cards in SRIOV_CARDS[:1] if args.quick else SRIOV_CARDS:
        r = measure_sriov(cards)
        print(
            f"{cards:>5} {r['vfs']:>5} | {r['first_ms']:>8.1f} | "
            f"{r['steady_ms']:>22} {r['files']:>10}"
        )


if __name__ == "__main__":
    main()
