"""A device whose driver is down takes no new guest, says why in the
plan, the metrics and audit, and comes back by itself (#25)."""

from __future__ import annotations

import dataclasses

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests import helpers
from vgpu_driver.metrics import MeteredDriver
from vgpu_driver.model import health, nvml
from vgpu_driver.sim.simulated import SimulatedHost


def test_vgpu_manager_down_reserves_every_nvidia_provider_until_back(
    make_conf, tmp_path
):
    host = SimulatedHost(helpers.load("l40-sriov"))
    driver, registry, tree = helpers.metered(make_conf, tmp_path, host)
    [plan] = driver.last_plans
    assert plan.reserved == 0
    host._state.modules = ["vfio", "vfio_pci"]  # the nvidia module gone
    [plan] = driver.update_provider_tree(tree, "node1")
    assert plan.reserved == plan.total
    assert "nvidia is not loaded" in (plan.reason or "")
    flags = {
        s.labels["device"]: s.value
        for f in text_string_to_metric_families(
            generate_latest(registry).decode()
        )
        for s in f.samples
        if s.name == "vgpu_driver_provider_unschedulable"
    }
    assert flags == {"pci_0000_41_00_0": 1}
    causes = {
        (s.labels["device"], s.labels["cause"])
        for f in text_string_to_metric_families(
            generate_latest(registry).decode()
        )
        for s in f.samples
        if s.name == "vgpu_driver_provider_unschedulable_cause"
    }
    assert causes == {("pci_0000_41_00_0", "driver_down")}
    host._state.modules = None  # loaded again
    [plan] = driver.update_provider_tree(tree, "node1")
    assert plan.reserved == 0 and plan.reason is None


def test_an_mdev_parent_needs_the_vgpu_vfio_module(make_conf, tmp_path):
    description = helpers.load("m10")
    description.modules = ["vfio", "vfio_pci", "nvidia"]
    node = helpers.Node(
        make_conf, tmp_path, "m10", host=SimulatedHost(description)
    )
    plans = node.update()
    assert plans and all(p.reserved == p.total for p in plans.values())
    assert all("nvidia_vgpu_vfio" in (p.reason or "") for p in plans.values())


def test_an_mdev_parent_without_nvidia_names_nvidia_first(make_conf, tmp_path):
    """With neither module loaded the reason names ``nvidia``, the one
    the vGPU manager's VFIO module needs loaded first (a sweep of
    model/health.py named ``nvidia_vgpu_vfio`` there unseen)."""
    description = helpers.load("m10")
    description.modules = ["vfio", "vfio_pci"]
    node = helpers.Node(
        make_conf, tmp_path, "m10", host=SimulatedHost(description)
    )
    plans = node.update()
    assert plans and all(p.reserved == p.total for p in plans.values())
    assert all(
        "kernel module nvidia is not loaded" in (p.reason or "")
        for p in plans.values()
    )


def test_audit_names_the_device_down_and_a_guest_whose_vgpu_is_gone():
    description = helpers.load("m10")
    description.modules = ["vfio", "vfio_pci"]
    gone = description.mdevs[0].uuid
    description.mdevs = description.mdevs[1:]
    inventory = SimulatedHost(description).discover()
    found = helpers.host_findings(inventory)
    kinds = {(f.kind, f.subject) for f in found}
    assert any(k == "device_unhealthy" for k, _ in kinds)
    [lost] = [f for f in found if f.kind == "guest_device_gone"]
    assert gone in lost.detail
    assert set(health.unhealthy(inventory)) == {
        p.name for p in inventory.parents
    }


def test_a_host_that_does_not_report_modules_is_never_gated():
    description = helpers.load("m10")
    inventory = SimulatedHost(description).discover()
    assert (
        health.unhealthy(
            inventory.__class__(parents=inventory.parents, modules=None)
        )
        == {}
    )


def test_a_guest_whose_vgpu_is_gone_shows_in_the_metrics(make_conf, tmp_path):
    description = helpers.load("m10")
    description.mdevs = [
        m
        for m in description.mdevs
        if m.uuid != description.guests[0].mdevs[0]
    ]
    conf = make_conf(description.config)
    conf.set_override("state_path", str(tmp_path / "state"), "devices")
    registry = CollectorRegistry()
    driver = MeteredDriver(conf, SimulatedHost(description), registry=registry)
    driver.update_provider_tree(helpers.new_tree(), "node1")
    values = {
        s.name: s.value
        for f in text_string_to_metric_families(
            generate_latest(registry).decode()
        )
        for s in f.samples
    }
    assert values["vgpu_driver_guest_devices_gone"] == 1


def test_every_reason_the_plan_gives_has_its_cause():
    """The metric's cause label follows the plan's own reasons."""
    assert health.cause_of(None) is None
    assert health.cause_of(health._down("nvidia")) == "driver_down"
    assert health.cause_of(health._fault("0000:41:00.0", "lost")) == (
        "gpu_fault"
    )
    assert (
        health.cause_of(
            "its device is no longer on the host but 2 device(s) are "
            "still in use"
        )
        == "device_gone"
    )
    assert health.cause_of("[mdev_x] max_instances is reached") == (
        "max_instances"
    )
    assert health.cause_of("something new") == "other"


def test_a_provider_taking_no_guests_is_told_once_and_its_return_once(
    make_conf, tmp_path, caplog
):
    """The vGPU manager down for three refreshes: one warning naming the
    provider and why; back for two: one line saying it takes guests
    again."""
    import logging

    caplog.set_level(logging.INFO, logger="vgpu_driver")
    host = SimulatedHost(helpers.load("l40-sriov"))
    node = helpers.Node(make_conf, tmp_path, "l40-sriov", host=host)

    def told(text):
        return [r for r in caplog.records if text in r.getMessage()]

    host._state.modules = ["vfio", "vfio_pci"]  # the nvidia module gone
    for _ in range(3):
        node.update()
    [down] = told("takes no new guests")
    assert "pci_0000_41_00_0" in down.getMessage()
    assert "nvidia is not loaded" in down.getMessage()
    host._state.modules = None
    for _ in range(2):
        node.update()
    assert len(told("takes guests again")) == 1
    assert len(told("takes no new guests")) == 1


def _with_fault(inventory, address):
    said = nvml.NvmlReading(
        "570.124.03", (nvml.NvmlGpu(address, fault="lost"),)
    )
    return dataclasses.replace(inventory, nvml=said)


def test_an_nvml_fault_on_a_gpu_takes_its_mdev_parents_alone():
    """A GPU whose mdev parent is the GPU itself (M10) or its VFs (A2:
    NVML names the card, not the VF): the parents of the GPU that NVML
    says is lost take no new guest, the other GPUs' parents do."""
    m10 = helpers.simulated_host("m10").discover()
    found = health.unhealthy(_with_fault(m10, "0000:85:00.0"))
    assert set(found) == {"pci_0000_85_00_0"}
    assert "0000:85:00.0 lost" in found["pci_0000_85_00_0"]
    a2 = helpers.simulated_host("a2-vf-parents").discover()
    assert {p.physical_function for p in a2.parents} == {"0000:08:00.0"}
    found = health.unhealthy(_with_fault(a2, "0000:08:00.0"))
    assert set(found) == {p.name for p in a2.parents}
    assert all("0000:08:00.0 lost" in why for why in found.values())
    # a VF's own address is not a GPU NVML reports on
    assert health.unhealthy(_with_fault(a2, "0000:08:00.4")) == {}
