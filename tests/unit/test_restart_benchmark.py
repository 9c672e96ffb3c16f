"""benchmarks/restart.py times a restart in a new process: the setup
before ``init_host`` apart from the start, on the providers the last run
wrote (its figures are read, not asserted: see test_benchmarks.py)."""

from __future__ import annotations

import time

from benchmarks import restart
from benchmarks import service as bench
from benchmarks.common import conf_for, dense
from vgpu_driver import driver as vgpu_driver
from vgpu_driver.model.provider_tree import ProviderTree
from vgpu_driver.sim import description as hostdesc


def _made(tmp_path):
    """What a restart finds (this library's side): the host, the records
    and the providers a service on it left."""
    description = dense(2, 8, 4)
    uri, sysfs = hostdesc.materialize(description, tmp_path)
    conf = conf_for(description.config, tmp_path)
    service = bench.Service(uri, sysfs, conf, tmp_path)
    made = {
        "uri": uri,
        "sysfs": str(sysfs),
        "config": description.config,
        "tmp": str(tmp_path),
        "guests": service.guests,
        "ours": restart.dump(service.tree),
    }
    return made, service


def _burning(method, ms):
    def burnt(self, *args, **kwargs):
        end = time.process_time() + ms / 1000
        while time.process_time() < end:
            pass
        return method(self, *args, **kwargs)

    return burnt


def test_a_restart_is_handed_the_providers_as_the_last_run_wrote_them(
    tmp_path,
):
    made, service = _made(tmp_path)
    tree = restart.rebuild(ProviderTree(), made["ours"])
    keys = service.tree.get_provider_uuids()
    assert tree.get_provider_uuids() == keys
    assert len(keys) == 3  # the compute node and its two pGPUs
    for key in keys:
        assert tree.data(key) == service.tree.data(key)


def test_the_setup_is_timed_apart_from_the_start(tmp_path, monkeypatch):
    """A driver whose construction burns 30 ms more shows them in the
    setup, one whose init_host does in the start: each phase is timed
    where it runs, neither left out."""
    made, _service = _made(tmp_path)
    quick = restart.ours(made)
    for method, phase, other in (
        ("__init__", "setup", "start"),
        ("init_host", "start", "setup"),
    ):
        with monkeypatch.context() as patch:
            real = getattr(vgpu_driver.VgpuDriver, method)
            patch.setattr(vgpu_driver.VgpuDriver, method, _burning(real, 30))
            slow = restart.ours(made)
        assert slow[phase] - quick[phase] > 25, method
        assert slow[other] - quick[other] < 25, method


def test_the_allocator_is_settled_before_the_clock(tmp_path, monkeypatch):
    """The freed chunks of what the child did before the clock are
    merged before it (not by the first allocation of the setup)."""
    made, _service = _made(tmp_path)
    order = []
    monkeypatch.setattr(restart, "settle", lambda: order.append("settle"))
    real = restart._cpu
    monkeypatch.setattr(
        restart, "_cpu", lambda fn: order.append("timed") or real(fn)
    )
    restart.ours(made)
    assert order == ["settle", "timed", "timed"]
