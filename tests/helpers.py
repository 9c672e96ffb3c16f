"""Helpers shared by tests: hosts built from descriptions, drivers on
them, and nodes syncing to a real Placement."""

from __future__ import annotations

import contextlib
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt

from vgpu_driver.cmd.inventory import ROOT_NAMESPACE, tree_report
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.model.device import MdevType, Parent
from vgpu_driver.model.provider_tree import ProviderTree
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim import nvml_lib
from vgpu_driver.sim.simulated import SimulatedHost

DATA = Path(__file__).parent / "data"
# m10: an nvidia-36 mdev on pci_0000_86_00_0 that no guest has
M10_FREE_ON_86 = "386818c0-9f18-5b12-8c04-386dbef1b1ab"
# the AMD MxGPU host (amd-mxgpu) with its one VF type enabled, its own class
MXGPU_CONFIG = """
[devices]
enabled_mdev_types = vf-1002-692f
[mdev_vf-1002-692f]
device_addresses = 0000:61:00.0
mdev_class = CUSTOM_MXGPU
"""
ALL_HOSTS = [*hostdesc.shipped_names(), str(DATA / "s390.json")]
# one M10 pGPU, for readings made by hand
M10_PARENT = Parent(
    name="pci_0000_84_00_0",
    address="0000:84:00.0",
    driver="nvidia",
    types=(MdevType("nvidia-35", "GRID M10-2Q", "vfio-pci", 3),),
)


def tool(name: str) -> Any:
    """A module of ``tools/`` (not a package), loaded by its path."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(name: str) -> hostdesc.HostDescription:
    return hostdesc.load(name)


def libvirt_error(
    code: int, domain: int, message: str
) -> libvirt.libvirtError:
    """The error libvirt raises with ``code`` from ``domain``."""
    exc = libvirt.libvirtError(message)
    exc.err = (code, domain, message, 2, None, None, None, 0, 0)
    return exc


def libvirt_host(
    description: hostdesc.HostDescription, directory: Path
) -> LibvirtHost:
    uri, sysfs_root = hostdesc.materialize(description, directory)
    return LibvirtHost(
        uri, sysfs_root, nvml=nvml_lib.rendered(description, sysfs_root)
    )


def simulated_host(name: str) -> SimulatedHost:
    return SimulatedHost(hostdesc.load(name))


@contextlib.contextmanager
def libvirt_event_loop() -> Iterator[None]:
    """libvirt's default event loop, run on a thread as a compute service
    runs one (register it before opening the connections)."""
    libvirt.virEventRegisterDefaultImpl()
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            libvirt.virEventRunDefaultImpl()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        # wake the loop so it sees the stop flag
        libvirt.virEventAddTimeout(0, lambda *a: None, None)
        thread.join(timeout=5)


def _until(done, event: str) -> None:
    """Wait (10 s at most) until ``done()``: the ``event`` followed."""
    deadline = time.monotonic() + 10
    while not done():
        assert time.monotonic() < deadline, f"no {event} event followed"
        time.sleep(0.05)


def check_domain_events_keep_guests_current(host: LibvirtHost) -> None:
    """On the m10 host, inside :func:`libvirt_event_loop`: a guest defined
    then undefined on the host's connection, and a transient guest
    started then destroyed, are seen and forgotten through lifecycle
    events alone (no rescan of the guests)."""
    before = host.discover()
    free = "e905c06b-d33d-55fa-b0e1-6654dc764fac"
    assert free not in before.mdev_users()
    callbacks = host.watch_domain_events()
    conn = host.connection()
    domain = conn.defineXML(
        "<domain type='test'><name>late</name>"
        "<uuid>77777777-0000-0000-0000-000000000001</uuid>"
        "<memory>65536</memory><os><type>hvm</type></os><devices>"
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>"
        f"<source><address uuid='{free}'/></source></hostdev>"
        "</devices></domain>"
    )
    _until(lambda: free in host.discover().mdev_users(), "DEFINED")
    host.calls.clear()
    domain.undefine()
    _until(lambda: free not in host.discover().mdev_users(), "UNDEFINED")
    assert host.calls["listAllDomains"] == 0  # never rescanned
    # a transient guest (virsh create: never defined) sends no DEFINED
    # nor UNDEFINED event, only STARTED and STOPPED; its mdev is in use
    # while it runs and free once it is destroyed
    transient = conn.createXML(
        "<domain type='test'><name>transient</name>"
        "<uuid>77777777-0000-0000-0000-000000000002</uuid>"
        "<memory>65536</memory><os><type>hvm</type></os><devices>"
        "<hostdev mode='subsystem' type='mdev' model='vfio-pci'>"
        f"<source><address uuid='{free}'/></source></hostdev>"
        "</devices></domain>",
        0,
    )
    assert not transient.isPersistent()
    _until(lambda: free in host.discover().mdev_users(), "STARTED")
    transient.destroy()
    _until(lambda: free not in host.discover().mdev_users(), "STOPPED")
    assert host.calls["listAllDomains"] == 0  # never rescanned
    for callback in callbacks:
        conn.domainEventDeregisterAny(callback)


class RecordingConnection:
    """A real test-driver connection whose domain event registrations
    are recorded, never made."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.callbacks: dict[int, Any] = {}
        self.registered: list[int] = []  # each registration, in order

    def domainEventRegisterAny(
        self, dom: Any, event: int, callback: Any, opaque: Any
    ) -> int:
        self.callbacks[event] = callback
        self.registered.append(event)
        return event

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class FileBackedHost(SimulatedHost):
    """A simulated host whose state lives in one file, so several
    processes share one "kernel" (and one list of defined guests), as
    they would share a real host. Every operation locks the file, loads
    the state, applies the kernel's rules and writes it back."""

    def __init__(self, path: Path, description=None) -> None:
        self.path = Path(path)
        self._file_lock = self.path.with_suffix(".lock")
        if description is not None:
            super().__init__(description)
            self._dump()
        else:
            super().__init__(self._read()[0])

    def _read(self):
        import pickle

        return pickle.loads(self.path.read_bytes())

    def _dump(self) -> None:
        import pickle

        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps((self._state, self._persistent)))
        tmp.replace(self.path)

    def _shared(self, operation, *args, **kwargs):
        import fcntl

        with open(self._file_lock, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._state, self._persistent = self._read()
            result = operation(*args, **kwargs)
            self._dump()
            return result

    def discover(self, *, rescan_guests=False, guests=True, again=False):
        return self._shared(super().discover)

    def note_guest(self, guest):
        return self._shared(super().note_guest, guest)

    def forget_guest(self, uuid):
        return self._shared(super().forget_guest, uuid)

    def refresh_guest(self, uuid):
        return self._shared(super().refresh_guest, uuid)

    def create_mdev(self, parent, type_id, uuid):
        self._wait()
        latency, self.latency = self.latency, 0.0
        try:
            return self._shared(super().create_mdev, parent, type_id, uuid)
        finally:
            self.latency = latency

    def mdev_exists(self, mdev):
        self._wait()
        latency, self.latency = self.latency, 0.0
        try:
            return self._shared(super().mdev_exists, mdev)
        finally:
            self.latency = latency

    def start_mdev(self, mdev):
        return self._shared(super().start_mdev, mdev)

    def remove_mdev(self, mdev):
        return self._shared(super().remove_mdev, mdev)

    def set_vf_type(self, vf_address, type_id):
        return self._shared(super().set_vf_type, vf_address, type_id)


def new_tree(nodename: str = "node1") -> ProviderTree:
    """A provider tree holding the compute node's own provider."""
    tree = ProviderTree()
    tree.new_root(nodename, str(uuid.uuid5(ROOT_NAMESPACE, nodename)))
    return tree


def host_findings(inventory):
    """What ``audit`` finds from the host alone (no records, no
    configuration, no Placement)."""
    from vgpu_driver.model import audit

    return audit.audit(
        inventory,
        claims={},
        vf_types={},
        configured={},
        device_of={},
        parent_of={},
        allocations=None,
    )


def metered(make_conf, tmp_path, host):
    """A metered driver on ``host`` with its own registry and state, and
    a provider tree it has refreshed once: (driver, registry, tree)."""
    from prometheus_client import CollectorRegistry

    from vgpu_driver.metrics import MeteredDriver

    conf = make_conf(host.description.config)
    conf.set_override("state_path", str(tmp_path / "state"), "devices")
    registry = CollectorRegistry()
    driver = MeteredDriver(conf, host, registry=registry)
    tree = new_tree()
    driver.update_provider_tree(tree, "node1")
    return driver, registry, tree


class Node:
    """A driver on a simulated host, with its provider tree."""

    def __init__(
        self, make_conf, state, name="m10", config=None, host=None, extra=""
    ):
        self.description = load(name)
        self.host = host or SimulatedHost(self.description)
        text = textwrap.dedent(config or self.description.config) + extra
        self.conf = make_conf(text)
        self.conf.set_override("state_path", str(state), "devices")
        self.driver = VgpuDriver(self.conf, self.host)
        self.tree = new_tree()
        self.update()

    def update(self):
        return {
            p.device: p
            for p in self.driver.update_provider_tree(self.tree, "node1")
        }

    def rp(self, device):
        return self.tree.data(f"node1_{device}").uuid

    def alloc(self, *units, rc="VGPU"):
        found = {}
        for device, count in units:
            found[self.rp(device)] = {"resources": {rc: count}}
        return found

    def mdevs(self):
        return {m.uuid: m for m in self.host.discover().mdevs}


def providers(driver, tree=None, nodename="node1", allocations=None):
    tree = tree or new_tree(nodename)
    driver.update_provider_tree(tree, nodename, allocations=allocations)
    report = tree_report(tree, nodename)
    return {
        p["name"].removeprefix(f"{nodename}_"): p
        for p in report["providers"][1:]
    }


def summary(found):
    """device -> (resource class, total, reserved)"""
    out = {}
    for device, provider in found.items():
        [(rc, inv)] = provider["inventories"].items()
        out[device] = (rc, inv["total"], inv["reserved"])
        assert inv["max_unit"] == inv["total"]
        assert (inv["min_unit"], inv["step_size"]) == (1, 1)
        assert inv["allocation_ratio"] == 1.0
    return out


def xml_of_shipped_hosts(tmp_path):
    """Every parent's, mdev's and domain's XML as libvirt's test driver
    formats it, for all shipped hosts."""
    parents, mdevs, domains = [], [], []
    for i, name in enumerate(ALL_HOSTS):
        uri, _ = hostdesc.materialize(hostdesc.load(name), tmp_path / str(i))
        conn = libvirt.open(uri)
        flag = libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV_TYPES
        parents += [d.XMLDesc(0) for d in conn.listAllDevices(flag)]
        flag = libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_MDEV
        mdevs += [d.XMLDesc(0) for d in conn.listAllDevices(flag)]
        domains += [d.XMLDesc(0) for d in conn.listAllDomains(0)]
        conn.close()
    return parents, mdevs, domains
