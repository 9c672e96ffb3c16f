"""What the demo reports besides its steps running: each request's
candidates counted once, long lists cut, the tree in the text, a
configuration with errors stopped before Placement, another host than
its own (a request naming what no provider has is not asked, each
class offered is), and a host of the operator's own (a configuration
file, no description)."""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import raw_description, run_cli, write_host
from vgpu_driver.cmd.demo import REQUESTS
from vgpu_driver.sim import description as hostdesc

pytestmark = pytest.mark.functional


def _rows(out):
    """Request title -> (its count, None if not asked; what serves it)
    of the candidates' table."""
    table = out.split("=== Allocation candidates ===")[1]
    table = table.split("===")[0].strip().splitlines()[2:]
    rows = {}
    for line in table:
        title, count, served = (c.strip() for c in line.split("  ") if c)
        rows[title] = (None if count == "-" else int(count), served)
    return rows


def test_the_text_report(capsys):
    code, out, _err = run_cli(capsys, "demo")
    assert code == 0
    rows = _rows(out)
    # an isolated pair comes from Placement in both orders: one each
    pgpus = rows["one vGPU"][0]
    count, served = rows["two vGPUs from two different pGPUs"]
    assert count == pgpus * (pgpus - 1) // 2 and pgpus > 3
    shown, rest = served.rsplit(", ", 1)
    assert rest == f"... ({count} in all)" and len(shown.split(", ")) == 3
    assert rows["one generic mlx5 mdev"] == (1, "pci_0000_3b_00_0")
    # the demo's own requests alone, and the two-pGPU one bound
    assert list(rows) == [title for title, _query in REQUESTS]
    bound = out.split("=== Binding instance")[1].split("===")[0]
    assert bound.endswith("(two vGPUs from two different pGPUs) ")
    tree = out.split("=== The provider tree as Placement holds it ===")[1]
    assert "pci_0000_84_00_0" in tree.split("===")[0]
    assert out.rstrip().endswith("Claims left: 0")  # no JSON after it


@pytest.mark.parametrize("as_json", [False, True])
def test_errors_in_the_configuration_stop_before_placement(
    tmp_path, capsys, as_json
):
    raw = raw_description("m10")
    raw["config"] = [
        "[devices]",
        "enabled_mdev_types = nvidia-35",
        "[mdev_nvidia-35]",
        "max_instances = 0",
    ]
    host = write_host(tmp_path, raw)
    extra = ["--format", "json"] if as_json else []
    code, out, err = run_cli(
        capsys, "--host-description", str(host), "demo", *extra
    )
    assert code == 2
    assert "Placement at" not in out and "placement" not in out.lower()
    if as_json:
        document = json.loads(out)
        [error] = document["configuration"]["errors"]
        assert "max_instances" in error
        assert err == ""  # stopped there, not failing further on


def test_a_host_of_the_operator_s_own(tmp_path, capsys, monkeypatch):
    """A configuration file naming a libvirt (here the test driver's
    rendering of m10): the demo syncs and binds on it, says no simulated
    host, and leaves no Placement database where it was run."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    description = hostdesc.load("m10")
    uri, sysfs = hostdesc.materialize(description, tmp_path / "host")
    conf = tmp_path / "nova.conf"
    conf.write_text(
        description.config
        + f"\n[libvirt]\nconnection_uri = {uri}\nsysfs_root = {sysfs}\n"
        + f"[devices]\nstate_path = {tmp_path / 'records'}\n"
    )
    code, out, _err = run_cli(
        capsys, "--config-file", str(conf), "demo", "--format", "json"
    )
    assert code == 0
    document = json.loads(out)
    assert "host" not in document
    assert document["bind"]["devices"] and document["bind"]["claims_left"] == 0
    assert list(here.iterdir()) == []


def test_another_host_gets_requests_of_its_own(capsys):
    """mtty offers CUSTOM_SERIAL alone: Placement would refuse the
    demo's own requests (400: no such class or trait), so they are not
    asked, and its class is asked for and bound."""
    code, out, _err = run_cli(
        capsys, "--host-description", "mtty", "demo", "--format", "json"
    )
    assert code == 0
    document = json.loads(out)
    asked = document["placement"]["allocation_candidates"]
    assert {r["request"]: r.get("not_asked") for r in asked} == {
        "one vGPU": "VGPU",
        "one vGPU of type nvidia-35": "CUSTOM_NVIDIA_35",
        "one vGPU able to drive 2560x1600": "HW_GPU_RESOLUTION_W2560H1600",
        "two vGPUs from two different pGPUs": "VGPU",
        "one generic mlx5 mdev": "CUSTOM_MLX5",
        "one CUSTOM_SERIAL": None,
    }
    assert asked[-1]["candidates"] == [["mtty"]]
    bind = document["bind"]
    assert bind["request"] == "one CUSTOM_SERIAL"
    assert bind["allocations"] == {"mtty": {"CUSTOM_SERIAL": 1}}
    assert bind["claims_left"] == 0


@pytest.mark.parametrize(
    ("host", "title", "count"),
    [("m10", "one vGPU", 3), ("grid-k1", "one vGPU", 4)],
)
def test_three_candidates_are_shown_and_more_are_counted(
    capsys, host, title, count
):
    code, out, _err = run_cli(capsys, "--host-description", host, "demo")
    assert code == 0
    found, served = _rows(out)[title]
    assert found == count
    names = served.split(", ")
    cut = [f"... ({count} in all)"] if count > 3 else []
    assert names[3:] == cut
    assert len(names[:3]) == 3 and "in all" not in " ".join(names[:3])


def test_a_host_with_nothing_to_ask_binds_nothing(capsys):
    """amd-mxgpu's description enables no type (its VFs are given to
    guests whole): every request is not asked, and nothing is bound."""
    code, out, _err = run_cli(
        capsys, "--host-description", "amd-mxgpu", "demo", "--format", "json"
    )
    assert code == 0
    document = json.loads(out)
    asked = document["placement"]["allocation_candidates"]
    assert all("not_asked" in r for r in asked)
    assert document["bind"] is None
