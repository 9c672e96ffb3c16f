"""``tally`` counts as ``Counter`` counts, and is one: a missing key
counts 0, and what callers add to it adds."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from vgpu_driver.model.counting import tally

keys = st.one_of(
    st.integers(-3, 3),
    st.text(max_size=2),
    st.tuples(st.text(max_size=1), st.text(max_size=1)),
    st.none(),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(keys, max_size=60))
def test_tally_is_counter(items):
    counted = tally(iter(items))  # a generator, as the callers pass
    assert type(counted) is Counter
    assert counted == Counter(items)
    assert list(counted) == list(Counter(items))  # first seen, first
    assert counted[object()] == 0


def test_a_tally_takes_more():
    counted = tally(["a", "b", "a"])
    counted["b"] += 2
    counted["c"] += 1
    assert counted == Counter(a=2, b=3, c=1)
