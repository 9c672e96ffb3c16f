"""A dense host on which things happen at random, as on a compute host
(binds and releases, guests defined and undefined by the caller and by
hand, mdevs another manager makes and removes), with a service on it as
a service runs it; and the checks the tests of such sequences make."""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from pathlib import Path

import libvirt

from benchmarks.common import conf_for
from benchmarks.service import FREE, Service
from tests.domains import hand_made_domain_xml
from vgpu_driver.exception import DeviceCapacityExhausted
from vgpu_driver.host.domain_xml import parse_guest
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim import guest_xml
from vgpu_driver.sim.mdev_devices import mdev_xml
from vgpu_driver.sim.mdev_libvirt import MdevConnection


def tree_figures(tree):
    """Provider name -> (inventory, traits) of the node ``bench``."""
    return {
        tree.data(u).name: (tree.data(u).inventory, tree.data(u).traits)
        for u in tree.get_provider_uuids("bench")
    }


class RandomHost:
    """What happens on the host, at random."""

    def __init__(
        self,
        rng: random.Random,
        tmp: Path,
        making: bool = False,
        remove_unused: bool = False,
        described: bool = True,
    ) -> None:
        """``making``: no free mdev, and those released removed (each
        bind makes its mdev, each release removes it). ``remove_unused``:
        the free mdevs there, those released removed. ``described``
        False: its type has no name and no description, as Intel GVT-g's
        and mtty's have none (nothing says how many a pGPU holds)."""
        raw = hostdesc.dense_raw(2, 4 if making else 6 + FREE, 4)
        if not described:
            for parent in raw["parents"]:
                for mdev_type in parent["types"]:
                    del mdev_type["name"], mdev_type["description"]
        description = hostdesc.parse(json.dumps(raw), "bench")
        uri, sysfs = hostdesc.materialize(description, tmp)
        self.conn = MdevConnection(uri, description, sysfs=Path(sysfs))
        conf = conf_for(description.config, tmp)
        if making or remove_unused:
            conf.set_override("remove_unused_mdevs", True, "devices")
        self.service = Service(uri, sysfs, conf, tmp, conn=self.conn)
        self.driver = self.service.driver
        self.parents = self.driver.discover().parents
        self.rng = rng
        self.theirs: list = []  # mdevs another manager made
        self.bound: dict[str, list[str]] = {}  # instance -> devices
        self.defined: set[str] = set()  # instances with a guest
        self.by_hand: dict[str, str] = {}  # guest defined by hand -> mdev
        self.done: Counter[str] = Counter()  # what happened, how often

    def happenings(self) -> list:
        """What may happen next, each as likely."""
        return [
            self.make,
            self.gone,
            self.bind,
            self.define,
            self.release,
            self.spawn,
            self.by_hand_define,
            self.by_hand_undefine,
        ]

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128)))

    def make(self) -> None:
        parent = self.rng.choice(self.parents)
        xml = mdev_xml(parent.name, parent.types[0].id, self.uuid())
        try:
            self.theirs.append(self.conn.nodeDeviceCreateXML(xml, 0))
        except libvirt.libvirtError:  # the parent is full
            self.done["make refused"] += 1
            return
        self.done["make"] += 1

    def gone(self) -> None:
        if self.theirs:
            mdev = self.theirs.pop(self.rng.randrange(len(self.theirs)))
            self.conn.gone.add(mdev.name())
            self.done["gone"] += 1

    def bind(self) -> None:
        plans = [p for p in self.driver.last_plans if p.total > p.reserved]
        if plans:
            plan = self.rng.choice(plans)
            provider = self.service.tree.data(plan.name).uuid
            instance = self.uuid()
            try:
                devices = self.driver.allocate_mdevs(
                    instance,
                    {provider: {"resources": {plan.resource_class: 1}}},
                )
            except DeviceCapacityExhausted:
                # the test asks past what Placement would allocate (or
                # another manager took the room since the last refresh):
                # Nova reschedules
                self.done["bind refused"] += 1
                return
            # never another manager's, nor one a guest or a bind has
            taken = {m.uuid for m in self.theirs} | set(self.by_hand.values())
            for ids in self.bound.values():
                taken.update(ids)
            assert not {d.id for d in devices} & taken
            self.bound[instance] = [d.id for d in devices]
            self.done["bind"] += 1

    def define(self) -> None:
        waiting = sorted(self.bound.keys() - self.defined)
        if waiting:
            instance = self.rng.choice(waiting)
            xml = hand_made_domain_xml(
                instance, instance[:8], self.bound[instance], nova=True
            )
            self.conn.defineXML(xml)
            self.driver.domain_event(instance, True)
            self.driver.guest_defined(instance)
            self.defined.add(instance)
            self.done["define"] += 1

    def release(self) -> None:
        if self.bound:
            instance = self.rng.choice(sorted(self.bound))
            if instance in self.defined:
                guest_xml.delete(self.conn.lookupByUUIDString(instance))
                self.driver.domain_event(instance, False)
                self.driver.guest_undefined(instance)
                self.defined.discard(instance)
            self.driver.release_mdevs(instance)
            del self.bound[instance]
            self.done["release"] += 1

    def spawn(self) -> None:
        """Nova's spawn: bound and defined, no refresh between."""
        self.bind()
        self.define()

    def by_hand_define(self) -> None:
        free = sorted(self.driver.free_mdevs())
        if free:
            guest = self.uuid()
            mdev = self.rng.choice(free)
            xml = hand_made_domain_xml(guest, guest[:8], [mdev])
            self.conn.defineXML(xml)
            self.driver.domain_event(guest, True)
            self.by_hand[guest] = mdev
            self.done["by_hand_define"] += 1

    def by_hand_undefine(self) -> None:
        if self.by_hand:
            guest = self.rng.choice(sorted(self.by_hand))
            guest_xml.delete(self.conn.lookupByUUIDString(guest))
            self.driver.domain_event(guest, False)
            del self.by_hand[guest]
            self.done["by_hand_undefine"] += 1


def in_use(host: RandomHost) -> dict[str, set[str]]:
    """Guest uuid -> the mdevs its domain names, read from libvirt
    itself (no code of the library's)."""
    found = {}
    for domain in host.conn.listAllDomains():
        guest = parse_guest(domain.XMLDesc(0))
        if guest is not None and guest.mdevs:
            found[guest.uuid] = set(guest.mdevs)
    return found


def view_in_use(driver) -> dict[str, set[str]]:
    """Guest uuid -> the mdevs the driver's view has it use."""
    return {
        instance: set(held["in_use"])
        for instance, held in driver.instance_devices().items()
        if held["in_use"]
    }


def view_agrees(driver):
    """The binder's view, followed, is the one built whole."""
    free = driver.free_mdevs()
    used = driver.instance_devices()
    driver._refresher.reading._taken = None  # build it whole
    driver.discover(rescan_guests=True)
    assert driver.free_mdevs() == free
    assert driver.instance_devices() == used
