"""Items counted, as :class:`collections.Counter` counts them, without
the question ``Counter(items)`` asks first.

``Counter(items)`` first asks ``isinstance(items, Mapping)``. The first
time a process asks that of a type (a generator, a ``map``), the answer
walks every subclass of ``Mapping`` the process has imported: 20 to
60 µs each in a new process of this library (more under Nova, which
imports more of them). A restarted service's first refresh asked it of
two types, and their answers were a tenth of what that refresh cost
beyond Nova's (``benchmarks/restart.py``). A loop into a plain ``dict``
asks nothing and costs about what ``Counter`` costs: per item, hashing
the key is most of the work either way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def tally(items: Iterable[K]) -> Counter[K]:
    """How many times each of ``items`` comes, as ``Counter(items)``."""
    counts: dict[K, int] = {}
    get = counts.get
    for item in items:
        counts[item] = get(item, 0) + 1
    found: Counter[K] = Counter()  # no argument: nothing asked
    dict.update(found, counts)  # a dict's own update: nothing asked
    return found
