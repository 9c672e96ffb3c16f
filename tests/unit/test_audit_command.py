"""What ``vgpu-driver audit`` prints in text, as an operator reads it: the
host, why Placement was not checked, each finding in a table saying
whether ``--fix`` repairs it, what ``--fix`` did, the devices another
manager made (left alone), and "No mismatch" when there is none; its
exit status says whether a finding remains."""

from __future__ import annotations

from tests import records_helpers
from tests.cli_runs import run_cli
from tests.helpers import M10_FREE_ON_86


def _args(tmp_path):
    conf = tmp_path / "nova.conf"
    conf.write_text(
        "[DEFAULT]\nhost = audited\n"
        "[devices]\nenabled_mdev_types = nvidia-35\n"
        f"state_path = {tmp_path / 'state'}\n"
    )
    return ["--config-file", str(conf), "--host-description", "m10"]


def test_a_finding_is_a_table_row_fix_says_what_it_did(tmp_path, capsys):
    """m10's free nvidia-36 mdev, of a type its parent no longer serves,
    is the library's (the first start takes stock): a fixable finding,
    then removed by ``--fix``."""
    args = _args(tmp_path)
    code, out, _err = run_cli(capsys, *args, "audit")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "Audit of audited"
    assert lines[1].startswith("NOTE: Placement not checked: ")
    [row] = [line for line in lines if "orphaned_free_mdev" in line]
    assert M10_FREE_ON_86 in row and row.rstrip().endswith("yes")
    assert "No mismatch" not in out and "Fixed:" not in out
    assert "another manager" not in out

    code, out, _err = run_cli(capsys, *args, "audit", "--fix")
    assert code == 0  # what remains: nothing
    assert f"Fixed: removed free mdev {M10_FREE_ON_86}" in out.splitlines()


def test_no_finding_says_so_and_names_another_manager_s_devices(
    tmp_path, capsys
):
    """The same mdev made by another manager (the records say so): no
    finding, and the line naming it as left alone."""
    args = _args(tmp_path)
    run_cli(capsys, *args, "audit")  # the first start takes stock
    state = tmp_path / "state"
    made = records_helpers.made_on_disk(state)
    made.discard(M10_FREE_ON_86)
    records_helpers.record_made(state, made)
    code, out, _err = run_cli(capsys, *args, "audit")
    assert code == 0
    assert "No mismatch: none" in out.splitlines()
    assert (
        "Made by another manager (left alone, counted as used): "
        f"{M10_FREE_ON_86}"
    ) in out.splitlines()
    assert "Finding" not in out  # no table
