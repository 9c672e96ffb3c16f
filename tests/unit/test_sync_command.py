"""``vgpu-driver sync`` as an operator's tool: the service it runs gives
way to a compute service (with metrics exported or not), and what it
prints of a pass, in text and in JSON: what it created, updated and
removed, the providers it kept because Placement still holds
allocations on them (named, for the operator to find), and the
requests it sent."""

from __future__ import annotations

import pytest

from tests import helpers
from vgpu_driver.cmd.sync import Metrics, as_json, describe
from vgpu_driver.placement.remote import SyncReport


def test_a_pass_is_told_with_what_it_kept_for_allocations():
    report = SyncReport(
        created=["n_pci_0000_84_00_0"],
        removed=["n_pci_0000_85_00_0"],
        kept_in_use=["n_pci_0000_86_00_0", "n_pci_0000_87_00_0"],
        requests=5,
    )
    assert describe(report) == (
        "1 created, 0 updated, 1 removed, 2 kept (allocations): "
        "n_pci_0000_86_00_0, n_pci_0000_87_00_0; 5 request(s)"
    )
    assert as_json("host1", report) == {
        "host": "host1",
        "created": ["n_pci_0000_84_00_0"],
        "updated": [],
        "removed": ["n_pci_0000_85_00_0"],
        "kept_in_use": ["n_pci_0000_86_00_0", "n_pci_0000_87_00_0"],
        "requests": 5,
    }


def test_a_pass_that_kept_nothing_says_nothing_of_it():
    assert describe(SyncReport(updated=["a"], requests=1)) == (
        "0 created, 1 updated, 0 removed; 1 request(s)"
    )


@pytest.mark.parametrize("textfile", [None, "vgpu.prom"])
def test_the_sync_service_gives_way_to_a_compute_service(
    make_conf, tmp_path, textfile
):
    """A provider the compute service wrote since this tool did: the
    tool's pass writes nothing (WriterConflict), with or without
    ``--metrics-textfile`` (see tests/unit/test_two_writers.py)."""
    conf = make_conf(helpers.load("m10").config)
    conf.set_override("state_path", str(tmp_path / "state"), "devices")
    path = str(tmp_path / textfile) if textfile else None
    driver = Metrics(path).driver(conf, helpers.simulated_host("m10"))
    assert driver.settings.yields is True
