"""benchmarks.caches: the size it empties is read as sysfs spells a
cache's, and emptying copies twice the last-level cache over the lines
a caller left (what ``--cold`` times the refreshes after)."""

from __future__ import annotations

from benchmarks import caches


def test_the_last_level_is_the_largest_cache_sysfs_lists(tmp_path):
    for index, size in enumerate(["48K", "2048K", "260M", "bogus"]):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "size").write_text(size + "\n")
    assert caches.last_level_bytes(tmp_path) == 260 << 20
    assert caches.last_level_bytes(tmp_path / "none") == 0


def test_the_buffers_are_twice_the_last_level_within_bounds():
    assert caches.buffer_bytes(260 << 20) == 520 << 20
    assert caches.buffer_bytes(0) == 64 << 20  # none listed
    assert caches.buffer_bytes(4 << 30) == 1 << 30


def test_emptying_writes_over_what_was_there(monkeypatch):
    monkeypatch.setattr(caches.Caches, "_buffers", None)
    monkeypatch.setattr(caches, "last_level_bytes", lambda: 40 << 20)
    caches.Caches.empty()
    target, source = caches.Caches._buffers
    assert len(target) == len(source) == 80 << 20
    target[12345] = 7  # a line the caller left
    caches.Caches.empty()
    assert target[12345] == 0
