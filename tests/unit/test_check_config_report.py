"""What ``check-config`` reports besides the problems themselves: each
type's row in JSON, whether the host was checked (and why not), the
table's note, the message for no type enabled, and the count of errors
only when there are some."""

from __future__ import annotations

import json

from tests.cli_runs import run_cli

M10 = """
[devices]
enabled_mdev_types = nvidia-35,nvidia-36
[mdev_nvidia-35]
device_addresses = 0000:84:00.0,0000:85:00.0
max_instances = 3
traits = CUSTOM_GOLD
[mdev_nvidia-36]
"""


def _run(write_conf, capsys, text, *args):
    """check-config with ``text`` as nova.conf: (code, out, err)."""
    return run_cli(capsys, "--config-file", write_conf(text), *args)


def _json(write_conf, capsys, text, host=None):
    """(code, report) of check-config in JSON, on host description
    ``host`` if given."""
    where = ("--host-description", host) if host else ()
    code, out, _ = _run(
        write_conf, capsys, text, *where, "check-config", "--format", "json"
    )
    return code, json.loads(out)


def test_json_rows_and_the_host_checked(write_conf, capsys):
    code, report = _json(write_conf, capsys, M10, "m10")
    assert code == 0 and report["valid"] and report["host_checks"] == "done"
    rows = {row["type"]: row for row in report["types"]}
    assert rows["nvidia-35"] == {
        "type": "nvidia-35",
        "section": "mdev_nvidia-35",
        "resource_class": "VGPU",
        "parents": ["0000:84:00.0", "0000:85:00.0"],
        "vfs_meant": {},
        "default_for_unlisted_parents": False,
        "max_instances": 3,
        "card_share": None,
        "traits": ["CUSTOM_GOLD"],
    }
    assert rows["nvidia-36"]["default_for_unlisted_parents"] is True
    assert rows["nvidia-36"]["parents"] == []


def test_a_host_that_cannot_be_read_is_said_skipped(write_conf, capsys):
    text = M10 + "[libvirt]\nconnection_uri = test:///nonexistent/host.xml\n"
    code, report = _json(write_conf, capsys, text)
    assert code == 0 and report["valid"]
    assert report["host_checks"].startswith("host checks skipped: ")
    assert "test:///nonexistent/host.xml" in report["host_checks"]
    code, out, _ = _run(write_conf, capsys, text, "check-config")
    [note] = [line for line in out.splitlines() if line.startswith("NOTE")]
    assert note.startswith("NOTE: host checks skipped: ")
    code, out, _ = _run(
        write_conf, capsys, M10, "--host-description", "m10", "check-config"
    )
    assert code == 0 and "NOTE" not in out
    # a host description that cannot be opened: said, not raised
    code, report = _json(write_conf, capsys, M10, "no-such-host")
    assert report["host_checks"].startswith("host checks skipped: ")
    assert "no-such-host" in report["host_checks"]


def test_a_configuration_with_errors_is_not_checked_on_the_host(
    write_conf, capsys
):
    text = M10.replace("max_instances = 3", "max_instances = -1")
    code, report = _json(write_conf, capsys, text, "m10")
    assert code == 2 and not report["valid"]
    assert report["host_checks"] == "host checks skipped: fix the errors first"


def test_the_table_s_messages(write_conf, capsys):
    code, out, err = _run(
        write_conf,
        capsys,
        "[devices]\n",
        "--host-description",
        "m10",
        "check-config",
    )
    assert code == 0
    assert "No mdev type is enabled ([devices] enabled_mdev_types)." in out
    assert "error" not in err
    code, out, err = _run(
        write_conf,
        capsys,
        M10.replace("max_instances = 3", "max_instances = -1"),
        "check-config",
    )
    assert code == 2
    assert "1 error(s); nothing will be applied until they are fixed:" in err
    assert err.count("ERROR: ") == 1
