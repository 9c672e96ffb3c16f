"""The providers kept while in use (``model/kept.py``), each rule a
sweep of it found no test holding: which type a kept provider names,
and what it counts."""

from __future__ import annotations

from collections import Counter

from vgpu_driver.model import naming
from vgpu_driver.model.kept import kept_while_in_use

NODE = "node1"
GONE = "pci_0000_84_00_0"  # a device no longer on the host
OWNER = "OWNER_NOVA"


def kept(existing, held=None, allocated=None, plans=None):
    plans = dict(plans or {})
    kept_while_in_use(
        plans, existing, NODE, held or {}, allocated or {}, set(), OWNER
    )
    return plans


def test_a_kept_provider_whose_guests_type_is_unknown_names_no_type():
    """Placement holds units there but no guest says of which type: the
    provider is kept with the owner trait alone (no trait made of an
    empty type id)."""
    name = naming.provider_name(NODE, GONE)
    plans = kept({name: ["VGPU"]}, allocated={name: {"VGPU": 2}})
    plan = plans[name]
    assert (plan.total, plan.reserved, plan.type_id) == (2, 2, "")
    assert plan.traits == frozenset({OWNER})


def test_a_kept_provider_names_the_type_most_of_its_guests_use():
    name = naming.provider_name(NODE, GONE)
    held = {GONE: Counter({"nvidia-35": 1, "nvidia-36": 3})}
    plan = kept({name: ["VGPU"]}, held=held)[name]
    assert plan.type_id == "nvidia-36"
    assert plan.total == plan.reserved == 4
    assert naming.type_trait("nvidia-36") in plan.traits


def test_a_second_types_provider_kept_counts_its_own_type_alone():
    """A device gone that served two types through two providers: the
    second type's provider keeps what guests use of its type, under the
    device's first provider, not the other type's devices."""
    first = naming.provider_name(NODE, GONE)
    second = naming.type_provider_name(NODE, GONE, "nvidia-36")
    held = {GONE: Counter({"nvidia-35": 3, "nvidia-36": 1})}
    plans = kept({first: ["VGPU"], second: ["VGPU"]}, held=held)
    assert (plans[second].type_id, plans[second].total) == ("nvidia-36", 1)
    assert plans[second].parent == first
    # the first provider counts what the second does not
    assert (plans[first].type_id, plans[first].total) == ("nvidia-35", 3)
