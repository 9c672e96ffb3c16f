"""A restart as a compute service makes one: a new process, timed from
the setup its driver makes before ``init_host`` to the end of its first
refresh, beside Nova's in a new process of its own.

``benchmarks/service.py`` times its starts in one long-lived process,
one after the other: each finds the heap, the allocator and the caches
the run before left, after a garbage collection that the benchmark makes
itself. A restarted service finds none of that. Here each start runs in
a process of its own, the modules imported and libvirt's event loop
started before the clock (a compute service does both before its
driver's setup); the providers it is handed are those the last run
wrote, as Placement holds them:

* **ours**: the setup (``LibvirtHost`` and ``VgpuDriver`` built as the
  Nova integration builds them: the device configuration loaded and
  checked, the records opened and read), then ``init_host`` (every guest
  read) and the first ``update_provider_tree``, on the records a service
  on the same host left;
* **Nova**: its own vGPU setup (the mappings ``LibvirtDriver.__init__``
  makes and ``_get_supported_vgpu_types``), then its vGPU periodic and
  the guest scan it makes at every spawn (issue 24's yardstick for a
  start).

CPU ms (the process's, every thread) min/median/max of ``--runs`` new
processes per side and host, the two sides in turn; the ratios are of
the medians, the start alone (issue 24's figure) and with the setup.
Without Nova it prints this library's side only::

    tools/nova-venv python -m benchmarks.restart [--quick] [--runs N]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import conf_for, dense, event_loop, machine, spread
from benchmarks.service import FREE, Service, dump, rebuild

SHAPES = [(1, 16, 16), (4, 128, 128), (16, 512, 512), (64, 2048, 2048)]
QUICK = SHAPES[:2]
ROOT_DIR = Path(__file__).resolve().parents[1]


def settle() -> None:
    """glibc's free chunks merged now (``malloc_trim``): what the child
    did before the clock (the host's document read, the providers
    rebuilt) left many freed, and the first large allocation in the
    window timed merged them (``malloc_consolidate``, seen with
    ``perf``), 5 to 25 ms charged to whichever side's setup made it
    (Nova's, in about half its new processes at 4 and 16 pGPUs). A
    service's own start reads no such document. (A garbage collection
    here as well would leave the caches cold for the setup: not made.)"""
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL(None).malloc_trim(0)


def _cpu(fn: Any) -> float:
    start = time.process_time()
    fn()
    return (time.process_time() - start) * 1000


def ours(made: dict[str, Any]) -> dict[str, float]:
    """In a new process: this library's setup, then its start."""
    import libvirt

    from vgpu_driver.driver import VgpuDriver
    from vgpu_driver.host.libvirt_host import LibvirtHost
    from vgpu_driver.model.provider_tree import ProviderTree

    libvirt.registerErrorHandler(lambda *_: None, None)
    event_loop()
    conn = libvirt.open(made["uri"])
    conf = conf_for(made["config"], Path(made["tmp"]))
    tree = rebuild(ProviderTree(), made["ours"])
    built: list[VgpuDriver] = []

    def setup() -> None:
        host = LibvirtHost(sysfs_root=made["sysfs"], connection=conn)
        host.watch_node_device_events()  # as the Nova integration does
        built.append(VgpuDriver(conf, host))

    def start() -> None:
        built[0].init_host(made["guests"])
        built[0].update_provider_tree(tree, "bench")

    settle()
    return {"setup": _cpu(setup), "start": _cpu(start)}


def nova(made: dict[str, Any]) -> dict[str, float]:
    """In a new process: Nova's vGPU setup, then its periodic and the
    guest scan of a spawn."""
    from nova.compute import provider_tree

    from benchmarks.nova_side import nova_driver, vgpu_setup

    event_loop()
    driver, _conn = nova_driver(made["uri"], False, setup=False)
    tree = rebuild(provider_tree.ProviderTree(), made["nova"])

    def start() -> None:
        driver._update_provider_tree_for_vgpu(tree, "bench")
        driver._get_all_assigned_mediated_devices()

    settle()
    return {"setup": _cpu(lambda: vgpu_setup(driver)), "start": _cpu(start)}


def one(side: str, made: dict[str, Any]) -> dict[str, float]:
    """A new process timing ``side`` on the host ``made`` describes."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT_DIR), env.get("PYTHONPATH", "")]
    )
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.restart", "--child", side],
        input=json.dumps(made),
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT_DIR,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"restart: a {side} start failed:\n{done.stderr}")
    found: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return found


def host(shape: tuple[int, int, int], tmp: Path) -> dict[str, Any]:
    """The host, a service of this library run on it once (its records
    and providers written) and Nova's periodic once (its providers):
    what each side's restart finds (``nova`` None without Nova)."""
    from benchmarks.nova_side import Nova
    from vgpu_driver.sim import description as hostdesc

    description = dense(shape[0], shape[1] + FREE, shape[2])
    uri, sysfs = hostdesc.materialize(description, tmp)
    service = Service(uri, sysfs, conf_for(description.config, tmp), tmp)
    try:
        theirs: list[dict[str, Any]] | None = dump(Nova(uri).tree)
    except ImportError:
        theirs = None
    made = {
        "uri": uri,
        "sysfs": str(sysfs),
        "config": description.config,
        "tmp": str(tmp),
        "guests": service.guests,
        "ours": dump(service.tree),
        "nova": theirs,
    }
    service.conn.close()
    return made


def measure(shape: tuple[int, int, int], runs: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {
        key: [] for key in ("setup", "start", "nova_setup", "nova_start")
    }
    with tempfile.TemporaryDirectory() as scratch:
        made = host(shape, Path(scratch))
        sides = ("ours", "nova") if made["nova"] is not None else ("ours",)
        for run in range(runs):
            for side in sides if run % 2 == 0 else sides[::-1]:
                found = one(side, made)
                prefix = "" if side == "ours" else "nova_"
                samples[prefix + "setup"].append(found["setup"])
                samples[prefix + "start"].append(found["start"])
    return samples


def row(label: str, s: dict[str, list[float]]) -> str:
    """One printed row (Nova's side "-" when it was not run)."""
    median = statistics.median
    ours = f"{spread(s['setup']):>18} {spread(s['start']):>20}"
    if not s["nova_start"]:
        return (
            f"{label:>13} | {ours} | {'-':>18} {'-':>20} | {'-':>7} {'-':>11}"
        )
    alone = median(s["start"]) / median(s["nova_start"])
    both = (median(s["setup"]) + median(s["start"])) / (
        median(s["nova_setup"]) + median(s["nova_start"])
    )
    return (
        f"{label:>13} | {ours} | "
        f"{spread(s['nova_setup']):>18} {spread(s['nova_start']):>20} | "
        f"{alone:>6.2f}x {both:>10.2f}x"
    )


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        made = json.loads(sys.stdin.read())
        timer = ours if sys.argv[2] == "ours" else nova
        print(json.dumps(timer(made)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--runs", type=int, default=9, help="new processes per side and host"
    )
    args = parser.parse_args()
    print(machine())
    print(
        "CPU ms min/median/max, each start in a new process (modules "
        "imported and libvirt's event loop running before the clock); "
        "ours: setup (adapter and driver built) and start (init_host + "
        "first refresh); Nova: its vGPU setup and its periodic + the guest "
        "scan of a spawn; ratios of the medians"
    )
    print(
        f"{'host':>13} | {'setup':>18} {'start':>20} | "
        f"{'nova setup':>18} {'nova start':>20} | {'start':>7} "
        f"{'with setup':>11}"
    )
    for shape in QUICK if args.quick else SHAPES:
        label = "/".join(str(n) for n in shape)
        print(row(label, measure(shape, args.runs)), flush=True)


if __name__ == "__main__":
    main()
