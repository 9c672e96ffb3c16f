"""The ``sync`` command against a Placement it cannot use: no or a bad
auth type, refused credentials, a closed port (tried max_attempts
times, backed off periodically and never called a success), a section
without auth refused early; its JSON and change log, and its metrics
written after every pass."""

from __future__ import annotations

import json
import socket
import uuid

import pytest

from tests.placement_helpers import placement_conf
from vgpu_driver.cmd import main as cli
from vgpu_driver.exception import (
    PlacementConfigInvalid,
    PlacementError,
    PlacementUnavailable,
)
from vgpu_driver.placement.client import client_from_conf

pytestmark = pytest.mark.functional


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _placement(url):
    """The ``[placement]`` section of a sync to ``url`` (Placement's
    noauth2, as the fixtures run it)."""
    return (
        "[placement]\nauth_type = admin_token\ntoken = admin\n"
        f"endpoint = {url}\nendpoint_override = {url}\n"
    )


def _stop_after(monkeypatch, passes):
    """``sync --periodic`` stopped (as by ^C) at its ``passes``-th wait;
    returns the waits asked for, in seconds."""
    from vgpu_driver.cmd import sync as sync_command

    waits = []

    def sleep(seconds):
        waits.append(seconds)
        if len(waits) == passes:
            raise KeyboardInterrupt

    monkeypatch.setattr(sync_command, "_sleep", sleep)
    return waits


def _sync_cli(tmp_path, capsys, placement_section, *extra):
    conf = tmp_path / "nova.conf"
    conf.write_text(
        "[devices]\nenabled_mdev_types = nvidia-35\n"
        f"state_path = {tmp_path / 'state'}\n" + placement_section
    )
    code = cli.main(
        [
            "--config-file",
            str(conf),
            "--host-description",
            "m10",
            "sync",
            *extra,
        ]
    )
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_sync_without_placement_auth_is_one_clear_error(tmp_path, capsys):
    code, out, err = _sync_cli(
        tmp_path,
        capsys,
        "[placement]\nendpoint_override = http://127.0.0.1:1\n",
    )
    assert code == 2 and "[placement]" in err and "Synced" not in out


def test_sync_with_a_bad_auth_type_is_one_clear_error(tmp_path, capsys):
    code, _, err = _sync_cli(
        tmp_path, capsys, "[placement]\nauth_type = no-such-plugin\n"
    )
    assert code == 2 and "no-such-plugin" in err


def test_sync_to_a_closed_port_fails_cleanly(tmp_path, capsys):
    url = f"http://127.0.0.1:{_closed_port()}"
    code, out, err = _sync_cli(
        tmp_path,
        capsys,
        _placement(url) + "max_attempts = 2\nretry_delay = 0.01\n",
    )
    assert code == 1 and "did not answer" in err and "Synced" not in out
    # max_attempts applies to a refused connection too, and is reported
    assert "after 2 attempts" in err
    assert err.count("retrying in") == 1


def test_a_refused_connection_is_tried_max_attempts_times(tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}"
    conf = placement_conf(url, tmp_path)
    conf.set_override("max_attempts", 3, "placement")
    conf.set_override("retry_delay", 0.5, "placement")
    waits = []
    with pytest.raises(PlacementUnavailable, match="after 3 attempts") as no:
        client_from_conf(conf, sleep=waits.append)
    assert waits == [0.5, 1.0]
    # the endpoint it tried, named by its address
    assert str(no.value).startswith(f"Placement at {url} did not answer")
    conf.set_override("max_attempts", 1, "placement")  # the least allowed
    with pytest.raises(PlacementUnavailable, match=r"after 1 attempt \("):
        client_from_conf(conf, sleep=waits.append)
    assert waits == [0.5, 1.0]  # tried once: no wait


def test_placement_s_own_refusal_names_its_error_not_the_credentials(
    placement_url, tmp_path
):
    """A 4xx but 401/403 is Placement refusing the request itself (here
    a write from a stale generation): the error gives its status, its
    error code and its words, and does not send the operator to
    ``[placement]`` auth."""
    client = client_from_conf(placement_conf(placement_url, tmp_path))
    rp = str(uuid.uuid4())
    body = {"name": f"refused-{rp}", "uuid": rp}
    client.request("POST", "/resource_providers", body=body)
    stale = {"resource_provider_generation": 7, "inventories": {}}
    with pytest.raises(PlacementError) as refused:
        client.request(
            "PUT", f"/resource_providers/{rp}/inventories", body=stale
        )
    text = str(refused.value)
    assert "409 placement.concurrent_update" in text
    assert "generation" in text.lower()
    assert "auth_type" not in text and "credentials" not in text


def test_refused_credentials_name_the_placement_auth_options(
    placement_url, tmp_path
):
    """A 401/403 names [placement] auth, not a bare status."""
    # noauth2: any token but "admin" is a plain member
    conf = placement_conf(
        placement_url, tmp_path, "[placement]\ntoken = user\n"
    )
    client = client_from_conf(conf)
    with pytest.raises(PlacementError, match=r"\[placement\] auth_type"):
        client.request("GET", "/resource_providers")


def test_periodic_sync_backs_off_and_never_claims_success(
    tmp_path, capsys, monkeypatch
):
    url = f"http://127.0.0.1:{_closed_port()}"
    waits = _stop_after(monkeypatch, 4)
    code, out, _ = _sync_cli(
        tmp_path,
        capsys,
        _placement(url) + "max_attempts = 1\nretry_delay = 0.01\n",
        "--periodic",
        "5",
    )
    assert code == 130 and "Synced" not in out
    assert waits == [10, 20, 40, 80]


def test_a_client_from_a_section_without_auth_is_refused_early(tmp_path):
    from tests.functional.conftest import placement_conf

    conf = placement_conf("http://127.0.0.1:1", tmp_path)
    conf.set_override("auth_type", "no-such-plugin", "placement")
    with pytest.raises(PlacementConfigInvalid, match="no-such-plugin"):
        client_from_conf(conf)


def test_sync_json_and_change_log(placement_url, tmp_path, capsys):
    import json

    code, out, err = _sync_cli(
        tmp_path,
        capsys,
        _placement(placement_url) + "[DEFAULT]\nhost = json-node\n",
        "--format",
        "json",
    )
    report = json.loads(out)
    assert code == 0 and report["host"] == "json-node"
    assert "json-node_pci_0000_84_00_0" in report["created"]
    assert report["requests"] > 0
    # the service log says what changed, per provider
    assert "json-node_pci_0000_84_00_0 inventory: none -> VGPU" in err
    assert "json-node_pci_0000_84_00_0 traits: added " in err


def test_sync_writes_its_metrics_after_every_pass(
    placement_url, tmp_path, capsys
):
    """sync --metrics-textfile: the device metrics and the sync's own
    (passes, Placement requests and answers) from a real Placement; a
    failed pass is counted too."""
    from prometheus_client.parser import text_string_to_metric_families

    path = tmp_path / "vgpu.prom"
    section = _placement(placement_url)
    code, _, err = _sync_cli(
        tmp_path, capsys, section, "--metrics-textfile", str(path)
    )
    assert code == 0, err
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(path.read_text())
        for s in f.samples
    }
    assert found[("vgpu_driver_sync_passes_total", (("result", "ok"),))] == 1
    assert (
        found[("vgpu_driver_placement_requests_total", (("method", "POST"),))]
        >= 1
    )
    assert (
        found[("vgpu_driver_placement_answers_total", (("status", "200"),))]
        >= 1
    )
    # a healthy pass: one answer to each request sent, by method and status
    sent, answered = (
        sum(v for (n, _), v in found.items() if n == f"vgpu_driver_{what}")
        for what in ("placement_requests_total", "placement_answers_total")
    )
    assert sent == answered > 0
    assert any(n == "vgpu_driver_provider_total" for n, _ in found)
    # one pass observed, as long as it took (a few seconds at most)
    assert found[("vgpu_driver_sync_seconds_count", ())] == 1
    assert 0 < found[("vgpu_driver_sync_seconds_sum", ())] < 30
    closed = f"http://127.0.0.1:{_closed_port()}"
    (tmp_path / "down").mkdir()
    code, _, _ = _sync_cli(
        tmp_path / "down",
        capsys,
        _placement(closed) + "max_attempts = 1\nretry_delay = 0.01\n",
        "--metrics-textfile",
        str(path),
    )
    assert code == 1
    failed = [
        s
        for f in text_string_to_metric_families(path.read_text())
        for s in f.samples
        if s.name == "vgpu_driver_sync_passes_total"
    ]
    assert [s.labels["result"] for s in failed] == ["PlacementUnavailable"]
    seconds = {
        s.name: s.value
        for f in text_string_to_metric_families(path.read_text())
        for s in f.samples
        if s.name.startswith("vgpu_driver_sync_seconds_")
    }
    assert seconds["vgpu_driver_sync_seconds_count"] == 1
    assert 0 < seconds["vgpu_driver_sync_seconds_sum"] < 30


def test_a_periodic_sync_keeps_its_syncer_a_pass_with_no_change_sends_nothing(
    placement_url, tmp_path, capsys, monkeypatch
):
    """``sync --periodic``: one service and one syncer for every pass, as
    the compute service's periodic keeps them. The first pass writes the
    tree; the next ones, the host unchanged, send no request (a syncer
    made again would read every provider back: 3 requests or more)."""
    slept = _stop_after(monkeypatch, 3)
    section = (
        f"[DEFAULT]\nhost = periodic-{uuid.uuid4().hex[:8]}\n"
        + _placement(placement_url)
    )
    code, out, err = _sync_cli(
        tmp_path, capsys, section, "--periodic", "7", "--format", "json"
    )
    assert code == 130, err
    passes = [json.loads(line) for line in out.splitlines()]
    assert [p["requests"] > 0 for p in passes] == [True, False, False]
    assert passes[0]["created"] and not passes[1]["created"]
    assert slept == [7.0, 7.0, 7.0]  # no failure: no backoff


@pytest.mark.parametrize("output", ["table", "json"])
def test_a_periodic_sync_writes_each_pass_through_a_pipe_at_once(
    placement_url, tmp_path, output
):
    """Under systemd, ``sync --periodic``'s output is a pipe to journald,
    which Python buffers by the block: each pass's line is flushed as it
    is printed, or the journal would show it passes later."""
    import os
    import select
    import subprocess
    import sys

    conf = tmp_path / "nova.conf"
    conf.write_text(
        f"[DEFAULT]\nhost = pipe-{uuid.uuid4().hex[:8]}\n"
        "[devices]\nenabled_mdev_types = nvidia-35\n"
        f"state_path = {tmp_path / 'state'}\n" + _placement(placement_url)
    )
    command = [sys.executable, "-m", "vgpu_driver.cmd.main"]
    command += ["--config-file", str(conf), "--host-description", "m10"]
    command += ["sync", "--periodic", "3600", "--format", output]
    log = tmp_path / "stderr"
    # as systemd starts it: Python's own buffering of a pipe
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with (
        log.open("wb") as stderr,
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, env=env
        ) as process,
    ):
        try:
            ready, _, _ = select.select([process.stdout], [], [], 60)
            line = process.stdout.readline().decode() if ready else ""
        finally:
            process.kill()
    assert ready, "no line of the first pass while the sync runs on"
    said = log.read_text()
    if output == "json":
        assert json.loads(line)["created"], said
    else:
        assert line.startswith("Synced "), said
