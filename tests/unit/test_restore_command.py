"""``vgpu-driver restore`` at boot: what it says and its exit status, in
text and JSON, when records are damaged (the claims among them: the
devices of spawns in flight are asked of Placement, which may not
answer) and when a VF refuses its recorded type."""

from __future__ import annotations

import json

from tests.cli_runs import run_cli


def _restore(tmp_path, capsys, *, claims="", vf_types=None, json_out=True):
    """``restore`` on l40-sriov with the records given (``claims``: the
    claims file's text; ``vf_types``: VF -> type number)."""
    state = tmp_path / "state"
    state.mkdir(parents=True, exist_ok=True)
    if claims is not None:
        (state / "claims.json").write_text(claims)
    if vf_types is not None:
        (state / "vf-types.json").write_text(json.dumps(vf_types))
    conf = tmp_path / "nova.conf"
    conf.write_text(
        f"[devices]\nenabled_mdev_types = nvidia-1150\nstate_path = {state}\n"
    )
    args = ["--config-file", str(conf), "--host-description", "l40-sriov"]
    args += ["restore", *(["--format", "json"] if json_out else [])]
    code, out, err = run_cli(capsys, *args)
    return code, (json.loads(out) if json_out else out), err


def test_damaged_claims_ask_placement_and_say_when_it_was_not_read(
    tmp_path, capsys
):
    """Claims and VF types both damaged: both moved aside; the claims
    among them, Placement is asked for spawns in flight, and (none
    configured here) the report says it was not read and what to do."""
    code, found, _err = _restore(tmp_path, capsys, vf_types=[1])
    assert code == 0
    moved = sorted(
        p.rsplit("/", 1)[1].split(".json")[0]
        for p in found["records_moved_aside"]
    )
    assert moved == ["claims", "vf-types"]
    assert found["held_in_flight"] == {}
    assert found["note"].startswith("Placement not read")
    assert "vgpu-driver audit" in found["note"]
    assert (found["restored"], found["failed"]) == ([], [])
    # the same in text: the warning on stderr, each record moved named
    code, out, err = _restore(
        tmp_path / "again", capsys, vf_types=[1], json_out=False
    )
    assert code == 0
    assert out.count("Moved an unreadable record aside") == 2
    assert "WARNING: Placement not read" in err


def test_other_records_damaged_do_not_ask_placement(tmp_path, capsys):
    """The claims readable, the VF types not: moved aside, and no spawn
    in flight to look for (nothing about Placement said)."""
    code, found, _err = _restore(
        tmp_path, capsys, claims=None, vf_types={"0000:41:00.6": "L40S-4Q"}
    )
    assert code == 0
    [moved] = found["records_moved_aside"]
    assert "vf-types.json" in moved
    assert found["note"] is None and found["held_in_flight"] == {}
    code, _out, err = _restore(
        tmp_path / "again",
        capsys,
        claims=None,
        vf_types={"0000:41:00.6": "L40S-4Q"},
        json_out=False,
    )
    assert code == 0 and "WARNING" not in err


def test_a_vf_that_refuses_its_type_is_named_and_exits_1(tmp_path, capsys):
    """A recorded type the VF cannot take (the card offers no such
    type): named, the others restored, exit status 1, in text and JSON
    alike; with nothing refused, 0."""
    recorded = {"0000:41:00.6": 9999, "0000:41:00.7": 1150}
    code, found, _err = _restore(
        tmp_path, capsys, claims=None, vf_types=recorded
    )
    assert code == 1
    [failure] = found["failed"]
    assert failure.startswith("0000:41:00.6")
    assert found["restored"] == ["0000:41:00.7"]
    code, out, err = _restore(
        tmp_path / "again",
        capsys,
        claims=None,
        vf_types=recorded,
        json_out=False,
    )
    assert code == 1
    assert "ERROR: VF 0000:41:00.6" in err
    assert "1 re-applied: 0000:41:00.7" in out
