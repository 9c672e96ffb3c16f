"""The commands' plain-text tables and JSON: columns as wide as their
widest cell, a rule under the header alone, no trailing blanks, "-"
for a missing value or an empty list, lists joined with commas."""

from __future__ import annotations

import io
import json

from vgpu_driver.cmd import output


def test_a_table_is_aligned_with_a_rule_under_its_header():
    out = io.StringIO()
    output.table(
        ["Name", "Devices", "Note"],
        [
            ["a", ["x", "y"], None],
            ["longer", [], 3],
            ["b", ("z",), ""],
        ],
        out,
    )
    assert out.getvalue().splitlines() == [
        "Name    Devices  Note",
        "------  -------  ----",
        "a       x, y     -",
        "longer  -        3",
        "b       z",
    ]


def test_json_is_indented_and_ends_with_a_newline():
    out = io.StringIO()
    output.dump_json({"b": 1, "a": [None]}, out)
    assert out.getvalue() == json.dumps({"b": 1, "a": [None]}, indent=2) + "\n"
