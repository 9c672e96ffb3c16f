"""A bind's claim on a parent another manager filled since the binder's
view was read (its mdev cannot be made: the bind will fail and be
undone) holds no unit: no refresh meanwhile reports a total above what
the card holds, and none after it keeps one. Nor does a claim take the
room an mdev gone from the host left while a guest still names it (it
is made again when the guest starts)."""

from __future__ import annotations

import random
import uuid

import libvirt
import pytest

from tests.domains import hand_made_domain_xml
from tests.random_host import RandomHost
from vgpu_driver.host.domain_xml import parse_guest
from vgpu_driver.model.binding import BoundDevice
from vgpu_driver.model.claims import SPAWN, claim_of
from vgpu_driver.sim.mdev_devices import mdev_xml


def _filled(host: RandomHost):
    """The first parent filled with mdevs (another manager's), each in a
    guest (defined by hand): every unit of it in use."""
    parent = host.parents[0]
    type_id = parent.types[0].id
    while True:
        name = str(uuid.uuid4())
        try:
            host.conn.nodeDeviceCreateXML(
                mdev_xml(parent.name, type_id, name), 0
            )
        except libvirt.libvirtError:  # no room left
            break
    reading = host.driver.discover()
    users = reading.mdev_users()
    for mdev in sorted(
        m.uuid
        for m in reading.mdevs
        if m.parent == parent.name and m.uuid not in users
    ):
        guest = str(uuid.uuid4())
        host.conn.defineXML(hand_made_domain_xml(guest, guest[:8], [mdev]))
        host.driver.domain_event(guest, True)
    return parent.name, type_id


def _total(host: RandomHost, parent: str) -> int:
    host.driver.update_provider_tree(host.service.tree, "bench")
    [plan] = [p for p in host.driver.last_plans if p.device == parent]
    return plan.total


@pytest.mark.parametrize("whole", [False, True])
def test_a_claim_past_the_room_raises_no_total(tmp_path, whole):
    host = RandomHost(random.Random(0), tmp_path)
    parent, type_id = _filled(host)
    full = _total(host, parent)
    assert full == 16  # (the M10's 16 of its smallest type)
    ledger = host.driver.binder.ledger
    late = str(uuid.uuid4())  # the mdev the late bind means to make
    with ledger.locked():
        ledger.claims[late] = claim_of(
            BoundDevice("mdev", late, parent, type_id, True), "late", SPAWN
        )
        ledger.save()
    if whole:
        host.driver._refresher._fingerprint = None  # plan the whole host
    assert _total(host, parent) == full
    with ledger.locked():  # the bind undone
        del ledger.claims[late]
        ledger.save()
    assert _total(host, parent) == full


@pytest.mark.parametrize("whole", [False, True])
def test_a_claim_and_a_guest_s_mdev_gone_share_no_room(tmp_path, whole):
    """A full parent; an mdev a stopped guest names is gone from the host
    (as after a reboot: made again when the guest starts), which leaves
    the room it took; two late binds' claims are on that parent. The
    guest's mdev holds that room (it is counted in use): no claim does,
    and the total stays what the card holds. Not ``whole``: the parent
    alone is planned again (the touched-parents path)."""
    host = RandomHost(random.Random(0), tmp_path)
    parent, type_id = _filled(host)
    full = _total(host, parent)
    ledger = host.driver.binder.ledger
    with ledger.locked():
        for instance in ("late", "later"):
            device = str(uuid.uuid4())
            ledger.claims[device] = claim_of(
                BoundDevice("mdev", device, parent, type_id, True),
                instance,
                SPAWN,
            )
        ledger.save()
    assert _total(host, parent) == full
    [gone, *_] = sorted(
        mdev
        for domain in host.conn.listAllDomains()
        if not domain.isActive()
        for mdev in parse_guest(domain.XMLDesc(0)).mdevs
        if mdev in _on(host, parent)
    )
    refresher = host.driver._refresher
    planned, touched = refresher._plan_touched, []

    def plan_touched(*args):
        plans = planned(*args)
        touched.append(plans is not None)
        return plans

    refresher._plan_touched = plan_touched
    if whole:
        refresher._fingerprint = None
    host.conn.gone.add(_name_of(host, gone))
    assert _total(host, parent) == full
    assert touched == [not whole]


def _on(host: RandomHost, parent: str) -> set[str]:
    """The uuids of the mdevs on ``parent``, as libvirt lists them."""
    return {
        "-".join(d.name().split("_")[1:6])
        for d in host.conn.listAllDevices(0)
        if d.name().startswith("mdev_") and parent in d.XMLDesc(0)
    }


def _name_of(host: RandomHost, mdev: str) -> str:
    """The libvirt name of mdev ``mdev`` (mdev_<uuid>_<parent>)."""
    named = mdev.replace("-", "_")
    [name] = [
        d.name() for d in host.conn.listAllDevices(0) if named in d.name()
    ]
    return name
