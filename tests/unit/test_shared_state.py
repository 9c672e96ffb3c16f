"""Records shared by several processes and threads of one host: binds
that race, writers that must merge, records that cannot be read."""

from __future__ import annotations

import json
import multiprocessing
import textwrap
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests import helpers, records_helpers
from tests.helpers import Node, new_tree
from tests.records_helpers import conf_with_state
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.exception import ConfigInvalid, DeviceCapacityExhausted
from vgpu_driver.model.device import Guest
from vgpu_driver.records.store import StateRecordCorrupt, StateStore

PARENT = "pci_0000_86_00_0"  # m10: nvidia-36, capacity 16, 2 mdevs, 1 used
ROOM_ON_PARENT = 15  # 1 free mdev + 14 to create
FREE_ON_86 = "386818c0-9f18-5b12-8c04-386dbef1b1ab"
USED_ON_86 = "2d3ad629-ad6e-5e57-89c8-f639bc44d307"


def _driver(state: Path, host_file: Path) -> tuple[VgpuDriver, str]:
    host = helpers.FileBackedHost(host_file)
    host.latency = 0.002
    conf = conf_with_state(state, helpers.load("m10").config, state.parent)
    driver = VgpuDriver(conf, host)
    tree = new_tree()
    driver.update_provider_tree(tree, "node1")
    return driver, tree.data(f"node1_{PARENT}").uuid


def _bind_worker(state, host_file, worker, binds, barrier, results) -> None:
    driver, rp = _driver(Path(state), Path(host_file))
    barrier.wait()
    for n in range(binds):
        instance = f"p{worker}-i{n}"
        try:
            [device] = driver.allocate_mdevs(
                instance, {rp: {"resources": {"VGPU": 1}}}
            )
        except DeviceCapacityExhausted:
            results.put((instance, None))
            continue
        results.put((instance, device.id))


def test_binds_from_several_processes_never_share_a_device(tmp_path):
    """4 real processes bind 24 units on a parent with room for 15: each
    device goes to one instance, 15 binds succeed, and every claim of
    every process is still on disk afterwards."""
    state = tmp_path / "state"
    host_file = tmp_path / "host.pickle"
    helpers.FileBackedHost(host_file, helpers.load("m10"))
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    results = ctx.Queue()
    workers = [
        ctx.Process(
            target=_bind_worker,
            args=(str(state), str(host_file), w, 6, barrier, results),
        )
        for w in range(4)
    ]
    for worker in workers:
        worker.start()
    outcomes = dict(results.get(timeout=120) for _ in range(24))
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    bound = {i: d for i, d in outcomes.items() if d is not None}
    assert len(bound) == ROOM_ON_PARENT
    assert len(set(bound.values())) == ROOM_ON_PARENT
    assert USED_ON_86 not in bound.values()
    claims = records_helpers.claims_on_disk(state)
    assert {c["instance"]: d for d, c in claims.items()} == bound
    host = helpers.FileBackedHost(host_file)
    on_parent = [m for m in host.discover().mdevs if m.parent == PARENT]
    assert len(on_parent) == ROOM_ON_PARENT + 1


def test_racing_threads_with_latency_never_share_a_device(make_conf, tmp_path):
    """Fewer devices than binds, a slow kernel, 24 threads at once."""
    n = Node(make_conf, tmp_path / "state")
    n.host.latency = 0.003
    rp = n.alloc((PARENT, 1))

    def bind(i):
        try:
            return n.driver.allocate_mdevs(f"i{i}", rp)[0].id
        except DeviceCapacityExhausted:
            return None

    with ThreadPoolExecutor(24) as pool:
        ids = [d for d in pool.map(bind, range(24)) if d]
    assert len(ids) == len(set(ids)) == ROOM_ON_PARENT
    assert len(n.driver.binder.claims()) == ROOM_ON_PARENT


def test_two_drivers_of_one_host_do_not_hand_out_the_same_free_mdev(
    make_conf, tmp_path
):
    """The second driver's view predates the first one's bind."""
    state = tmp_path / "state"
    host = helpers.simulated_host("m10")
    first = Node(make_conf, state, host=host)
    second = Node(make_conf, state, host=host)
    [a] = first.driver.allocate_mdevs("i1", first.alloc((PARENT, 1)))
    [b] = second.driver.allocate_mdevs("i2", second.alloc((PARENT, 1)))
    assert a.id == FREE_ON_86 and b.id != a.id and b.created


def test_a_guest_defined_by_another_process_is_seen_before_choosing(
    make_conf, tmp_path
):
    """Process A binds and defines its guest, which ends its claim; B
    (whose view of guests is older) must not take that mdev."""
    state = tmp_path / "state"
    host = helpers.simulated_host("m10")
    a = Node(make_conf, state, host=host)
    b = Node(make_conf, state, host=host)
    [device] = a.driver.allocate_mdevs("i1", a.alloc((PARENT, 1)))
    host.note_guest(Guest("i1", "instance-1", (device.id,)))
    assert a.driver.guest_defined("i1") == [device.id]
    assert a.driver.binder.claims() == {}
    # B's binder still has the mdev as free in its view
    assert (
        device.id
        in b.driver.binder.ledger.view.parents[PARENT].free["nvidia-36"]
    )
    [other] = b.driver.allocate_mdevs("i2", b.alloc((PARENT, 1)))
    assert other.id != device.id


def test_a_sync_pass_never_erases_claims_it_did_not_make(make_conf, tmp_path):
    state = tmp_path / "state"
    host = helpers.simulated_host("m10")
    syncer = Node(make_conf, state, host=host)  # started first
    compute = Node(make_conf, state, host=host)
    [device] = compute.driver.allocate_mdevs("i1", compute.alloc((PARENT, 1)))
    syncer.update()
    syncer.driver.discover()
    assert set(compute.driver.binder.claims()) == {device.id}
    assert set(syncer.driver.binder.claims()) == {device.id}


def test_spawn_claims_end_when_the_guest_is_defined(make_conf, tmp_path):
    """The claims file holds unfinished binds only."""
    n = Node(make_conf, tmp_path / "state")
    for i in range(5):
        [d] = n.driver.allocate_mdevs(f"i{i}", n.alloc((PARENT, 1)))
        n.host.note_guest(Guest(f"i{i}", f"instance-{i}", (d.id,)))
        n.driver.guest_defined(f"i{i}")
    assert records_helpers.claims_on_disk(tmp_path / "state") == {}
    devices = n.driver.instance_devices()
    assert all(devices[f"i{i}"]["in_use"] for i in range(5))


# -- records that cannot be read ---------------------------------------

CORRUPT = {
    "empty": "",
    "truncated": '{"epoch": 3, "claims": {"abc": {"kind": "md',
    "a list": "[1, 2]",
    "bad fields": '{"epoch": 1, "claims": {"x": {"kind": "mdev"}}}',
}


@pytest.mark.parametrize("content", CORRUPT.values(), ids=list(CORRUPT))
def test_an_unreadable_claims_record_stops_binds_and_is_kept(
    make_conf, tmp_path, content
):
    state = tmp_path / "state"
    n = Node(make_conf, state)
    record = state / "claims.json"
    record.write_text(content)
    with pytest.raises(StateRecordCorrupt) as caught:
        n.driver.allocate_mdevs("i1", n.alloc((PARENT, 1)))
    assert str(record) in str(caught.value)
    assert "restore" in str(caught.value)
    assert record.read_text() == content  # not overwritten
    assert n.host.operations["create_mdev"] == 0


def test_init_host_moves_an_unreadable_record_aside_and_rebuilds(
    make_conf, tmp_path
):
    state = tmp_path / "state"
    n = Node(make_conf, state)
    (state / "claims.json").write_text("[]")
    done = n.driver.init_host()
    [moved] = done["records_moved_aside"]
    assert Path(moved).read_text() == "[]"
    assert Path(moved).name.startswith("claims.json.corrupt-")
    # guests' devices are known from their domains: not handed out again
    devices = [
        n.driver.allocate_mdevs(f"i{i}", n.alloc((PARENT, 1)))[0].id
        for i in range(3)
    ]
    assert USED_ON_86 not in devices and FREE_ON_86 in devices


def test_an_unreadable_cache_record_is_moved_aside_and_rebuilt(
    make_conf, tmp_path
):
    state = tmp_path / "state"
    state.mkdir()
    (state / "provider-traits.json").write_text('{"rp": "not a list"}')
    n = Node(make_conf, state)
    assert list(state.glob("provider-traits.json.corrupt-*"))
    assert n.tree.data(f"node1_{PARENT}").traits  # the driver goes on


def test_temporaries_of_a_killed_save_are_removed(tmp_path):
    store = StateStore(tmp_path)
    leftover = tmp_path / ".tmp-claims.abc123"
    leftover.write_text('{"half": ')
    store.save("claims", {"epoch": 1, "claims": {}})
    assert not leftover.exists()
    assert store.load("claims", None) == {"epoch": 1, "claims": {}}


def test_a_failed_save_leaves_no_temporary_and_the_old_record(tmp_path):
    store = StateStore(tmp_path)
    store.save("vf-types", {"0000:41:00.4": 1145})
    with pytest.raises(Exception, match="vf-types"):
        store.save("vf-types", {"bad": object()})
    assert not list(tmp_path.glob(".tmp-*"))
    assert store.load("vf-types", None) == {"0000:41:00.4": 1145}


def test_update_merges_with_what_another_writer_wrote(tmp_path):
    one, two = StateStore(tmp_path), StateStore(tmp_path)
    one.update("r", lambda cur: {**cur, "a": 1}, {})
    two.update("r", lambda cur: {**cur, "b": 2}, {})
    assert one.load("r", None) == {"a": 1, "b": 2}


def test_the_driver_records_merge_entries_of_two_drivers(make_conf, tmp_path):
    state = tmp_path / "state"
    host = helpers.simulated_host("m10")
    a = Node(make_conf, state, host=host)
    b = Node(make_conf, state, host=host)
    a.driver.confirm_flushed()
    b.driver.confirm_flushed()
    record = json.loads((state / "provider-traits.json").read_text())
    assert set(record) == {
        p.name for p in a.driver.update_provider_tree(new_tree(), "node1")
    }


def test_an_empty_state_path_is_a_clear_error(make_conf, tmp_path):
    conf = make_conf(helpers.load("m10").config)
    conf.set_override("state_path", "", "devices")
    with pytest.raises(
        ConfigInvalid, match=r"\[devices\] state_path = : is empty"
    ):
        VgpuDriver(conf, helpers.simulated_host("m10"))


def test_a_pass_plans_with_one_reading_of_the_claims(
    make_conf, tmp_path, monkeypatch
):
    """The claims are on disk, read under the records' lock: a pass reads
    them once to plan, and remembers what it planned with (not a later
    reading); a pass that finds nothing changed reads them once too."""
    from vgpu_driver.service.binder import DeviceBinder

    n = Node(make_conf, tmp_path / "state")
    n.driver.allocate_mdevs("i1", n.alloc((PARENT, 1)))
    reads = []
    real = DeviceBinder.claimed_devices

    def counted(self):
        reads.append(1)
        return real(self)

    monkeypatch.setattr(DeviceBinder, "claimed_devices", counted)
    n.host.note_guest(Guest("g2", "instance-2", ()))  # something changed
    n.update()
    assert len(reads) == 1
    reads.clear()
    n.update()  # nothing changed
    assert len(reads) == 1


def test_a_type_switch_never_removes_an_mdev_another_process_claimed(
    make_conf, tmp_path
):
    """Process A bound the free nvidia-36 mdev of 86 (no guest yet); B
    runs with 86 switched to nvidia-35 and removes the old type's free
    mdevs: never A's."""
    from tests.helpers import M10_FREE_ON_86

    state = tmp_path / "state"
    host = helpers.simulated_host("m10")
    a = Node(make_conf, state, host=host)
    [device] = a.driver.allocate_mdevs("i1", a.alloc((PARENT, 1)))
    assert device.id == M10_FREE_ON_86
    switched = textwrap.dedent(
        """
        [devices]
        enabled_mdev_types = nvidia-35
        [mdev_nvidia-35]
        device_addresses = 0000:84:00.0,0000:85:00.0,0000:86:00.0
        """
    )
    b = Node(make_conf, state, config=switched, host=host)
    b.update()
    assert M10_FREE_ON_86 in {m.uuid for m in host.discover().mdevs}
    assert a.driver.binder.claims()[M10_FREE_ON_86]["instance"] == "i1"


def test_over_libvirt_another_process_s_guest_is_read_before_choosing(
    make_conf, tmp_path
):
    """As above, on libvirt: B's guest was defined with no event to A
    (another process's), so A's cached reading of the guests does not
    have it. A's records changed under it: it reads every guest again
    before choosing, and never hands out the mdev B's guest uses."""
    import libvirt

    from tests.domains import hand_made_domain_xml
    from vgpu_driver.host.libvirt_host import LibvirtHost
    from vgpu_driver.sim import description as hostdesc

    uri, sysfs = hostdesc.materialize(helpers.load("m10"), tmp_path / "host")
    conn = libvirt.open(uri)
    a, b = (
        Node(
            make_conf,
            tmp_path / "state",
            host=LibvirtHost(sysfs_root=sysfs, connection=conn),
        )
        for _ in range(2)
    )
    a.driver.discover()  # A has read the guests: it follows them by events
    guest = str(uuid.uuid4())
    [device] = b.driver.allocate_mdevs(guest, b.alloc((PARENT, 1)))
    assert device.id == FREE_ON_86
    conn.defineXML(hand_made_domain_xml(guest, "instance-1", [device.id]))
    b.driver.domain_event(guest, True)
    assert b.driver.guest_defined(guest) == [device.id]
    assert b.driver.binder.claims() == {}  # the guest holds it now
    [other] = a.driver.allocate_mdevs("i2", a.alloc((PARENT, 1)))
    assert other.id != device.id


def test_a_release_reads_the_host_again_before_taking_devices_back(
    make_conf, tmp_path
):
    """A's view says instance i1's guest holds the mdev; the guest went
    with no event to A, and B then bound the free mdev for i2. A's
    release of i1 (Nova's clean-up, late) must read the host again: the
    mdev is i2's claim now, not i1's to hand back or remove."""
    state = tmp_path / "state"
    host = helpers.simulated_host("m10")
    a = Node(make_conf, state, host=host)
    b = Node(make_conf, state, host=host)
    [device] = a.driver.allocate_mdevs("i1", a.alloc((PARENT, 1)))
    host.note_guest(Guest("i1", "instance-1", (device.id,)))
    assert a.driver.guest_defined("i1") == [device.id]
    host.forget_guest("i1")  # no event reaches A
    [taken] = b.driver.allocate_mdevs("i2", b.alloc((PARENT, 1)))
    assert taken.id == device.id  # the free mdev, reused
    assert a.driver.release_mdevs("i1") == []
    assert records_helpers.claims_on_disk(state)[device.id]["instance"] == "i2"
    assert device.id in {m.uuid for m in host.discover().mdevs}


def test_a_guest_defined_ends_its_own_spawn_claims_alone(make_conf, tmp_path):
    """Two spawns in flight: the first one's guest is defined; the second
    instance's claim stays until its own guest has the device (else a
    bind could hand its mdev out before its guest is defined)."""
    n = Node(make_conf, tmp_path / "state")
    [first] = n.driver.allocate_mdevs("i1", n.alloc((PARENT, 1)))
    [second] = n.driver.allocate_mdevs("i2", n.alloc((PARENT, 1)))
    n.host.note_guest(Guest("i1", "instance-1", (first.id,)))
    assert n.driver.guest_defined("i1") == [first.id]
    assert set(n.driver.binder.claims()) == {second.id}
    assert set(records_helpers.claims_on_disk(tmp_path / "state")) == {
        second.id
    }
    [third] = n.driver.allocate_mdevs("i3", n.alloc((PARENT, 1)))
    assert third.id not in {first.id, second.id}
