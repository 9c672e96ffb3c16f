"""This library's refresh beside Nova 34.0.0's, in one process, on the
same libvirt test-driver hosts.

For each host size (pGPUs / mdevs / guests, every mdev in use by one
guest): the first refresh of a new service (discovery with the guest scan,
then update_provider_tree) and a steady one, against one Nova periodic
(``LibvirtDriver._update_provider_tree_for_vgpu`` on Nova's own ``Host``
over the same connection: Nova reads no guests there). CPU time, wall
time and libvirt calls; steady figures are min/median/max of repeated
runs. Writes a PNG plot of CPU time against host size (matplotlib).

Nova's side needs Nova and its dependencies: run it in the virtualenv
``tools/nova-venv`` builds::

    tools/nova-venv python -m benchmarks.nova_compare [--quick] [--plot F]

Without Nova it prints this library's figures only.
"""

from __future__ import annotations

import argparse
import collections
import gc
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import conf_for, dense, machine, spread
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.host import description as hostdesc
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.model.provider_tree import ProviderTree

SHAPES = [
    (1, 16, 16),
    (4, 128, 128),
    (16, 512, 512),
    (16, 2048, 2048),
    (64, 2048, 2048),
    (64, 4096, 4096),
]
QUICK = SHAPES[:3]
ROOT = "8f0b2c1e-1d7a-4b6e-9a51-0c3f5e7d9b21"


class Counting:
    """A libvirt object (connection, node device, domain) that counts the
    calls made through it and through the objects it returns."""

    def __init__(self, target: Any, counter: list[int] | None = None) -> None:
        self._target = target
        self._counter = counter if counter is not None else [0]

    @property
    def calls(self) -> int:
        return self._counter[0]

    @calls.setter
    def calls(self, value: int) -> None:
        self._counter[0] = value

    def _wrap(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self._wrap(v) for v in value]
        if type(value).__module__ == "libvirt" and hasattr(value, "XMLDesc"):
            return Counting(value, self._counter)
        return value

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._counter[0] += 1
            return self._wrap(attr(*args, **kwargs))

        return call


def timed(
    fn: Callable[[], object], collect: bool = False
) -> tuple[float, float]:
    """(CPU ms, wall ms) of one call. ``collect``: the garbage earlier
    hosts of this run left is collected first (a service's first refresh
    does not inherit it)."""
    if collect:
        gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return (
        (time.process_time() - cpu) * 1000,
        (time.perf_counter() - wall) * 1000,
    )


def repeat(fn: Callable[[], object], runs: int) -> tuple[list[float], ...]:
    """CPU ms and wall ms of each of ``runs`` calls."""
    cpu, wall = [], []
    for _ in range(runs):
        c, w = timed(fn)
        cpu.append(c)
        wall.append(w)
    return cpu, wall


def ours(
    uri: str, sysfs: Path, conf: Any, runs: int, firsts: int
) -> dict[str, Any]:
    """Timed on a plain connection; calls counted on a second one (the
    counting wrapper's own cost stays out of the times). The first
    refresh is timed on ``firsts`` new services (a new adapter and driver
    each, nothing read yet), as Nova's periodic is timed ``runs`` times."""
    import libvirt

    # the test driver refuses a flag once; libvirt would print it
    libvirt.registerErrorHandler(lambda *_: None, None)
    figures: dict[str, Any] = {}
    for counted in (False, True):
        conn = libvirt.open(uri)
        if counted:
            conn = Counting(conn)

        def new_service(c: Any = conn) -> tuple[VgpuDriver, ProviderTree]:
            host = LibvirtHost(sysfs_root=sysfs, connection=c)
            tree = ProviderTree()
            tree.new_root("bench", ROOT)
            return VgpuDriver(conf, host, persist=False), tree

        if counted:
            driver, tree = new_service()
            driver.update_provider_tree(tree, "bench")
            figures["first_calls"] = conn.calls
            conn.calls = 0
            for _ in range(3):
                driver.update_provider_tree(tree, "bench")
            figures["calls"] = conn.calls / 3
            continue
        first_cpu, first_wall = [], []
        for _ in range(firsts):
            driver, tree = new_service()
            # timed as Nova's periodic is: no garbage collection first
            cpu, wall = timed(
                lambda d=driver, t=tree: d.update_provider_tree(t, "bench")
            )
            first_cpu.append(cpu)
            first_wall.append(wall)
        figures["first_cpu"], figures["first_wall"] = first_cpu, first_wall
        figures["cpu"], figures["wall"] = repeat(
            lambda d=driver, t=tree: d.update_provider_tree(t, "bench"), runs
        )
        # what the first bind (or init_host) adds when the first refresh
        # did not need the guests
        figures["scan_cpu"] = timed(driver.discover, collect=True)[0]
    return figures


def warm_up() -> float:
    """The process's one-time costs (lazy imports, the os-traits name
    index, compiled patterns), paid on a small throwaway host before
    anything is timed, as Nova's are by its warm-up call. Returns them:
    the CPU ms of that first refresh."""
    description = dense(1, 4, 4)
    with tempfile.TemporaryDirectory() as tmp:
        uri, sysfs = hostdesc.materialize(description, Path(tmp))
        conf = conf_for(description.config, Path(tmp))
        return ours(uri, sysfs, conf, runs=1, firsts=1)["first_cpu"][0]


def nova_driver(uri: str, counted: bool) -> tuple[Any, Any] | None:
    """Nova's LibvirtDriver, set up as its __init__ sets up the vGPU
    part, on Nova's Host over a counted connection; None without Nova."""
    try:
        import libvirt
        import nova.conf
        from nova.virt.libvirt import driver as nova_libvirt
        from nova.virt.libvirt import host as nova_host
    except ImportError:
        return None
    conf = nova.conf.CONF
    if getattr(conf, "_args", None) is None:  # not yet parsed
        conf([], project="nova", default_config_files=[])
    conf.set_override("enabled_mdev_types", ["nvidia-35"], "devices")
    nova.conf.devices.register_dynamic_opts(conf)
    driver = nova_libvirt.LibvirtDriver.__new__(nova_libvirt.LibvirtDriver)
    driver._host = nova_host.Host(uri)
    conn = libvirt.open(uri)
    if counted:
        conn = Counting(conn)
    driver._host._wrapped_conn = conn
    driver.pgpu_type_mapping = collections.defaultdict(str)
    driver.mdev_class_mapping = collections.defaultdict(lambda: "VGPU")
    driver.mdev_classes = set()
    driver.mdev_type_max_mapping = collections.defaultdict(str)
    driver.pgpu_type_default = None
    driver.virtual_mdevs = set()
    driver.instance_claimed_mdevs = {}
    driver.supported_vgpu_types = driver._get_supported_vgpu_types()
    return driver, conn


def nova(uri: str, runs: int) -> dict[str, Any] | None:
    figures: dict[str, Any] = {}
    for counted in (False, True):
        made = nova_driver(uri, counted)
        if made is None:
            return None
        driver, conn = made
        from nova.compute import provider_tree

        tree = provider_tree.ProviderTree()
        tree.new_root("bench", ROOT)
        driver._update_provider_tree_for_vgpu(tree, "bench")  # warm up
        if counted:
            conn.calls = 0
            driver._update_provider_tree_for_vgpu(tree, "bench")
            figures["calls"] = conn.calls
            conn.calls = 0
            driver._get_all_assigned_mediated_devices()
            figures["spawn_scan_calls"] = conn.calls
        else:
            # what Nova does at every spawn (and live migration) to find
            # free mdevs: every guest's XML
            figures["spawn_scan_cpu"] = timed(
                driver._get_all_assigned_mediated_devices
            )[0]
            figures["cpu"], figures["wall"] = repeat(
                lambda d=driver, t=tree: d._update_provider_tree_for_vgpu(
                    t, "bench"
                ),
                runs,
            )
    return figures


def measure(parents: int, mdevs: int, guests: int) -> dict[str, Any]:
    description = dense(parents, mdevs, guests)
    runs = 20 if mdevs <= 512 else 8
    with tempfile.TemporaryDirectory() as tmp:
        uri, sysfs = hostdesc.materialize(description, Path(tmp))
        conf = conf_for(description.config, Path(tmp))
        return {
            "shape": (parents, mdevs, guests),
            "ours": ours(uri, sysfs, conf, runs, firsts=max(3, runs // 2)),
            "nova": nova(uri, runs),
        }


def plot(results: list[dict[str, Any]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels = [f"{p}/{m}/{g}" for p, m, g in (r["shape"] for r in results)]
    x = range(len(results))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    series = [
        ("vgpu_driver, steady refresh", "o-", ("ours", "cpu")),
        ("vgpu_driver, first refresh", "s--", ("ours", "first_cpu")),
        (
            "vgpu_driver, guest scan (once: init_host or first bind)",
            "d-.",
            ("ours", "scan_cpu"),
        ),
    ]
    if all(r["nova"] for r in results):
        series += [
            (
                "Nova 34.0.0 periodic (_update_provider_tree_for_vgpu)",
                "^-",
                ("nova", "cpu"),
            ),
            (
                "Nova 34.0.0 guest scan at every spawn",
                "v:",
                ("nova", "spawn_scan_cpu"),
            ),
        ]
    for label, style, (side, key) in series:
        values = [r[side][key] for r in results]
        ax.plot(
            x,
            [
                statistics.median(v) if isinstance(v, list) else v
                for v in values
            ],
            style,
            label=label,
        )
    ax.set_yscale("log")
    ax.set_xticks(list(x), labels)
    ax.set_xlabel("host: pGPUs / mdevs / guests (libvirt test driver)")
    ax.set_ylabel("CPU ms per call (median)")
    ax.set_title("vGPU provider refresh: CPU time against host size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return True


def _ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(a) / statistics.median(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--plot",
        type=Path,
        default=None,
        help="PNG to write (default: benchmarks/results/cost_vs_host_size"
        ".png; with --quick, none unless given)",
    )
    args = parser.parse_args()
    print(machine())
    print(f"process warm-up, paid once before timing: {warm_up():.1f} ms CPU")
    print(
        "CPU ms, min/median/max of repeated runs (first refresh: each on a "
        "new service); calls: libvirt calls per refresh; first/Nova: "
        "medians"
    )
    print(
        f"{'host':>14} | {'ours first cpu':>20} {'calls':>5} | "
        f"{'guest scan':>10} | "
        f"{'ours steady cpu':>19} {'calls':>5} | "
        f"{'Nova periodic cpu':>21} {'calls':>6} | {'Nova/ours':>9} | "
        f"{'first/Nova':>10} | {'Nova per spawn cpu/calls':>24}"
    )
    results = []
    for shape in QUICK if args.quick else SHAPES:
        r = measure(*shape)
        results.append(r)
        o, n = r["ours"], r["nova"]
        nova_cols = (
            f"{spread(n['cpu']):>21} {n['calls']:>6.0f} | "
            f"{_ratio(n['cpu'], o['cpu']):>8.1f}x | "
            f"{_ratio(o['first_cpu'], n['cpu']):>9.2f}x"
            f" | {n['spawn_scan_cpu']:>15.1f}/{n['spawn_scan_calls']:<8}"
            if n
            else f"{'(Nova not importable)':>21} {'':>6} | {'':>9} |"
        )
        print(
            f"{'/'.join(map(str, shape)):>14} | "
            f"{spread(o['first_cpu']):>20} {o['first_calls']:>5} | "
            f"{o['scan_cpu']:>10.1f} | "
            f"{spread(o['cpu']):>19} {o['calls']:>5.0f} | {nova_cols}"
        )
    path = args.plot
    if path is None and not args.quick:
        path = Path("benchmarks/results/cost_vs_host_size.png")
    if path is None:
        print("plot: not written (--quick)")
    elif plot(results, path):
        print(f"plot: {path}")
    else:
        print("plot: skipped (matplotlib is not installed)")


if __name__ == "__main__":
    main()
