"""tools/mutate.py plants each fault once and tells the ones no test
catches: on a module of four lines, with a test that misses the edge."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "mutate.py"

MODULE = '''"""A docstring the tool leaves alone."""


def clamp(x: int, low: int, high: int) -> int:
    if x < low:
        return low
    return min(x, high)
'''

TESTS = """from pkg.m import clamp


def test_clamp():
    assert clamp(-1, 0, 3) == 0
    assert clamp(5, 0, 3) == 3
    assert clamp(2, 0, 3) == 2
"""


def tool():
    spec = importlib.util.spec_from_file_location("mutate_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutate_tool"] = module
    spec.loader.exec_module(module)
    return module


def test_a_fault_no_test_catches_is_told_with_its_line(tmp_path, capsys):
    mutate = tool()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "m.py").write_text(MODULE)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_m.py").write_text(TESTS)
    kinds = sorted(f.kind for f, _text, _line in mutate.mutants(MODULE))
    # x < low flipped, the if forced both ways, min swapped, two returns
    assert kinds == sorted(
        ["compare", "if-true", "if-false", "call"] + ["return-none"] * 2
    )
    where = ["--workers", "1", "--root", str(tmp_path)]
    status = mutate.main(["pkg/m.py", "--tests", "tests", "--then", *where])
    out = capsys.readouterr().out
    # x <= low: clamp(0, 0, 3) is 0 either way, and no test asks anyway
    assert "survived #3 line 5 compare: if x < low:" in out
    assert out.count("survived") == 1
    assert "pkg/m.py: 5 of 6 mutants killed" in out
    assert status == 1
    assert (tmp_path / "pkg" / "m.py").read_text() == MODULE  # untouched
    # (an equivalent mutant: x == low returns low both ways, a test
    # cannot kill it and the sweep's note says so); the others alone, by
    # number or by line:
    others = ["--only", "0,4", *where]
    assert (
        mutate.main(["pkg/m.py", "--tests", "tests", "--then", *others]) == 0
    )
    assert "2 of 2 mutants killed" in capsys.readouterr().out
    lines = ["--lines", "6-7", *where]
    assert mutate.main(["pkg/m.py", "--tests", "tests", "--then", *lines]) == 0
    assert "3 of 3 mutants killed" in capsys.readouterr().out


def _package(root: Path, tests: str = TESTS) -> None:
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "m.py").write_text(MODULE)
    (root / "tests").mkdir()
    (root / "tests" / "test_m.py").write_text(tests)


def test_tests_failing_with_no_fault_planted_stop_the_sweep(tmp_path, capsys):
    """A test that fails in the copies whatever the module holds would
    count every mutant killed: the sweep says so and judges none."""
    mutate = tool()
    _package(tmp_path, TESTS + "\n\ndef test_broken():\n    assert 1 == 2\n")
    where = ["--workers", "1", "--root", str(tmp_path)]
    status = mutate.main(["pkg/m.py", "--tests", "tests", "--then", *where])
    out = capsys.readouterr().out
    assert status == 2
    assert "the tests fail with no fault planted" in out
    assert "test_broken" in out
    assert "mutants killed" not in out


def test_the_copies_of_a_git_work_tree_have_its_history(tmp_path, capsys):
    """Tests that read the repository's history (reno's release notes)
    pass in the copies: each is a clone, with the work tree's uncommitted
    changes laid over it."""
    import subprocess

    mutate = tool()
    _package(tmp_path)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c"]
    git += ["user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    # committed: a test that needs the history; not committed: a change
    (tmp_path / "tests" / "test_history.py").write_text(
        "import subprocess\n\n\ndef test_history():\n"
        "    out = subprocess.run(['git', 'log', '--format=%s'],\n"
        "                         capture_output=True, check=True)\n"
        "    assert out.stdout.decode().split() == ['one']\n"
    )
    where = ["--workers", "1", "--root", str(tmp_path), "--only", "0"]
    status = mutate.main(["pkg/m.py", "--tests", "tests", "--then", *where])
    assert "1 of 1 mutants killed" in capsys.readouterr().out
    assert status == 0
    log = subprocess.run(
        [*git, "log", "--format=%s"], capture_output=True, check=True
    )
    assert log.stdout.decode().split() == ["one"]  # root's untouched


def test_a_command_of_its_own_judges_each_copy(tmp_path, capsys):
    """``--command``: a suite with a runner of its own (Nova's functional
    tests) run in each copy, the copy's package imported, not another
    one on the path: its exit status judges the mutant."""
    mutate = tool()
    _package(tmp_path)
    # a runner that exits 1 unless clamp holds at both edges
    (tmp_path / "run.py").write_text(
        "import sys\n"
        "from pkg.m import clamp\n"
        "sys.exit(0 if (clamp(-1, 0, 3), clamp(5, 0, 3)) == (0, 3) else 1)\n"
    )
    where = ["--workers", "1", "--root", str(tmp_path)]
    runner = f"{sys.executable} run.py"
    status = mutate.main(["pkg/m.py", "--command", runner, *where])
    out = capsys.readouterr().out
    # what the tests above kill, the runner does (x <= low survives)
    assert "survived #3 line 5 compare: if x < low:" in out
    assert "pkg/m.py: 5 of 6 mutants killed" in out
    assert status == 1
    # a runner failing with no fault planted judges nothing
    (tmp_path / "run.py").write_text("import sys\nsys.exit('broken')\n")
    assert mutate.main(["pkg/m.py", "--command", runner, *where]) == 2
    assert "broken" in capsys.readouterr().out
