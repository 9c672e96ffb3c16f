"""The changes :mod:`benchmarks.churn` times, each run on a host of its
own: a guest gone and back, a spawn and delete (its mdev reused, or
made and removed), a guest deleted behind Nova's back, a VF typed and
cleared, an mdev another manager makes and removes. Each returns the
CPU ms of the refreshes after each change and of the idle ones after
them, and Nova's periodic on the same host beside (see the table's
module for what each row means)."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.common import (
    conf_for,
    dense,
    event_loop,
    readable_by_daemon,
    sriov,
)
from benchmarks.nova_side import Nova, timed
from benchmarks.service import FREE, Service
from vgpu_driver.host.connection import Connection
from vgpu_driver.model.device import Parent
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim import guest_xml
from vgpu_driver.sim.mdev_devices import mdev_xml
from vgpu_driver.sim.mdev_libvirt import MdevConnection
from vgpu_driver.sim.specs import GuestSpec

RUNS = [15]  # repetitions of each change (--runs)
# every refresh timed (ours and Nova's) with the caches emptied first
# (--cold; see benchmarks.caches)
COLD = [False]
# wall ms of the last pairs() run: after each change, then idle, in turn
WALL: list[float] = []
# CPU ms of the same refreshes spent in libvirt's calls (see libvirt_cpu)
INSIDE: list[float] = []
_SPENT = [0.0]  # s, since the timed refresh began
_OUTSIDE = [0.0, 0.0]  # s of CPU and wall, not counted (see outside)


@contextlib.contextmanager
def libvirt_cpu() -> Iterator[None]:
    """Every call the library makes to libvirt (each goes through
    :meth:`Connection.call`: the test driver's C, or the modelled mdev
    calls of :mod:`vgpu_driver.sim.mdev_libvirt`) adds its CPU time to
    ``_SPENT``: what of a refresh is libvirt's answering, not ours. (Two
    clock reads a call, a few of them a refresh.)"""
    real = Connection.call

    def call(self: Connection, name: str, fn: Any, *args: Any) -> Any:
        start = time.process_time()
        try:
            return real(self, name, fn, *args)
        finally:
            _SPENT[0] += time.process_time() - start

    Connection.call = call  # type: ignore[method-assign]
    try:
        yield
    finally:
        Connection.call = real  # type: ignore[method-assign]


@contextlib.contextmanager
def counted_calls(
    calls: list[tuple[float, float, int, float]],
) -> Iterator[None]:
    """The CPU ms, wall ms, flushes to disk (``fsync``, ``fdatasync``)
    and CPU ms of libvirt's calls (see :func:`libvirt_cpu`) of the
    block, appended to ``calls``; what it does :func:`outside` is taken
    off."""
    flushes = [0]
    real = os.fsync, os.fdatasync

    def flushed(call: Callable[[int], None]) -> Callable[[int], None]:
        def flush(fd: int) -> None:
            flushes[0] += 1
            call(fd)

        return flush

    _OUTSIDE[:] = [0.0, 0.0]
    os.fsync, os.fdatasync = flushed(real[0]), flushed(real[1])
    spent = _SPENT[0]
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        yield
    finally:
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        os.fsync, os.fdatasync = real
        calls.append(
            (
                (cpu - _OUTSIDE[0]) * 1000,
                (wall - _OUTSIDE[1]) * 1000,
                flushes[0],
                (_SPENT[0] - spent) * 1000,
            )
        )


@contextlib.contextmanager
def outside() -> Iterator[None]:
    """Inside :func:`counted_calls`: what libvirt and the caller do (the
    guest's XML made, the domain defined or undefined), not counted."""
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        yield
    finally:
        _OUTSIDE[0] += time.process_time() - cpu
        _OUTSIDE[1] += time.perf_counter() - wall


def pairs(
    change: Callable[[int], None], refresh: Callable[[], Any]
) -> tuple[list[float], list[float]]:
    """(CPU ms of the refresh after each change, of the idle one after);
    their wall ms go to ``WALL``, what of them libvirt's calls took to
    ``INSIDE``."""
    changed, idle = [], []
    WALL.clear()
    INSIDE.clear()
    with libvirt_cpu():
        for step in range(2 * RUNS[0]):
            change(step)
            for times in (changed, idle):
                _SPENT[0] = 0.0
                cpu, wall = timed(refresh, cold=COLD[0])
                times.append(cpu)
                WALL.append(wall)
                INSIDE.append(_SPENT[0] * 1000)
    return changed, idle


def extras(remote: bool) -> dict[str, list[float]]:
    """Of the last :func:`pairs` run: the CPU ms libvirt's calls took in
    each refresh after a change, and (``remote``: served by a daemon)
    the wall ms after each change and idle."""
    found = {"libvirt": INSIDE[0::2]}
    if remote:
        found.update(changed_wall=WALL[0::2], idle_wall=WALL[1::2])
    return found


def guest_host(
    shape: tuple[int, int, int],
    tmp: Path,
    remote: Callable[[str], str] | None = None,
) -> tuple[str, Service, Callable[[int], None]]:
    """A dense host with this library on it as a service runs it (served
    by a daemon at the URI ``remote`` gives), and its guest change
    ``step``: the first guest stopped and undefined (even steps) or
    defined again (odd), told through ``domain_event``."""
    description = dense(shape[0], shape[1] + FREE, shape[2])
    uri, sysfs = hostdesc.materialize(description, tmp)
    if remote is not None:
        readable_by_daemon(tmp)
        uri = remote(uri)
    service = Service(uri, sysfs, conf_for(description.config, tmp), tmp)
    guest = service.guests[0]
    xml = service.conn.lookupByUUIDString(guest).XMLDesc(0)

    def change(step: int) -> None:
        if step % 2 == 0:
            guest_xml.delete(service.conn.lookupByUUIDString(guest))
        else:
            service.conn.defineXML(xml)
        service.driver.domain_event(guest, step % 2 == 1)

    return uri, service, change


def guest_churn(
    shape: tuple[int, int, int],
    tmp: Path,
    remote: Callable[[str], str] | None = None,
) -> dict[str, Any]:
    """``remote``: served by a daemon, at the URI it gives."""
    uri, service, change = guest_host(shape, tmp, remote)
    changed, idle = pairs(change, service.idle)
    more = extras(remote is not None)
    return {"changed": changed, "idle": idle, "nova": nova_idle(uri), **more}


def modelled(
    shape: tuple[int, int, int],
    tmp: Path,
    remote: Callable[[str], str] | None,
    making: bool = False,
) -> tuple[str, MdevConnection, Service]:
    """A dense host on a connection that makes and removes mdevs as
    libvirt and the kernel do (:class:`~vgpu_driver.sim.mdev_libvirt.
    MdevConnection`; served by a daemon at the URI ``remote`` gives),
    and this library on it as a service runs it. ``making``: no free
    mdev, unused ones removed (each bind makes its mdev)."""
    description = dense(shape[0], shape[1] + (0 if making else FREE), shape[2])
    event_loop()  # before the connection, as a service opens it
    uri, sysfs = hostdesc.materialize(description, tmp)
    if remote is not None:
        readable_by_daemon(tmp)
        uri = remote(uri)
    conn = MdevConnection(uri, description, sysfs=Path(sysfs))
    conf = conf_for(description.config, tmp)
    if making:
        conf.set_override("remove_unused_mdevs", True, "devices")
    return uri, conn, Service(uri, sysfs, conf, tmp, conn=conn)


def spawn_churn(
    shape: tuple[int, int, int],
    tmp: Path,
    remote: Callable[[str], str] | None = None,
    making: bool = False,
    by_event: bool = False,
) -> dict[str, Any]:
    """Nova's own change: an instance spawned (its devices bound, its
    guest defined) and deleted, through the calls the Nova integration
    makes, on the modelled connection (a bind finding no free mdev makes
    one; ``making``: none waits, and a release removes it). ``by_event``:
    the guest deleted behind Nova's back instead, told by its event
    alone (the refresh lets go of its mdev, and removes it when
    ``making``). ``remote``: served by a daemon, at the URI it gives."""
    uri, conn, service = modelled(shape, tmp, remote, making)
    driver, tree = service.driver, service.tree
    instance = str(uuid.uuid4())
    # the devices each spawn was given, and the free mdevs after each
    # refresh timed: the refreshes followed real spawns and deletes
    bound: list[list[str]] = []
    free_after: list[int] = []
    # the library's own calls of each spawn (the bind, the event,
    # guest_defined) and delete (the event, guest_undefined and
    # release_mdevs; the event alone when by_event): CPU ms, wall ms,
    # flushes to disk, CPU ms of libvirt's calls in them
    calls: list[tuple[float, float, int, float]] = []

    def spawn() -> list[str]:
        free = next(p for p in driver.last_plans if p.total > p.reserved)
        wanted = {tree.data(free.name).uuid: {"resources": {"VGPU": 1}}}
        devices = [d.id for d in driver.allocate_mdevs(instance, wanted)]
        spec = GuestSpec(uuid=instance, name="spawned", mdevs=devices)
        with outside():
            conn.defineXML(guest_xml.render_guest(spec))
        driver.domain_event(instance, True)
        driver.guest_defined(instance)
        return devices

    def delete() -> None:
        with outside():
            guest_xml.delete(conn.lookupByUUIDString(instance))
        driver.domain_event(instance, False)
        if not by_event:
            driver.guest_undefined(instance)
            driver.release_mdevs(instance)

    def change(step: int) -> None:
        if step:
            free_after.append(len(driver.free_mdevs()))
        with counted_calls(calls):
            if step % 2 == 0:
                bound.append(spawn())
            else:
                delete()

    changed, idle = pairs(change, service.idle)
    free_after.append(len(driver.free_mdevs()))
    more = extras(remote is not None)
    return {
        "changed": changed,
        "idle": idle,
        **more,
        "nova": nova_idle(uri),
        "bound": bound,
        "free": free_after,
        "calls": calls,
    }


def vf_churn(cards: int, tmp: Path) -> dict[str, Any]:
    description = sriov(cards)
    uri, sysfs = hostdesc.materialize(description, tmp)
    service = Service(uri, sysfs, conf_for(description.config, tmp), tmp)
    vf = description.pfs[0].vf_addresses[-1]  # a free VF
    path = Path(sysfs) / "bus/pci/devices" / vf / "nvidia/current_vgpu_type"

    def change(step: int) -> None:
        path.write_text("1150\n" if step % 2 == 0 else "0\n")

    changed, idle = pairs(change, service.idle)
    # Nova's libvirt driver reports no vGPU on these cards (vendor VFIO
    # VFs have no mdev type): nothing to time beside
    return {"changed": changed, "idle": idle, "nova": None, **extras(False)}


def another_manager(
    conn: MdevConnection, parent: Parent, made: list[str]
) -> Callable[[int], None]:
    """Another manager's change ``step`` on ``parent``, through libvirt's
    API: an mdev of its first type made (even steps; its name appended
    to ``made``), or the last one made removed (odd)."""

    def make(step: int) -> None:
        if step % 2 == 0:
            xml = mdev_xml(parent.name, parent.types[0].id, str(uuid.uuid4()))
            made.append(conn.nodeDeviceCreateXML(xml, 0).name())
        else:
            conn.gone.add(made.pop())

    return make


def mdev_churn(
    shape: tuple[int, int, int],
    tmp: Path,
    remote: Callable[[str], str] | None = None,
) -> dict[str, Any]:
    """An mdev another manager makes on the first pGPU, then removes,
    through libvirt's API as ``mdevctl`` or libvirt >= 7.3 would: the
    test driver cannot, so :class:`~vgpu_driver.sim.mdev_libvirt.
    MdevConnection` answers those calls as libvirt and the kernel do
    (its sysfs directory, its parent's room) and the adapter reads the
    rest from the test driver."""
    uri, conn, service = modelled(shape, tmp, remote)
    parent = service.driver.discover().parents[0]
    made: list[str] = []
    # the first pGPU's reserved units after each change (another
    # manager's free mdevs are reserved): the refreshes saw real changes
    reserved: list[int] = []

    def reserved_now() -> int:
        plans = service.driver.last_plans
        return sum(p.reserved for p in plans if p.device == parent.name)

    make = another_manager(conn, parent, made)

    def change(step: int) -> None:
        if step:
            reserved.append(reserved_now())
        make(step)

    changed, idle = pairs(change, service.idle)
    reserved.append(reserved_now())
    more = extras(remote is not None)
    nova = nova_after(uri, conn, make)
    return {
        "changed": changed,
        "idle": idle,
        "nova": nova[0] if nova else None,
        **more,
        "reserved": reserved,
        "nova_listed": nova[1] if nova else [],
    }


def nova_after(
    uri: str, conn: MdevConnection, make: Callable[[int], None]
) -> tuple[list[float], list[int]] | None:
    """Nova's periodic after each of the same changes, on the same
    modelled connection (it lists and reads the mdevs another manager
    makes, as on a host), and the mdevs it listed then. Timed in a loop
    of its own: run between the service's refreshes, it left them a
    cold cache that an idle refresh, timed right after, did not pay."""
    try:
        nova = Nova(uri, conn)
    except ImportError:
        return None
    times, listed = [], []
    for step in range(2 * RUNS[0]):
        make(step)
        times.append(nova.periodic(cold=COLD[0])[0])
        listed.append(len(nova.driver._host.list_mediated_devices()))
    return times, listed


def nova_idle(uri: str) -> list[float] | None:
    try:
        nova = Nova(uri)
    except ImportError:
        return None
    return [nova.periodic(cold=COLD[0])[0] for _ in range(RUNS[0])]
