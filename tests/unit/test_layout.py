"""The package's layout holds: arrows between its parts point one way,
model/ stays pure, and no module or class outgrows a newcomer's head.
See the README's Layout section for what each part owns."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "vgpu_driver"
# the rest of the project held to the same sizes: its tests, benchmarks
# and tools are read as often as the package
BESIDE = ("tests", "benchmarks", "tools")
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 300

# part -> the other parts (or single modules) it may import
ALLOWED = {
    "exception": set(),
    "model": {"exception"},
    "records": {"exception", "model"},
    "host": {"exception", "model"},
    # the simulated host is read by the real sysfs and NVML readers
    "sim": {"exception", "model", "host.sysfs", "host.nvml"},
    "conf": {"exception", "model"},
    "placement": {"exception", "model", "records"},
    "service": {"exception", "model", "records", "host.base"},
    # what the driver does when an instance moves (a part of the facade)
    "instance_moves": {"exception", "model", "service"},
    "driver": {
        "exception",
        "model",
        "records",
        "service",
        "instance_moves",
        "placement",
        "conf",
        "host.base",
        "host.domain_xml",
    },
    "nova": {
        "exception",
        "model",
        "conf",
        "driver",
        "host.libvirt_host",
        "host.nvml",
        "placement",
        "nova",
        "metrics",
    },
    "metrics": {"exception", "model", "driver"},
    "cmd": None,  # the command line puts everything together
}
# besides the standard library, what model/ may import
MODEL_THIRD_PARTY = {"os_traits", "os_resource_classes"}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield path, parts


def _imports(path):
    """Every module named by an import anywhere in the file (functions
    included)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.level:
                raise AssertionError(f"{path}: relative import")
            # ``from a.b import c``: c is a module of a.b or a name in it
            yield from (f"{node.module}.{a.name}" for a in node.names)


def _part(parts):
    return parts[0] if parts else "vgpu_driver"


def wrong_arrows():
    found = []
    for path, parts in _modules():
        part = _part(parts)
        allowed = ALLOWED.get(part, set())
        if allowed is None or part == "vgpu_driver":
            continue
        for name in _imports(path):
            if not name.startswith("vgpu_driver."):
                continue
            target = name.split(".")[1:]
            if target[0] == part:
                continue
            if target[0] in allowed or ".".join(target[:2]) in allowed:
                continue
            found.append(f"{'/'.join(parts)} imports {name}")
    return sorted(set(found))


def impure_model_imports():
    found = []
    stdlib = set(sys.stdlib_module_names)
    for path, parts in _modules():
        if _part(parts) != "model":
            continue
        for name in _imports(path):
            top = name.split(".")[0]
            if (
                top in stdlib
                or top in MODEL_THIRD_PARTY
                or top == "vgpu_driver"
            ):
                continue
            found.append(f"{'/'.join(parts)} imports {name}")
    return sorted(set(found))


def _sized():
    """(name, path) of every module held to the sizes: the package's
    and those of the directories beside it."""
    for path, parts in _modules():
        yield "/".join(parts), path
    root = PACKAGE.parent
    for directory in BESIDE:
        for path in sorted((root / directory).rglob("*.py")):
            yield path.relative_to(root).with_suffix("").as_posix(), path


def oversized():
    found = []
    for name, path in _sized():
        text = path.read_text()
        lines = text.count("\n")
        if lines > MAX_MODULE_LINES:
            found.append(f"module {name}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                size = node.end_lineno - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    found.append(f"class {node.name}: {size} lines")
    return found


def test_every_arrow_points_the_allowed_way():
    assert wrong_arrows() == []


def test_model_imports_nothing_but_the_standard_library_and_names():
    assert impure_model_imports() == []


def test_no_module_over_400_lines_and_no_class_over_300():
    assert oversized() == []


@pytest.mark.parametrize(
    "part, line, check",
    [
        ("model", "from vgpu_driver.host import sysfs", wrong_arrows),
        ("records", "import vgpu_driver.service.binder", wrong_arrows),
        (
            "service",
            "from vgpu_driver.host.libvirt_host import X",
            wrong_arrows,
        ),
        ("model", "from oslo_log import log", impure_model_imports),
    ],
)
def test_a_wrong_import_is_found(tmp_path, monkeypatch, part, line, check):
    """The checks above can fail: a copy of the package with one wrong
    import planted is caught."""
    import shutil

    copy = tmp_path / "vgpu_driver"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("data"))
    (copy / part / "planted.py").write_text(f"{line}\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", copy)
    assert [f for f in check() if "/planted imports" in f]
    (copy / part / "planted.py").unlink()
    assert check() == []


def test_an_oversized_class_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "BESIDE", ())
    copy = tmp_path / "vgpu_driver"
    copy.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    (copy / "big.py").write_text(f"class Big:\n{body}\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", copy)
    assert oversized() == [f"class Big: {MAX_CLASS_LINES + 1} lines"]


def test_an_oversized_test_module_is_found(tmp_path, monkeypatch):
    """The tests, benchmarks and tools are held to the sizes too: a test
    module one line over is found, named by its path."""
    package = tmp_path / "vgpu_driver"
    package.mkdir()
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    body = "x = 1\n" * MAX_MODULE_LINES
    (tmp_path / "tests" / "unit" / "test_big.py").write_text(body)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    assert oversized() == []
    (tmp_path / "tests" / "unit" / "test_big.py").write_text(body + "y = 2\n")
    assert oversized() == [
        f"module tests/unit/test_big: {MAX_MODULE_LINES + 1} lines"
    ]


def imports_of_test_modules(root: Path | None = None) -> list[str]:
    root = root or PACKAGE.parent / "tests"
    found = []
    for path in sorted(root.rglob("*.py")):
        for name in _imports(path):
            if any(part.startswith("test_") for part in name.split(".")):
                found.append(f"{path.relative_to(root)} imports {name}")
    return found


def test_no_test_module_is_imported_by_another():
    """What tests share is in a module of its own under tests/, not
    imported from another test module (whose tests would then run again
    where it is imported, and whose split would break its importers)."""
    assert imports_of_test_modules() == []


def test_an_import_of_a_test_module_is_found(tmp_path):
    (tmp_path / "unit").mkdir()
    (tmp_path / "unit" / "test_a.py").write_text("X = 1\n")
    (tmp_path / "unit" / "test_b.py").write_text(
        "def f():\n    from tests.unit.test_a import X\n"
    )
    assert imports_of_test_modules(tmp_path) == [
        "unit/test_b.py imports tests.unit.test_a.X"
    ]
