"""Release notes (reno) are well formed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / "releasenotes" / "notes"
SECTIONS = {
    "features",
    "fixes",
    "upgrade",
    "deprecations",
    "security",
    "issues",
    "prelude",
    "other",
}


def test_every_note_has_known_sections_with_text():
    notes = sorted(NOTES.glob("*.yaml"))
    assert notes
    for note in notes:
        data = yaml.safe_load(note.read_text())
        assert set(data) <= SECTIONS, note.name
        for section, entries in data.items():
            if section == "prelude":
                assert isinstance(entries, str)
                continue
            assert entries and all(
                isinstance(e, str) and e.strip() for e in entries
            )


def test_reno_lint_passes():
    reno = shutil.which("reno", path=str(Path(sys.executable).parent))
    if reno is None:
        pytest.skip("reno is not installed")
    result = subprocess.run(
        [reno, "lint"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
