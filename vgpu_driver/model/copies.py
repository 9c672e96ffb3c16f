"""A frozen dataclass copied with some fields changed, at a fraction of
what :func:`dataclasses.replace` costs (it calls ``__init__`` with every
field): the instance's ``__dict__`` copied, the changes laid over. For
the readings and plans a refresh copies after each change on the host.

Only for dataclasses whose ``__init__`` does nothing but set the fields
(no ``__post_init__``, no ``InitVar``, no ``slots``); a cached property
already computed is copied too, so only where the changes cannot alter
what it holds (see the callers).
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def replaced(instance: T, **changes: Any) -> T:
    """``instance`` with ``changes`` (field -> value)."""
    copy: T = object.__new__(type(instance))
    copy.__dict__.update(instance.__dict__, **changes)
    return copy
