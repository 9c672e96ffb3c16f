"""A restarted service on a host that did not change reads its records
and writes none of them: no flush at start (a record naming the
process, its pid, was rewritten at every start)."""

from __future__ import annotations

import itertools
from pathlib import Path

from benchmarks.common import conf_for, dense
from benchmarks.service import Service
from vgpu_driver.sim import description as hostdesc


def _files(state: str) -> dict[str, tuple[int, int, int]]:
    return {
        p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_size)
        for p in Path(state).iterdir()
        if p.is_file()
    }


def test_a_restart_writes_no_record(tmp_path, monkeypatch):
    pids = itertools.count(10000)
    monkeypatch.setattr("os.getpid", lambda: next(pids))  # a new process
    description = dense(2, 24, 16)
    uri, sysfs = hostdesc.materialize(description, tmp_path)
    service = Service(
        uri, sysfs, conf_for(description.config, tmp_path), tmp_path
    )
    state = service.conf.devices.state_path
    service.start()
    before = _files(state)
    assert {"claims.json", "writers.json", "mdev-parents.json"} <= set(before)
    service.start()
    assert _files(state) == before
