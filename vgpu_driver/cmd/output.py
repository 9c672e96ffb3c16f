"""Plain-text tables and JSON for the commands."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    out: TextIO | None = None,
) -> None:
    out = out or sys.stdout
    cells = [[str(c) for c in headers]] + [[_cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for index, row in enumerate(cells):
        line = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True))
        out.write(line.rstrip() + "\n")
        if index == 0:
            out.write("  ".join("-" * w for w in widths) + "\n")


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(str(v) for v in value) or "-"
    return str(value)


def dump_json(data: Any, out: TextIO | None = None) -> None:
    (out or sys.stdout).write(json.dumps(data, indent=2, sort_keys=False))
    (out or sys.stdout).write("\n")
