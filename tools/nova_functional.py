"""Run Nova's own vGPU functional tests, unmodified, with this library
doing the vGPU work (or, with ``--baseline``, Nova's in-tree code).

Runs inside the virtualenv ``tools/nova-functional`` builds. What it
changes is what an operator changes in nova.conf, applied in each test's
set-up after Nova's own:

* ``[DEFAULT] compute_driver = vgpu_libvirt.LibvirtDriver`` (Nova's
  suite sets ``libvirt.LibvirtDriver``), loaded by Nova's own
  ``load_compute_driver`` from ``nova.virt.vgpu_libvirt`` as the wheel
  installs it (no alias, no wrapper);
* ``[devices] state_path``: a temporary directory per test;
* the library's sysfs root: an empty directory per test (Nova's suite
  forbids reading the machine's ``/sys``; its fake libvirt describes
  every device, and this machine has no vGPU hardware to find there).

Tests where this library deliberately differs from Nova are listed in
EXPECTED_DIFFERENCES with the reason; such a test must fail (if it
passes, the difference is gone and the list is wrong: that is a failure).
Prints one row per test: test / result / note. Exit status 1 on any
failure.

A test that hangs fails rather than stalling the run: each has Nova's
own per-test timeout (oslotest's ``OS_TEST_TIMEOUT``, as Nova's tox
sets it), and tools/nova_watchdog.py ends the run, with the stacks, if a
test outlives that by far (a call that blocks the whole process never
gives the timeout a chance to fire) or if Nova 34's own test fixtures
deadlock (exit status 75: tools/nova-functional runs again once).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import unittest
from typing import TextIO

# Nova's tox runs its functional tests with this per-test timeout
TEST_TIMEOUT = 160
# the watchdog's limit for one test, should the timeout never fire
HANG_SECONDS = 2 * TEST_TIMEOUT

MODULES = (
    "nova.tests.functional.libvirt.test_vgpu",
    "nova.tests.functional.libvirt.test_reshape",
)
_VGPU = "nova.tests.functional.libvirt.test_vgpu."
# test -> (why this library differs, what the failure must show: the
# assertion expected to fail and how). A test failing any other way is a
# failure, as is one that passes.
EXPECTED_DIFFERENCES: dict[str, tuple[str, tuple[str, ...]]] = {
    _VGPU + "VGPULimitMultipleTypesTests.test_create_servers_with_vgpu": (
        "max_instances=2 caps nvidia-11 at 2 on its pGPU, so the instance "
        "lands there; Nova deletes that pGPU's provider instead and the "
        "test expects the instance on the second pGPU",
        (
            "self.assert_mdev_usage(self.compute1, expected_amount=1,",
            "MismatchError: 1 != 0",
        ),
    ),
}
for _class in ("VGPULiveMigrationTests", "VGPULiveMigrationTestsLMFailed"):
    EXPECTED_DIFFERENCES[
        f"{_VGPU}{_class}."
        "test_live_migration_fails_due_to_non_supported_mdev_types"
    ] = (
        "the destination's nvidia-11 pGPU has no enabled type, so its "
        "provider is removed and the scheduler refuses the migration "
        "(NoValidHost); Nova keeps that stale provider, lets the "
        "scheduler pick it and refuses in the destination's pre-check, "
        "whose log line the test looks for",
        (
            "self.assertIn('Unable to migrate %s: ' % self.server['id'], "
            "log_out)",
            "NoValidHost",
        ),
    )


def integrate() -> None:
    """What the operator's nova.conf says, in every test's set-up."""
    import fixtures
    import nova.conf
    from nova.tests.functional.libvirt import base

    import vgpu_driver.conf
    import vgpu_driver.nova

    # the stock path: Nova's loader finds nova.virt.vgpu_libvirt, the
    # module the wheel installs; nothing here loads or aliases the driver
    assert "vgpu_driver.nova.driver" not in sys.modules
    vgpu_driver.conf.register_opts(nova.conf.CONF)
    original = base.ServersTestBase._setup_compute_service

    def setup_compute_service(self):
        original(self)
        self.flags(compute_driver=vgpu_driver.nova.COMPUTE_DRIVER)
        state = self.useFixture(fixtures.TempDir()).path
        self.flags(state_path=state, group="devices")
        self.useFixture(
            fixtures.MonkeyPatch(
                "nova.virt.vgpu_libvirt.LibvirtDriver.vgpu_sysfs_root",
                self.useFixture(fixtures.TempDir()).path,
            )
        )

    base.ServersTestBase._setup_compute_service = setup_compute_service


class Result(unittest.TestResult):
    def __init__(self, out: TextIO) -> None:
        super().__init__()
        self.out = out
        self.rows: list[tuple[str, str, str, float]] = []
        self.started = 0.0
        self.current = ""

    def startTest(self, test: unittest.TestCase) -> None:
        super().startTest(test)
        self.started = time.monotonic()
        self.current = test.id()
        print(f"  running {test.id()}", file=self.out, flush=True)

    def stopTest(self, test: unittest.TestCase) -> None:
        super().stopTest(test)
        self.current = ""

    def _row(self, test: unittest.TestCase, outcome: str, note: str) -> None:
        took = time.monotonic() - self.started
        self.rows.append((test.id(), outcome, note, took))

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self._row(test, "pass", "")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._row(test, "fail", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._row(test, "fail", self._exc_info_to_string(err, test))

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        self._row(test, "skip", reason)


def judge(rows, integrated):
    """(test, result, note, seconds) with expected differences applied:
    one holds only if the test fails at the assertion named, as named."""
    judged = []
    for test, outcome, note, took in rows:
        expected = EXPECTED_DIFFERENCES.get(test) if integrated else None
        if expected is None:
            first = note.strip().splitlines()[-1] if note.strip() else ""
            judged.append((test, outcome, first, took, note))
            continue
        reason, marks = expected
        if outcome == "fail" and all(m in note for m in marks):
            judged.append((test, "expected-difference", reason, took, note))
        elif outcome == "fail":
            judged.append(
                (
                    test,
                    "fail",
                    "failed, but not at the expected assertion "
                    f"{marks[0]!r}: " + reason,
                    took,
                    note,
                )
            )
        else:
            judged.append(
                (
                    test,
                    "fail",
                    f"{outcome}, but listed as an expected difference: "
                    + reason,
                    took,
                    "",
                )
            )
    return judged


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="Nova's in-tree vGPU code (no vgpu_driver)",
    )
    parser.add_argument(
        "tests", nargs="*", help="test ids or modules (default: both suites)"
    )
    args = parser.parse_args()
    # Nova logs to stdout too: from here on stdout is stderr (the log the
    # script keeps), and the table goes to the real stdout
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    os.environ.setdefault("OS_TEST_TIMEOUT", str(TEST_TIMEOUT))
    if not args.baseline:
        integrate()
    suite = unittest.defaultTestLoader.loadTestsFromNames(
        args.tests or MODULES
    )
    result = Result(out)
    import nova_watchdog  # beside this file

    nova_watchdog.start(
        lambda: (result.current, result.started), out, HANG_SECONDS
    )
    started = time.monotonic()
    suite.run(result)
    elapsed = time.monotonic() - started
    judged = judge(result.rows, not args.baseline)
    width = max((len(t.split(".", 4)[-1]) for t, *_ in judged), default=4)
    mode = "Nova in-tree" if args.baseline else "vgpu_driver.nova"
    from importlib import metadata

    version = metadata.version("nova")
    print(f"Nova {version} vGPU functional tests with {mode}", file=out)
    print(f"{'test':<{width}}  {'result':<19}  {'s':>5}  note", file=out)
    for test, outcome, note, took, _ in judged:
        short = test.split(".", 4)[-1]
        if outcome == "expected-difference":
            note = "see below"
        elif len(note) > 100:
            note = note[:97] + "..."
        print(
            f"{short:<{width}}  {outcome:<19}  {took:5.1f}  {note}", file=out
        )
    counts: dict[str, int] = {}
    for _, outcome, *_ in judged:
        counts[outcome] = counts.get(outcome, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    print(f"{len(judged)} tests in {elapsed:.0f} s: {summary}", file=out)
    differences = [j for j in judged if j[1] == "expected-difference"]
    if differences:
        print("Expected differences (this library on purpose):", file=out)
        for test, _, reason, _, _ in differences:
            print(f"- {test.split('.', 4)[-1]}: {reason}", file=out)
    failed = [j for j in judged if j[1] == "fail"]
    for test, _, _, _, detail in failed:
        print(f"\n=== {test}\n{detail}", file=sys.stderr)
    return 1 if failed or not judged else 0


if __name__ == "__main__":
    sys.exit(main())
