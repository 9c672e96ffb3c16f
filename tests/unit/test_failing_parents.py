"""The parents whose device failed (service/failing.py): told once, each
offered again after the retry interval (not before), or at once when an
operation on it works."""

from __future__ import annotations

import logging

import pytest

from vgpu_driver.service import failing
from vgpu_driver.service.failing import FailedParents


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(failing.time, "monotonic", lambda: now[0])
    return now


def test_a_failure_is_told_once_with_why(caplog, clock):
    parents = FailedParents()
    with caplog.at_level(logging.ERROR, logger=failing.__name__):
        parents.mark("pci_0000_84_00_0", "EIO")
        parents.mark("pci_0000_84_00_0", "ETIMEDOUT")  # still failing
        parents.mark("pci_0000_85_00_0")  # a release's: told by its caller
    told = [r.getMessage() for r in caplog.records]
    assert len(told) == 1
    assert "pci_0000_84_00_0" in told[0] and "(EIO)" in told[0]
    assert list(parents) == ["pci_0000_84_00_0", "pci_0000_85_00_0"]


def test_a_failed_parent_is_offered_again_once_the_interval_passed(clock):
    parents = FailedParents()
    parents.mark("a", "EIO")
    clock[0] += 30
    parents.mark("b", "EIO")
    clock[0] += 29.5
    assert parents.retry_due(60) == []
    clock[0] += 0.5  # exactly the interval since a's failure
    assert parents.retry_due(60) == ["a"]
    assert "a" not in parents and "b" in parents
    parents.worked(["b"])
    assert len(parents) == 0


def test_a_failure_again_starts_the_interval_over(clock):
    parents = FailedParents()
    parents.mark("a", "EIO")
    clock[0] += 50
    parents.mark("a", "EIO")
    clock[0] += 50
    assert parents.retry_due(60) == []
    clock[0] += 10
    assert parents.retry_due(60) == ["a"]
