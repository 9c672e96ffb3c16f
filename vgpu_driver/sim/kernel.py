"""How the kernel counts: the rules a simulated host follows.

These are the vendor drivers' observable rules, written once and used by
both renderings of a host description (libvirt test-driver XML, fake
sysfs) and by the in-process simulated host, so all three agree.

* An mdev parent offers ``capacity`` devices of each type. On a
  homogeneous parent (NVIDIA: one type per physical GPU) a type has no
  room left while devices of another type exist.
* An NVIDIA SR-IOV card carries one vGPU per VF. Once one VF has a type,
  the others can only take that same type, up to the type's capacity on
  the card; a VF that has a type lists nothing as creatable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping


def available_instances(
    type_id: str,
    capacity: int,
    used_types: Iterable[str],
    homogeneous: bool,
) -> int:
    """``availableInstances`` of a type given the types of live mdevs."""
    counts = Counter(used_types)
    if homogeneous and any(t != type_id and n for t, n in counts.items()):
        return 0
    return max(0, capacity - counts[type_id])


def creatable_types(
    vf_type: int,
    vf_types: Iterable[int],
    capacities: Mapping[int, int],
) -> list[int]:
    """Type ids a VF lists as creatable, given every VF's current type."""
    if vf_type:
        return []
    counts = Counter(t for t in vf_types if t)
    if counts:
        [(in_use, used)] = counts.most_common(1)
        return [in_use] if used < capacities.get(in_use, 0) else []
    return [t for t, capacity in capacities.items() if capacity > 0]
