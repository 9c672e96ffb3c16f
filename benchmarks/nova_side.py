"""Nova's side of the benchmarks: Nova 34.0.0's vGPU periodic and its
spawn-time guest scan on a libvirt host, set up as Nova's own
``LibvirtDriver.__init__`` sets up the vGPU part (ImportError without
Nova: run it in the virtualenv ``tools/nova-venv`` builds); libvirt
calls counted through :class:`Counting`; :func:`timed` for both sides.
"""

from __future__ import annotations

import collections
import gc
import time
from collections.abc import Callable
from typing import Any

from benchmarks.caches import Caches

ROOT = "8f0b2c1e-1d7a-4b6e-9a51-0c3f5e7d9b21"  # the compute node's provider


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
    fn: Callable[[], object], collect: bool = False, cold: bool = False
) -> tuple[float, float]:
    """(CPU ms, wall ms) of one call. ``collect``: the garbage earlier
    hosts of this run left is collected first (a service's first refresh
    does not inherit it). ``cold``: the CPU's caches emptied first (see
    :mod:`benchmarks.caches`)."""
    if collect:
        gc.collect()
    if cold:
        Caches.empty()
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return (
        (time.process_time() - cpu) * 1000,
        (time.perf_counter() - wall) * 1000,
    )


def nova_driver(
    uri: str, counted: bool, conn: Any = None, setup: bool = True
) -> tuple[Any, Any]:
    """Nova's LibvirtDriver, set up as its __init__ sets up the vGPU
    part (unless not ``setup``: left to the caller, see
    :func:`vgpu_setup`), on Nova's Host over a (counted) connection
    (``conn``, or one opened at ``uri``). ImportError without Nova."""
    import libvirt
    import nova.conf
    from nova.virt.libvirt import driver as nova_libvirt
    from nova.virt.libvirt import host as nova_host

    conf = nova.conf.CONF
    if getattr(conf, "_args", None) is None:  # not yet parsed
        conf([], project="nova", default_config_files=[])
    conf.set_override("enabled_mdev_types", ["nvidia-35"], "devices")
    nova.conf.devices.register_dynamic_opts(conf)
    driver = nova_libvirt.LibvirtDriver.__new__(nova_libvirt.LibvirtDriver)
    driver._host = nova_host.Host(uri)
    conn = conn if conn is not None else libvirt.open(uri)
    if counted:
        conn = Counting(conn)
    driver._host._wrapped_conn = conn
    if setup:
        vgpu_setup(driver)
    return driver, conn


def vgpu_setup(driver: Any) -> None:
    """The vGPU part of Nova's ``LibvirtDriver.__init__``: its mappings,
    and the enabled types read from the configuration and checked
    (``_get_supported_vgpu_types``)."""
    driver.pgpu_type_mapping = collections.defaultdict(str)
    driver.mdev_class_mapping = collections.defaultdict(lambda: "VGPU")
    driver.mdev_classes = set()
    driver.mdev_type_max_mapping = collections.defaultdict(str)
    driver.pgpu_type_default = None
    driver.virtual_mdevs = set()
    driver.instance_claimed_mdevs = {}
    driver.supported_vgpu_types = driver._get_supported_vgpu_types()


class Nova:
    """Nova 34.0.0's vGPU periodic on the same host (calls counted on a
    second connection). ``conn``: the connection both use, instead of
    their own at ``uri`` (one whose mdevs another manager changes)."""

    def __init__(self, uri: str, conn: Any = None) -> None:
        from nova.compute import provider_tree

        counted_driver, counted = nova_driver(uri, True, conn)
        tree = provider_tree.ProviderTree()
        tree.new_root("bench", ROOT)
        counted_driver._update_provider_tree_for_vgpu(tree, "bench")
        counted.calls = 0
        counted_driver._update_provider_tree_for_vgpu(tree, "bench")
        self.calls = counted.calls
        counted.calls = 0
        counted_driver._get_all_assigned_mediated_devices()
        self.spawn_scan_calls = counted.calls
        self.driver, _ = nova_driver(uri, False, conn)
        self.tree = provider_tree.ProviderTree()
        self.tree.new_root("bench", ROOT)
        self.periodic()  # warm up

    def periodic(self, cold: bool = False) -> tuple[float, float]:
        return timed(
            lambda: self.driver._update_provider_tree_for_vgpu(
                self.tree, "bench"
            ),
            cold=cold,
        )

    def spawn_scan(self) -> float:
        """What Nova does at every spawn (and live migration) to find
        free mdevs: every guest's XML."""
        return timed(self.driver._get_all_assigned_mediated_devices)[0]
