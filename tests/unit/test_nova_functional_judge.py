"""An expected difference from Nova's suite holds only where it is
expected: the named assertion failing the named way."""

from __future__ import annotations

import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "nova_functional.py"


def tool():
    spec = importlib.util.spec_from_file_location("nova_functional", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_only_the_named_assertion_failing_as_named_is_expected():
    nf = tool()
    [(test, (_reason, marks))] = [
        (t, v)
        for t, v in nf.EXPECTED_DIFFERENCES.items()
        if "VGPULimitMultipleTypesTests" in t
    ]
    at_the_assertion = "Traceback\n  " + "\n  ".join(marks)
    elsewhere = (
        "Traceback\n  self.assertEqual(16, total)\nMismatchError: 1 != 0"
    )
    rows = [
        (test, "fail", at_the_assertion, 1.0),
        (test, "fail", elsewhere, 1.0),
        (test, "pass", "", 1.0),
        ("nova.tests.other.Test.test_x", "fail", "boom", 1.0),
    ]
    outcomes = [row[1] for row in nf.judge(rows, integrated=True)]
    assert outcomes == ["expected-difference", "fail", "fail", "fail"]
    # on Nova's own code (baseline) nothing is expected to differ
    assert [r[1] for r in nf.judge(rows[:1], integrated=False)] == ["fail"]
