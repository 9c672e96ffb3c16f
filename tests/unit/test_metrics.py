"""Prometheus metrics: a real HTTP scrape, the textfile, the counters,
and a dashboard that only uses metrics that exist."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests import helpers
from tests.cli_runs import run_cli
from vgpu_driver.cmd import main as cli
from vgpu_driver.metrics import MeteredDriver

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "etc" / "grafana" / "vgpu-driver-dashboard.json"


def samples(text):
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_real_scrape_of_the_served_metrics():
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vgpu_driver.cmd.main",
            "--host-description",
            "rtx6000",
            "metrics",
            "--serve",
            ":0",  # any free port, on 127.0.0.1 (no address given)
            "--interval",
            "0.2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = process.stdout.readline()
        url = re.search(r"http://\S+", line)[0]
        assert url.startswith("http://127.0.0.1:"), line
        time.sleep(0.5)  # a refresh or two on the interval
        with urllib.request.urlopen(url + "metrics", timeout=10) as answer:
            text = answer.read().decode()
    finally:
        process.terminate()
        process.wait(timeout=10)
    found = samples(text)
    labels = (
        ("device", "pci_0001_c8_00_0"),
        ("provider", "rtx6000-compute_pci_0001_c8_00_0"),
        ("resource_class", "VGPU"),
        ("type", "nvidia-1521"),
    )
    assert found[("vgpu_driver_provider_total", labels)] == 24
    assert found[("vgpu_driver_provider_used", labels)] == 1
    assert found[("vgpu_driver_provider_free", labels)] == 23
    assert found[("vgpu_driver_refresh_seconds_count", ())] >= 2


def test_the_textfile_for_node_exporter(tmp_path, capsys):
    path = tmp_path / "vgpu.prom"
    code = cli.main(
        ["--host-description", "m10", "metrics", "--textfile", str(path)]
    )
    assert code == 0
    found = samples(path.read_text())
    by_device = {
        (n, dict(labels)["device"]): v
        for (n, labels), v in found.items()
        if n.startswith("vgpu_driver_provider_")
    }
    assert by_device[("vgpu_driver_provider_total", "pci_0000_84_00_0")] == 16
    # 86: 16 nvidia-36, one used by a guest (a first start adopts the
    # free mdev already there: nothing reserved)
    total = by_device[("vgpu_driver_provider_total", "pci_0000_86_00_0")]
    reserved = by_device[("vgpu_driver_provider_reserved", "pci_0000_86_00_0")]
    used = by_device[("vgpu_driver_provider_used", "pci_0000_86_00_0")]
    assert (total, reserved, used) == (16, 0, 1)
    free = by_device[("vgpu_driver_provider_free", "pci_0000_86_00_0")]
    assert free == total - reserved - used


def metered(make_conf, state, description):
    """A MeteredDriver on the simulated host, refreshed once: its
    registry, itself and its one provider's uuid."""
    conf = make_conf(description.config)
    conf.set_override("state_path", str(state), "devices")
    registry = CollectorRegistry()
    driver = MeteredDriver(
        conf, helpers.SimulatedHost(description), registry=registry
    )
    tree = helpers.new_tree()
    [plan] = driver.update_provider_tree(tree, "node1")
    return registry, driver, tree.data(plan.name).uuid


def test_binds_releases_and_limited_totals_are_counted(make_conf, tmp_path):
    description = helpers.load("rtx6000")
    description.pfs[0].product_id = "0x9999"  # a board nobody can size
    registry, driver, rp = metered(make_conf, tmp_path / "state", description)
    instance = str(uuid.uuid4())
    driver.allocate_mdevs(instance, {rp: {"resources": {"VGPU": 1}}})
    with contextlib.suppress(Exception):  # a provider it does not know
        driver.allocate_mdevs(
            str(uuid.uuid4()), {"nope": {"resources": {"VGPU": 1}}}
        )
    driver.release_mdevs(instance)
    found = samples(generate_latest(registry).decode())
    assert found[("vgpu_driver_binds_total", (("result", "ok"),))] == 1
    failed = [
        k
        for k in found
        if k[0] == "vgpu_driver_binds_total" and k[1] != (("result", "ok"),)
    ]
    assert len(failed) == 1 and found[failed[0]] == 1
    assert found[("vgpu_driver_releases_total", ())] == 1
    limited = [
        v
        for (n, _), v in found.items()
        if n == "vgpu_driver_provider_capacity_limited"
    ]
    assert limited == [1]


def test_the_dashboard_uses_only_metrics_that_exist(capsys):
    code, text, _err = run_cli(capsys, "--host-description", "m10", "metrics")
    assert code == 0
    families = {f.name for f in text_string_to_metric_families(text)}
    names = set()
    for family in text_string_to_metric_families(text):
        names.update(s.name for s in family.samples)
    names |= {"vgpu_driver_binds_total"}  # a labelled counter, once used
    dashboard = json.loads(DASHBOARD.read_text())
    used = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            used.update(re.findall(r"vgpu_driver_\w+", target["expr"]))
    assert used, "the dashboard queries nothing"
    assert used <= names | families, used - names - families


def test_unreadable_records_show_and_claims_are_counted(make_conf, tmp_path):
    description = helpers.load("l40-sriov")
    state = tmp_path / "state"
    registry, driver, rp = metered(make_conf, state, description)
    driver.allocate_mdevs(str(uuid.uuid4()), {rp: {"resources": {"VGPU": 1}}})
    found = samples(generate_latest(registry).decode())
    assert found[("vgpu_driver_claims_in_flight", ())] == 1
    assert found[("vgpu_driver_records_readable", ())] == 1
    (state / "claims.json").write_text("{ cut in half")
    found = samples(generate_latest(registry).decode())
    assert found[("vgpu_driver_records_readable", ())] == 0


@pytest.mark.parametrize("value", ["9847", "127.0.0.1:http", "127.0.0.1:"])
def test_a_serve_value_without_a_port_is_refused_by_name(capsys, value):
    """No server started, no traceback: the option, the value and what
    to give."""
    code, out, err = run_cli(
        capsys, "--host-description", "m10", "metrics", "--serve", value
    )
    assert (code, out) == (2, "")
    assert f"--serve {value!r}: give ADDRESS:PORT" in err
