"""An expected difference from Nova's suite holds only where it is
expected: the named assertion failing the named way."""

from __future__ import annotations

from tests import helpers


def tool():
    return helpers.tool("nova_functional")


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
