"""This library's refresh beside Nova 34.0.0's, in one process, on the
same libvirt test-driver hosts.

This library runs with its records on, as a service always does (each
new service with a records directory of its own).

For each host size (pGPUs / mdevs / guests, every mdev in use by one
guest; ``T18``: each pGPU lists 18 types, as a GRID card does): the
first refresh of a new service (discovery, reading guests only where
they could change the tree, then update_provider_tree) and a steady
one, against one Nova periodic
(``LibvirtDriver._update_provider_tree_for_vgpu`` on Nova's own ``Host``
over the same connection: Nova reads no guests there). The steady
refresh is timed on this library's ProviderTree and on Nova's, which is
the one it gets inside Nova (Nova's finds a provider by name by walking
the tree, by uuid at once). CPU time and
libvirt calls; min/median/max over repetitions, each comparison timed in
turn with Nova's in every repetition so this machine's noise hits both
sides alike. The process's one-time costs are paid before timing, as
Nova's warm-up call pays Nova's. Writes a PNG plot of CPU time against
host size (matplotlib).

``--daemon``: the same hosts served by this machine's ``libvirtd``
(Debian's ``libvirt-daemon``) over its UNIX socket, so that every
libvirt call is a round trip to a daemon, as on a compute host. In
process, a test-driver call costs about what a Python function call
does, which leaves only the Python of both sides to compare. Over the
daemon, wall time (which includes the daemon's work and the waits) is
printed beside the caller's CPU time.

Nova's side needs Nova and its dependencies: run it in the virtualenv
``tools/nova-venv`` builds::

    tools/nova-venv python -m benchmarks.nova_compare \
        [--quick] [--daemon] [--plot F]

Without Nova it prints this library's figures only.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import (
    conf_for,
    dense,
    libvirt_daemon,
    machine,
    readable_by_daemon,
    shape_label,
    spread,
)
from benchmarks.nova_side import ROOT, Counting, Nova, timed
from benchmarks.plot import plot
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.model.provider_tree import ProviderTree
from vgpu_driver.sim import description as hostdesc

# pGPUs, mdevs, guests, types each pGPU lists (a GRID card: about 18)
SHAPES = [
    (1, 16, 16, 1),
    (4, 32, 32, 1),
    (4, 128, 128, 1),
    (4, 128, 128, 18),
    (16, 512, 512, 1),
    (16, 2048, 2048, 1),
    (64, 2048, 2048, 1),
    (64, 4096, 4096, 1),
]
QUICK = SHAPES[:4]


class Ours:
    """This library on one host: a service kept for steady refreshes,
    new ones for first refreshes; calls counted on a second connection
    (the counting wrapper's own cost stays out of the times)."""

    def __init__(self, uri: str, sysfs: Path, conf: Any) -> None:
        import libvirt

        # the test driver refuses a flag once; libvirt would print it
        libvirt.registerErrorHandler(lambda *_: None, None)
        self.sysfs, self.conf = sysfs, conf
        self._services = 0
        self.conn = libvirt.open(uri)
        counted = Counting(libvirt.open(uri))
        driver, tree = self._new_service(counted)
        driver.update_provider_tree(tree, "bench")
        self.first_calls = counted.calls
        counted.calls = 0
        for _ in range(3):
            driver.update_provider_tree(tree, "bench")
        self.calls = counted.calls / 3
        # the steady service started as a compute service starts:
        # init_host (which writes its records), then its refreshes
        guests = [d.UUIDString() for d in self.conn.listAllDomains()]
        self.driver, self.tree = self._new_service(self.conn)
        self.driver.init_host(guests)
        self.driver.update_provider_tree(self.tree, "bench")
        # the same inside Nova: on Nova's ProviderTree (None without Nova)
        self.in_nova: tuple[VgpuDriver, Any] | None = None
        with contextlib.suppress(ImportError):
            from nova.compute import provider_tree as nova_tree

            self.in_nova = self._new_service(
                self.conn, nova_tree.ProviderTree()
            )
            self.in_nova[0].init_host(guests)
            self.in_nova[0].update_provider_tree(self.in_nova[1], "bench")

    def _new_service(
        self, conn: Any, tree: Any = None
    ) -> tuple[VgpuDriver, Any]:
        host = LibvirtHost(sysfs_root=self.sysfs, connection=conn)
        tree = ProviderTree() if tree is None else tree
        tree.new_root("bench", ROOT)
        # records on, as a service always runs: each new service gets a
        # records directory of its own (a first refresh writes them)
        self._services += 1
        state = Path(self.conf.devices.state_path) / f"s{self._services}"
        return VgpuDriver(self.conf, host, state_path=str(state)), tree

    def first(self) -> tuple[float, float]:
        """A new service's first refresh (nothing read yet)."""
        driver, tree = self._new_service(self.conn)
        return timed(lambda: driver.update_provider_tree(tree, "bench"))

    def steady(self) -> tuple[float, float]:
        return timed(
            lambda: self.driver.update_provider_tree(self.tree, "bench")
        )

    def steady_in_nova(self) -> tuple[float, float]:
        """A steady refresh on Nova's ProviderTree, as Nova calls it."""
        assert self.in_nova is not None
        driver, tree = self.in_nova
        return timed(lambda: driver.update_provider_tree(tree, "bench"))

    def guest_scan(self) -> float:
        """What the first bind (or init_host) adds when the first refresh
        did not need the guests."""
        driver, tree = self._new_service(self.conn)
        driver.update_provider_tree(tree, "bench")
        return timed(driver.discover, collect=True)[0]


def warm_up() -> float:
    """The process's one-time costs (lazy imports, the os-traits name
    index, compiled patterns), paid on a small throwaway host before
    anything is timed, as Nova's are by its warm-up call. Returns them:
    the CPU ms of that first refresh."""
    description = dense(1, 4, 4)
    with tempfile.TemporaryDirectory() as tmp:
        uri, sysfs = hostdesc.materialize(description, Path(tmp))
        conf = conf_for(description.config, Path(tmp))
        return Ours(uri, sysfs, conf).first()[0]


def measure(
    parents: int,
    mdevs: int,
    guests: int,
    types: int = 1,
    remote: Callable[[str], str] | None = None,
) -> dict[str, Any]:
    """Each figure over ``runs`` repetitions. Each comparison is timed in
    turn in every repetition (a new service's first refresh, then Nova's
    periodic; then, in a second loop, a steady refresh and Nova's
    periodic), so a burst of noise on this machine hits both sides
    alike. ``remote``: the host is served by a daemon, at the URI this
    gives for its test-driver URI."""
    description = dense(parents, mdevs, guests, types)
    runs = 20 if mdevs <= 512 else 8
    with tempfile.TemporaryDirectory() as tmp:
        uri, sysfs = hostdesc.materialize(description, Path(tmp))
        if remote is not None:
            readable_by_daemon(Path(tmp))
            uri = remote(uri)
        conf = conf_for(description.config, Path(tmp))
        ours = Ours(uri, sysfs, conf)
        try:
            theirs: Nova | None = Nova(uri)
        except ImportError:
            theirs = None
        samples: dict[str, list[float]] = collections.defaultdict(list)
        pairs = [("first", "nova_first"), ("steady", "nova")]
        if theirs is not None and ours.in_nova is not None:
            pairs.append(("steady_in_nova", "nova_beside_in_nova"))
        for pair in pairs:
            timers = {"first": ours.first, "steady": ours.steady}
            if theirs is not None:
                timers["nova"] = timers["nova_first"] = theirs.periodic
                timers["nova_beside_in_nova"] = theirs.periodic
                timers["steady_in_nova"] = ours.steady_in_nova
            for _ in range(runs):
                for key in pair:
                    if key in timers:
                        cpu, wall = timers[key]()
                        samples[key].append(cpu)
                        samples[key + "_wall"].append(wall)
        return {
            "shape": (parents, mdevs, guests, types),
            "ours": {
                "first_cpu": samples["first"],
                "first_wall": samples["first_wall"],
                "first_calls": ours.first_calls,
                "cpu": samples["steady"],
                "wall": samples["steady_wall"],
                "cpu_in_nova_tree": samples["steady_in_nova"],
                "calls": ours.calls,
                "scan_cpu": ours.guest_scan(),
            },
            "nova": {
                "cpu": samples["nova"],
                "wall": samples["nova_wall"],
                "cpu_beside_first": samples["nova_first"],
                "wall_beside_first": samples["nova_first_wall"],
                "cpu_beside_in_nova_tree": samples["nova_beside_in_nova"],
                "calls": theirs.calls,
                "spawn_scan_cpu": theirs.spawn_scan(),
                "spawn_scan_calls": theirs.spawn_scan_calls,
            }
            if theirs
            else None,
        }


def _ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(a) / statistics.median(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--daemon",
        action="store_true",
        help="serve the hosts by this machine's libvirtd (every call a "
        "round trip, as on a compute host) instead of in process",
    )
    parser.add_argument(
        "--plot",
        type=Path,
        default=None,
        help="PNG to write (default: benchmarks/results/cost_vs_host_size"
        ".png, with --daemon cost_vs_host_size_libvirtd.png; with "
        "--quick, none unless given)",
    )
    args = parser.parse_args()
    print(machine())
    print(f"process warm-up, paid once before timing: {warm_up():.1f} ms CPU")
    print(
        "libvirt: "
        + (
            "test-driver hosts served by libvirtd over its UNIX socket; "
            "wall time includes the daemon's work"
            if args.daemon
            else "test-driver hosts in process (calls cost almost nothing)"
        )
    )
    print(
        "CPU ms of the caller, min/median/max of repeated runs (first "
        "refresh: each on a new service); calls: libvirt calls per "
        "refresh; ratios: medians timed in turn with Nova's; in Nova "
        "tree: Nova/ours for a steady refresh on Nova's ProviderTree, as "
        "inside Nova"
    )
    wall_head = f" | {'first/Nova wall':>15} | {'Nova/ours wall':>14}"
    print(
        f"{'host':>16} | {'ours first cpu':>20} {'calls':>5} | "
        f"{'guest scan':>10} | "
        f"{'ours steady cpu':>19} {'calls':>5} | "
        f"{'Nova periodic cpu':>21} {'calls':>6} | {'Nova/ours':>9} | "
        f"{'in Nova tree':>12} | "
        f"{'first/Nova':>10} | {'Nova per spawn cpu/calls':>24}"
        + (wall_head if args.daemon else "")
    )
    with contextlib.ExitStack() as stack:
        remote = (
            stack.enter_context(
                libvirt_daemon(
                    Path(stack.enter_context(tempfile.TemporaryDirectory()))
                )
            )
            if args.daemon
            else None
        )
        results = [
            _report(measure(*shape, remote=remote), args.daemon)
            for shape in (QUICK if args.quick else SHAPES)
        ]
    path = args.plot
    if path is None and not args.quick:
        name = "cost_vs_host_size" + ("_libvirtd" if args.daemon else "")
        path = Path(f"benchmarks/results/{name}.png")
    if path is None:
        print("plot: not written (--quick)")
    elif plot(results, path, args.daemon):
        print(f"plot: {path}")
    else:
        print("plot: skipped (matplotlib is not installed)")


def _in_nova_tree(r: dict[str, Any]) -> str:
    """Nova/ours for a steady refresh on Nova's ProviderTree."""
    ours = r["ours"]["cpu_in_nova_tree"]
    if not ours:
        return "-"
    return f"{_ratio(r['nova']['cpu_beside_in_nova_tree'], ours):.1f}x"


def _report(r: dict[str, Any], wall: bool) -> dict[str, Any]:
    """Print one host's line; return its figures."""
    o, n = r["ours"], r["nova"]
    nova_cols = (
        f"{spread(n['cpu']):>21} {n['calls']:>6.0f} | "
        f"{_ratio(n['cpu'], o['cpu']):>8.1f}x | "
        f"{_in_nova_tree(r):>12} | "
        f"{_ratio(o['first_cpu'], n['cpu_beside_first']):>9.2f}x"
        f" | {n['spawn_scan_cpu']:>15.1f}/{n['spawn_scan_calls']:<8}"
        + (
            f" | {_ratio(o['first_wall'], n['wall_beside_first']):>14.2f}x"
            f" | {_ratio(n['wall'], o['wall']):>13.1f}x"
            if wall
            else ""
        )
        if n
        else f"{'(Nova not importable)':>21} {'':>6} | {'':>9} |"
    )
    print(
        f"{shape_label(r['shape']):>16} | "
        f"{spread(o['first_cpu']):>20} {o['first_calls']:>5} | "
        f"{o['scan_cpu']:>10.1f} | "
        f"{spread(o['cpu']):>19} {o['calls']:>5.0f} | {nova_cols}",
        flush=True,
    )
    return r


if __name__ == "__main__":
    main()
