"""What the shell gets back from ``vgpu-driver``: each command's own
exit status, 1 and one line for a failure of the host, 130 for ^C, the
version, and log lines at INFO only from the commands that run as
services."""

from __future__ import annotations

import logging
from importlib import metadata
from pathlib import Path

import pytest

from tests.cli_runs import run_cli
from vgpu_driver.cmd import main as cli

CONTEXT_COMMANDS = [
    "discover",
    "doctor",
    "metrics",
    "inventory",
    "sync",
    "restore",
    "audit",
    "demo",
]


@pytest.mark.parametrize("command", CONTEXT_COMMANDS)
def test_a_command_s_exit_status_is_the_shell_s(monkeypatch, capsys, command):
    """Whatever a command returns is what ``vgpu-driver`` exits with
    (a check in a script reads it), and its folder is cleaned up."""
    module = __import__(f"vgpu_driver.cmd.{command}", fromlist=["run"])
    seen = []

    def run(context):
        seen.append(Path(context.workdir.name))
        return 7

    monkeypatch.setattr(module, "run", run)
    code, _out, _err = run_cli(capsys, "--host-description", "m10", command)
    assert code == 7
    assert seen and not seen[0].exists()


def test_a_failure_of_the_host_is_one_line_and_status_1(tmp_path, capsys):
    conf = tmp_path / "nova.conf"
    conf.write_text(
        "[libvirt]\nconnection_uri = test:///nonexistent/host.xml\n"
    )
    code, out, err = run_cli(capsys, "--config-file", str(conf), "inventory")
    assert (code, out) == (1, "")
    [line] = err.strip().splitlines()
    assert line.startswith("ERROR: Cannot connect to libvirt at test:///")


@pytest.mark.parametrize(
    ("command", "raised", "status"),
    [
        ("doctor", KeyboardInterrupt, 130),  # ^C
        # ``vgpu-driver discover | head``: the pipe closed under the
        # command is the reader's choice, not a failure
        ("discover", BrokenPipeError, 0),
    ],
)
def test_a_command_stopped_from_outside(
    monkeypatch, capsys, command, raised, status
):
    module = __import__(f"vgpu_driver.cmd.{command}", fromlist=["run"])

    def stopped(context):
        raise raised

    monkeypatch.setattr(module, "run", stopped)
    code, _out, err = run_cli(capsys, "--host-description", "m10", command)
    assert (code, err) == (status, "")


def test_the_placement_server_serves_where_told(monkeypatch, capsys):
    """Its defaults (127.0.0.1, Placement's own port 8778, a SQLite file
    in the current folder), and 0 once it stops."""
    from vgpu_driver.placement import server

    asked = []
    monkeypatch.setattr(server, "serve", lambda *args: asked.append(args))
    assert run_cli(capsys, "placement-server")[0] == 0
    assert asked == [("127.0.0.1", 8778, Path("placement.sqlite"))]


@pytest.mark.parametrize("installed", [True, False])
def test_the_version(monkeypatch, capsys, installed):
    if not installed:

        def missing(name):
            raise metadata.PackageNotFoundError(name)

        monkeypatch.setattr(metadata, "version", missing)
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--version"])
    assert stopped.value.code == 0
    printed = capsys.readouterr().out.strip()
    if installed:
        assert printed == metadata.version("vgpu-driver")
    else:
        assert printed == "unknown (not installed)"


@pytest.mark.parametrize(
    ("args", "level"),
    [
        # an interactive command prints its result: warnings alone
        (["inventory"], logging.WARNING),
        (["--debug", "inventory"], logging.NOTSET),
        # one that runs as a service logs its decisions
        (["metrics"], logging.NOTSET),
    ],
)
def test_info_lines_come_from_services_and_debug_alone(capsys, args, level):
    logger = logging.getLogger("vgpu_driver")
    before = logger.level
    try:
        code, _out, _err = run_cli(capsys, "--host-description", "m10", *args)
        assert code == 0
        assert logger.level == level
    finally:
        logger.setLevel(before)


def test_a_sync_makes_one_pass_unless_told_to_repeat(monkeypatch, capsys):
    from vgpu_driver.cmd import sync

    asked = []

    def run(context):
        command = context.conf.command
        asked.append((command.periodic, command.metrics_textfile))
        return 0

    monkeypatch.setattr(sync, "run", run)
    run_cli(capsys, "--host-description", "m10", "sync")
    run_cli(capsys, "--host-description", "m10", "sync", "--periodic", "60")
    assert asked == [(0, None), (60, None)]


def test_completion_without_oslo_s_template_is_status_2(monkeypatch, capsys):
    """Some oslo.config installations lack the template
    ``--shell_completion`` reads: named, status 2."""
    real = cli.make_conf

    def parse(*args, **kwargs):
        raise FileNotFoundError(2, "No such file", "/oslo/completion.t")

    monkeypatch.setattr(cli, "make_conf", lambda: _Calling(real(), parse))
    code, out, err = run_cli(capsys, "--shell_completion", "bash")
    assert (code, out) == (2, "")
    assert err.startswith("ERROR: /oslo/completion.t: missing from this")


class _Calling:
    """A configuration whose parsing fails as ``parse`` does; the rest
    is the real one's."""

    def __init__(self, conf, parse):
        self._conf, self._parse = conf, parse

    def __call__(self, *args, **kwargs):
        return self._parse(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._conf, name)
