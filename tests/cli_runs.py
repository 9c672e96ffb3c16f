"""The command line run in process, as an operator runs it: its exit
status and what it printed (never a traceback), and the host
descriptions it is given."""

from __future__ import annotations

import json

from vgpu_driver.cmd import main as cli
from vgpu_driver.sim import description as hostdesc


def run_cli(capsys, *args):
    """(exit status, stdout, stderr) of the command line ``args``."""
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def run_json(capsys, host, command="doctor", *extra):
    """(exit status, the JSON printed) of ``command`` on host
    description ``host``."""
    code = cli.main(
        ["--host-description", str(host), command, "--format", "json", *extra]
    )
    out = capsys.readouterr().out
    return code, json.loads(out)


def write_host(tmp_path, description):
    """``description`` written where ``--host-description`` reads it."""
    path = tmp_path / "host.json"
    path.write_text(json.dumps(description))
    return path


def raw_description(name):
    """A shipped host description's JSON, as a dict to change."""
    return json.loads(
        (
            hostdesc.Path(hostdesc.__file__).parent / "data" / f"{name}.json"
        ).read_text()
    )
