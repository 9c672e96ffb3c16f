"""The traits this library owns on each provider it writes.

A trait dropped from the configuration while the service was down must
still be known as ours (and removed), unlike an operator's, so what we
set is kept on disk. :class:`OwnedTraits` is the one owner of it:

* ``written``: provider name -> the traits we own (what is on disk, plus
  what the current pass writes, until the caller confirms the tree
  reached Placement);
* ``planned``: what the last pass planned, owned alone once confirmed;
* ``on_disk``: while a save failed (a full ``state_path``), what the
  record on disk still says, so the next pass tries again from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_driver.records.merged import MergedRecord, is_string_list, keep
from vgpu_driver.records.store import StateStore, validate_str_map

TRAITS_RECORD = "provider-traits"


class OwnedTraits:
    def __init__(self, state: StateStore | None) -> None:
        self._record = MergedRecord(state, TRAITS_RECORD, _validate_traits)
        self.written: dict[str, frozenset[str]] = _as_traits(
            self._record.load()
        )
        self._planned: dict[str, frozenset[str]] = {}
        self.on_disk: dict[str, frozenset[str]] | None = None

    def saved(self) -> dict[str, frozenset[str]]:
        """What is on disk: what we held before this pass, or before a
        pass whose save failed."""
        return dict(self.written) if self.on_disk is None else self.on_disk

    def managed(self, name: str) -> frozenset[str]:
        return self.written.get(name, frozenset())

    def plan(self, name: str, traits: frozenset[str]) -> None:
        """A pass writes ``traits`` on provider ``name``: until the caller
        confirms the tree reached Placement, we own both what we wrote
        before and these."""
        self.written[name] = self.written.get(name, frozenset()) | traits
        self._planned[name] = traits

    def forget(self, name: str) -> None:
        """Provider ``name`` was removed."""
        self.written.pop(name, None)

    def save_or_retry(self, before: dict[str, frozenset[str]]) -> None:
        """Record the traits we own now, ``before`` being what is on
        disk; if it cannot be written, the next pass tries again."""
        if before == self.written:
            self.on_disk = None
            return
        saved = keep("the traits set", lambda: self._save(before))
        self.on_disk = None if saved else before

    def _save(self, before: Mapping[str, frozenset[str]]) -> None:
        after = self.written
        merged = self._record.merge(
            {n: sorted(t) for n, t in after.items() if before.get(n) != t},
            set(before) - set(after),
        )
        if self._record.state is not None:
            self.written = _as_traits(merged)

    def confirm(self) -> None:
        """The tree last written is in Placement: from here on we own
        exactly the traits planned."""
        if not self._planned:
            return
        before = dict(self.written)
        self.written.update(self._planned)
        self._planned = {}
        if self.on_disk is not None:
            before = self.on_disk
        self.save_or_retry(before)


def _as_traits(record: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    return {n: frozenset(t) for n, t in record.items()}


_validate_traits = validate_str_map(is_string_list, "a list of traits")
