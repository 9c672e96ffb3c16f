"""The NVML reader at its edges: pynvml loaded or not there, a GPU NVML
does not know, one lost in the middle of a read, a card NVML cannot
describe (warned of once, again after it was described), and a bus id
whose PCI domain has two hex digits."""

from __future__ import annotations

import logging
import sys
import types

from tests.nvml_hosts import emptied, rtx_host
from vgpu_driver.host import nvml as nvml_host
from vgpu_driver.host.nvml import NvmlReader
from vgpu_driver.sim.nvml_lib import (
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
)

RTX = "0001:c8:00.0"


def test_a_reader_is_loaded_where_nvml_starts(monkeypatch):
    started = []
    pynvml = types.ModuleType("pynvml")
    pynvml.NVMLError = type("NVMLError", (Exception,), {})
    pynvml.nvmlInit = lambda: started.append(True)
    monkeypatch.setitem(sys.modules, "pynvml", pynvml)
    reader, why = nvml_host.load()
    assert isinstance(reader, NvmlReader) and why == "NVML"
    assert started == [True]
    loaded = nvml_host.maybe_load(True, error_hold=9.0)
    assert isinstance(loaded, NvmlReader) and loaded.errors.hold == 9.0


def test_pynvml_not_installed_is_said_and_leaves_sysfs_alone(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    reader, why = nvml_host.load()
    assert reader is None
    assert "nvidia-ml-py is not installed" in why
    assert nvml_host.maybe_load(True) is None


def test_a_gpu_nvml_does_not_know_is_not_lost():
    """A GPU bound to another driver: NVML has no handle for it. It is
    not NVML's to describe, and nothing says it fell off the bus."""
    reader = rtx_host().nvml
    said = reader.read([RTX, "0000:99:00.0"])
    assert said is not None and said.gpu(RTX) is not None
    assert said.gpu("0000:99:00.0") is None


def test_a_gpu_lost_in_the_middle_of_a_read_is_lost():
    host = emptied(rtx_host())
    host.nvml._lib.failing["nvmlDeviceGetCreatableVgpus"] = (
        NVML_ERROR_GPU_IS_LOST
    )
    gpu = host.nvml.read([RTX]).gpu(RTX)
    assert gpu is not None and gpu.fault == "lost (fallen off the bus)"


def test_a_card_nvml_cannot_describe_is_warned_of_once(caplog):
    host = emptied(rtx_host())
    library, reader = host.nvml._lib, host.nvml
    caplog.set_level(logging.WARNING, logger=nvml_host.__name__)

    def warned() -> int:
        return sum("cannot describe GPU" in r.message for r in caplog.records)

    library.failing["nvmlDeviceGetCreatableVgpus"] = (
        NVML_ERROR_FUNCTION_NOT_FOUND
    )
    for _ in range(2):
        assert reader.read([RTX]).gpu(RTX) is None
    assert warned() == 1
    del library.failing["nvmlDeviceGetCreatableVgpus"]
    assert reader.read([RTX]).gpu(RTX) is not None  # described again
    library.failing["nvmlDeviceGetCreatableVgpus"] = (
        NVML_ERROR_FUNCTION_NOT_FOUND
    )
    assert reader.read([RTX]).gpu(RTX) is None
    assert warned() == 2  # a new spell: said again


def test_a_bus_id_with_a_two_digit_domain():
    assert nvml_host.bus_id("0010:3b:00.0") == "00000010:3B:00.0"


def test_every_card_s_xid_errors_are_heard_and_a_guest_s_are_not():
    """Two cards, each registered for XID events in turn: an error on
    the first is heard (the cards share one event set), and the XIDs a
    guest's program causes (those NVIDIA's device plugin skips) hold
    neither."""
    import json

    from tests.cli_runs import raw_description
    from vgpu_driver.model import health
    from vgpu_driver.sim import description as hostdesc
    from vgpu_driver.sim.simulated import SimulatedHost

    raw = raw_description("rtx6000-nvml")
    second = dict(raw["sriov"][0], address="0002:c8:00.0", vf_types={})
    raw["sriov"].append(second)
    host = SimulatedHost(hostdesc.parse(json.dumps(raw), "two cards"))
    library = host.nvml._lib
    assert health.unhealthy(host.discover()) == {}
    for xid in (13, 31, 43, 45, 68, 109):
        library.errors.append((RTX, xid))
        library.errors.append(("0002:c8:00.0", xid))
    assert health.unhealthy(host.discover()) == {}
    library.errors.append((RTX, 79))  # fallen off the bus
    assert list(health.unhealthy(host.discover())) == ["pci_0001_c8_00_0"]
