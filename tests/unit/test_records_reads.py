"""The claims record is read at every pass under the lock; the VF types
and devices made only when another save (which always gives the claims
record a new epoch) or a repair may have changed them."""

from __future__ import annotations

from collections import Counter

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


def test_an_unchanged_pass_reads_the_claims_only(tmp_path, monkeypatch):
    record = ClaimsRecord(StateStore(tmp_path))
    with record.locked():
        record.made.add("m1")
        record.save(vf_types={"0000:41:00.4": 1157})
    loads = counting_loads(monkeypatch)
    for _ in range(3):
        with record.locked():
            assert record.made == {"m1"}
            assert record.vf_types == {"0000:41:00.4": 1157}
    assert loads == Counter({"claims": 3})


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
        theirs.save(vf_types={"0000:41:00.5": 1157})
    with ours.locked():
        assert ours.made == {"m1", "m2"}
        assert ours.vf_types == {"0000:41:00.5": 1157}
        assert ours.stale


def test_a_repair_reads_them_again(tmp_path):
    record = ClaimsRecord(StateStore(tmp_path))
    with record.locked():
        record.save(vf_types={"0000:41:00.4": 1157})
    (tmp_path / "vf-types.json").write_text("{ cut")
    assert record.repair()  # moved aside
    with record.locked():
        assert record.vf_types == {}  # not the value read before
