"""The claims record is read at every pass under the lock; the VF types
and devices made only when another save (which always gives the claims
record a new epoch) or a repair may have changed them."""

from __future__ import annotations

from collections import Counter

import pytest

from vgpu_driver.records import store as records_store
from vgpu_driver.records.claims import ClaimsRecord
from vgpu_driver.records.store import StateStore


def counting_loads(monkeypatch):
    loads: Counter[str] = Counter()
    real = records_store.StateStore.load

    def load(self, key, *args, **kwargs):
        loads[key] += 1
        return real(self, key, *args, **kwargs)

    monkeypatch.setattr(records_store.StateStore, "load", load)
    return loads


def counting_updates(monkeypatch):
    """The keys of the records written through ``StateStore.update``."""
    updates: list[str] = []
    real = records_store.StateStore.update

    def update(self, key, *args, **kwargs):
        updates.append(key)
        return real(self, key, *args, **kwargs)

    monkeypatch.setattr(records_store.StateStore, "update", update)
    return updates


def test_records_as_this_process_left_them_are_not_read_again(
    tmp_path, monkeypatch
):
    """Under the lock, the claims file this process last wrote (one
    stat) and what it holds unchanged: nothing is read."""
    record = ClaimsRecord(StateStore(tmp_path))
    with record.locked():
        record.made.add("m1")
        record.save(vf_types={"0000:41:00.4": 1150})
    loads = counting_loads(monkeypatch)
    for _ in range(3):
        with record.locked():
            assert record.made == {"m1"}
            assert record.vf_types == {"0000:41:00.4": 1150}
    assert loads == Counter()


@pytest.mark.parametrize("change", ["claim", "claim in place", "made", "vf"])
def test_a_change_held_but_never_saved_is_read_back(
    tmp_path, monkeypatch, change
):
    """An operation that changed what is held and failed to save is
    undone by the next lock: the records are read again."""
    record = ClaimsRecord(StateStore(tmp_path))
    from vgpu_driver.model.binding import BoundDevice
    from vgpu_driver.model.claims import SPAWN, claim_of

    claim = claim_of(BoundDevice("mdev", "d1", "p", "t"), "i1", SPAWN)
    with record.locked():
        record.claims["d1"] = dict(claim)
        record.save(vf_types={"0000:41:00.4": 1150})
    with record.locked():
        if change == "claim":
            record.claims["d2"] = {**claim, "id": "d2"}
        elif change == "claim in place":
            record.claims["d1"]["purpose"] = "migration"
        elif change == "made":
            record.made.add("m9")
        else:
            record.vf_types["0000:41:00.5"] = 1150
    loads = counting_loads(monkeypatch)
    with record.locked():
        assert record.claims == {"d1": claim}
        assert record.made == set() and record.vf_types == {
            "0000:41:00.4": 1150
        }
    assert loads["claims"] == 1


def test_another_process_s_save_is_read(tmp_path, monkeypatch):
    ours, theirs = (
        ClaimsRecord(StateStore(tmp_path)),
        ClaimsRecord(StateStore(tmp_path)),
    )
    with ours.locked():
        ours.made.add("m1")
        ours.save()
    with ours.locked():
        pass
    with theirs.locked():
        theirs.made.add("m2")
        theirs.save(vf_types={"0000:41:00.5": 1150})
    with ours.locked():
        assert ours.made == {"m1", "m2"}
        assert ours.vf_types == {"0000:41:00.5": 1150}
        assert ours.stale


def test_a_repair_reads_them_again(tmp_path):
    record = ClaimsRecord(StateStore(tmp_path))
    with record.locked():
        record.save(vf_types={"0000:41:00.4": 1150})
    (tmp_path / "vf-types.json").write_text("{ cut")
    assert record.repair()  # moved aside
    with record.locked():
        assert record.vf_types == {}  # not the value read before


def test_a_cache_record_is_read_while_another_holds_the_lock(tmp_path):
    """The mdevs seen and the traits owned are caches, saved whole: a
    reader does not wait for the lock another holds (a start beside a
    long operator's repair), and still gets what was saved."""
    import threading

    writer, reader = StateStore(tmp_path), StateStore(tmp_path)
    writer.save("mdev-parents", {"u1": ["p", "t"]})
    holding, release = threading.Event(), threading.Event()

    def hold():
        with writer.locked():
            holding.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(5)
        found: list[object] = []
        read = threading.Thread(
            target=lambda: found.append(
                reader.load_or_rebuild("mdev-parents", {})
            )
        )
        read.start()
        read.join(2)
        assert found == [{"u1": ["p", "t"]}]  # not blocked
    finally:
        release.set()
        thread.join()
        read.join()


def test_an_unreadable_cache_record_is_moved_aside_under_the_lock(tmp_path):
    store = StateStore(tmp_path)
    store.save("mdev-parents", {"u1": ["p", "t"]})
    (tmp_path / "mdev-parents.json").write_text("{ cut")
    assert store.load_or_rebuild("mdev-parents", {}) == {}
    assert not (tmp_path / "mdev-parents.json").exists()
    assert list(tmp_path.glob("mdev-parents.json.*"))  # kept aside


def test_a_restart_reads_which_configuration_wrote_and_writes_nothing(
    tmp_path, monkeypatch
):
    from vgpu_driver.records.writers import Writers

    Writers(StateStore(tmp_path)).note("CUSTOM_VGPU_CONF_1", "nova.conf")
    updates = counting_updates(monkeypatch)
    again = Writers(StateStore(tmp_path))  # the service restarted
    again.note("CUSTOM_VGPU_CONF_1", "nova.conf")
    assert updates == []
    again.note("CUSTOM_VGPU_CONF_2", "other.conf")  # a new one is written
    assert updates == ["writers"]
    assert Writers(StateStore(tmp_path)).source("CUSTOM_VGPU_CONF_2") == (
        "other.conf"
    )


def test_a_restarted_service_is_the_same_writer(tmp_path, monkeypatch):
    """The writer a service records is its program and configuration
    files: a restart (another pid) reads the record and writes nothing,
    where a pid in it would rewrite the record, flushed, at every
    start."""
    from oslo_config import cfg

    from vgpu_driver.model.config import DeviceConfig
    from vgpu_driver.records.writers import Writers
    from vgpu_driver.service.settings import Settings

    conf = cfg.ConfigOpts()
    conf([], default_config_files=[])
    first = Settings(conf, DeviceConfig(types=()))
    Writers(StateStore(tmp_path)).note("CUSTOM_VGPU_CONF_1", first.source)
    monkeypatch.setattr("os.getpid", lambda: 4242)
    again = Settings(conf, DeviceConfig(types=()))
    assert again.source == first.source
    updates = counting_updates(monkeypatch)
    Writers(StateStore(tmp_path)).note("CUSTOM_VGPU_CONF_1", again.source)
    assert updates == []


def test_a_writer_is_named_by_its_program_and_files(tmp_path, monkeypatch):
    """The writer a service records names its program and configuration
    files (what another writer's warning shows), or says it has none: a
    configuration never given a command line (Nova's in a test), or no
    program name, names none."""
    from oslo_config import cfg

    from vgpu_driver.model.config import DeviceConfig
    from vgpu_driver.service.settings import Settings

    def source(conf):
        return Settings(conf, DeviceConfig(types=())).source

    path = tmp_path / "nova.conf"
    path.write_text("[DEFAULT]\n")
    conf = cfg.ConfigOpts()
    conf(["--config-file", str(path)], default_config_files=[])
    monkeypatch.setattr("sys.argv", ["/usr/bin/nova-compute", "--x"])
    assert source(conf) == f"nova-compute with {path}"
    bare = cfg.ConfigOpts()
    bare([], default_config_files=[])
    assert source(bare) == "nova-compute with no configuration file"
    monkeypatch.setattr("sys.argv", [])
    never_called = cfg.ConfigOpts()  # no config_file option at all
    assert source(never_called) == "python with no configuration file"
