"""tools/ab.py times two versions of the package in turn: each round's
process imports the version it names (not the work tree's), and the
figure is of the rounds' medians."""

from __future__ import annotations

import importlib.util
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "ab.py"


def _slower(seconds: float, times: int | None) -> str:
    """Code appended to a copy of ``driver.py``: each of the first
    ``times`` refreshes of a process (None: every one) burns ``seconds``
    of CPU before it runs."""
    return f"""

def _slowed(update):
    import time

    left = [{times}]

    def slowed(self, *args, **kwargs):
        if left[0] is None or left[0] > 0:
            if left[0] is not None:
                left[0] -= 1
            end = time.process_time() + {seconds}
            while time.process_time() < end:
                pass
        return update(self, *args, **kwargs)

    return slowed


VgpuDriver.update_provider_tree = _slowed(VgpuDriver.update_provider_tree)
"""


SLOWER = _slower(0.003, None)
ONCE_SLOWER = _slower(0.010, 1)  # the first refresh of the process alone


def _planted(tmp_path, name: str, code: str) -> Path:
    """A copy of the work tree's package with ``code`` appended to its
    ``driver.py``; ``sys.path`` given the work tree (its benchmarks)."""
    copy = tmp_path / name
    shutil.copytree(ROOT / "vgpu_driver", copy / "vgpu_driver")
    with (copy / "vgpu_driver" / "driver.py").open("a") as driver:
        driver.write(code)
    sys.path.insert(0, str(ROOT))
    return copy


def _tool():
    spec = importlib.util.spec_from_file_location("ab_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_round_runs_the_package_of_its_version(tmp_path):
    """A package whose refresh burns 3 ms more, run in its round's
    process, is timed 3 ms slower than the work tree's on the same
    host: the version given is the one imported."""
    ab = _tool()
    slow = _planted(tmp_path, "slow", SLOWER)
    made = ab.host("1/4/4", tmp_path / "host")
    # a directory holding the package is taken as it is
    assert ab.package(str(slow), tmp_path / "unused") == slow
    assert ab.package(".", tmp_path / "unused") == ROOT
    fast = ab.one_round(ROOT, "idle", 5, made, tmp_path)
    slowed = ab.one_round(slow, "idle", 5, made, tmp_path)
    assert statistics.median(slowed) - statistics.median(fast) > 2.5


def test_the_figure_is_of_the_rounds_medians():
    """A round of noise moves one median of three, not the figure; the
    rounds' own ratios are given beside it."""
    ab = _tool()
    a = [[1.0, 2.0, 9.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]
    b = [[4.0, 4.0, 4.0], [4.0, 4.0, 4.0], [4.0, 8.0, 8.0]]
    # (all of A's timings pooled have the median 5)
    assert ab.compare(a, b) == (4.0, 4.0, 1.0, 1.0, 2.0)


def test_a_version_the_repository_lacks_is_named():
    done = subprocess.run(
        [sys.executable, str(TOOL), "no-such-version", ".", "--rounds", "1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "no version 'no-such-version'" in done.stderr


@pytest.mark.parametrize("case", ["start", "guest"])
def test_both_versions_print_a_ratio(case):
    """The work tree against itself: a line per round and the ratio."""
    done = subprocess.run(
        [
            sys.executable,
            str(TOOL),
            "HEAD",
            ".",
            "--case",
            case,
            "--host",
            "1/4/4",
            "--runs",
            "3",
            "--rounds",
            "2",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[1:]] == [
        "round 1",
        "round 2",
        "all rounds",
    ]
    assert "B/A" in lines[-1]


def test_the_mdev_case_times_refreshes_that_follow_a_change(tmp_path):
    """Each refresh of the ``mdev`` case follows another manager's mdev
    made or removed: it costs what an idle one does and more (the
    parent's XML read again, its mdevs followed, its provider planned
    and written; about 5x at this size)."""
    ab = _tool()
    sys.path.insert(0, str(ROOT))
    made = ab.host("1/4/4", tmp_path / "host")
    changed = ab.one_round(ROOT, "mdev", 6, made, tmp_path)
    idle = ab.one_round(ROOT, "idle", 6, made, tmp_path)
    assert len(changed) == 6
    assert statistics.median(changed) > 2 * statistics.median(idle)


def test_the_restart_case_pays_what_a_process_pays_once(tmp_path):
    """A package whose first refresh in a process burns 10 ms: each
    ``restart`` timing is a new process's start and carries it; the
    ``start`` case, many starts in one process, does not see it."""
    ab = _tool()
    once = _planted(tmp_path, "once", ONCE_SLOWER)
    made = ab.restarted_host("1/4/4", tmp_path / "host")
    fresh = ab.one_round(ROOT, "restart", 3, made, tmp_path)
    slowed = ab.one_round(once, "restart", 3, made, tmp_path)
    assert len(fresh) == len(slowed) == 3
    assert min(slowed) - statistics.median(fresh) > 7
    warm = ab.host("1/4/4", tmp_path / "warm")
    in_one = ab.one_round(ROOT, "start", 5, warm, tmp_path)
    once_in_one = ab.one_round(once, "start", 5, warm, tmp_path)
    assert statistics.median(once_in_one) - statistics.median(in_one) < 3
