"""How the kernel counts: the rules a simulated host follows.

These are the vendor drivers' observable rules, written once and used by
both renderings of a host description (libvirt test-driver XML, fake
sysfs) and by the in-process simulated host, so all three agree.

* An mdev parent offers ``capacity`` devices of each type. On a
  homogeneous parent (NVIDIA: one type per physical GPU) a type has no
  room left while devices of another type exist.
* An NVIDIA SR-IOV card carries one vGPU per VF. Once one VF has a type,
  the others can only take types of its framebuffer size (the same type
  where the size is not known), up to the capacity on the card; a VF
  that has a type lists nothing as creatable.
* On a kernel before 6.8 an NVIDIA Ampere GPU's VFs are mdev parents of
  one vGPU each; together they hold what the GPU holds: the type's
  ``max_instance`` (its description). Types of one framebuffer size may
  share the GPU, no two sizes (a captured A2 holding a 4 GB vGPU offers
  A2-4Q, -4A and -4C on a free VF, nothing else:
  ``data/captures/a2-vf-mdev-supported-types.txt``).
* In mixed-size mode (vGPU 17+ on Ada and later) the VFs may hold types
  of different framebuffer sizes: a free VF lists every type of which
  fewer than its capacity exist and whose size fits in the framebuffer
  the placed vGPUs leave, while fewer than 32 time-sliced vGPUs run.
"""

from __future__ import annotations

import re
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


MAX_TIME_SLICED = 32


def creatable_types(
    vf_type: int,
    vf_types: Iterable[int],
    capacities: Mapping[int, int],
    *,
    sizes: Mapping[int, int] | None = None,
    board_gb: int = 0,
    equal_sizes: Mapping[int, int | None] | None = None,
) -> list[int]:
    """Type ids a VF lists as creatable, given every VF's current type
    (``sizes``: framebuffer GB per type, in mixed-size mode only;
    ``equal_sizes``: the same, where known, in equal-size mode: a free VF
    then lists the types of the placed vGPUs' size, none of another)."""
    if vf_type:
        return []
    counts = Counter(t for t in vf_types if t)
    if sizes is None and counts and equal_sizes is not None:
        placed = {equal_sizes.get(t) for t in counts}
        if len(placed) == 1 and None not in placed:
            total = sum(counts.values())
            return [
                t
                for t, capacity in capacities.items()
                if equal_sizes.get(t) in placed and total < capacity
            ]
    if sizes is not None:
        free_gb = board_gb - sum(sizes[t] * n for t, n in counts.items())
        if sum(counts.values()) >= MAX_TIME_SLICED:
            return []
        return [
            t
            for t, capacity in capacities.items()
            if counts[t] < capacity and 0 < sizes[t] <= free_gb
        ]
    if counts:
        [(in_use, used)] = counts.most_common(1)
        return [in_use] if used < capacities.get(in_use, 0) else []
    return [t for t, capacity in capacities.items() if capacity > 0]


def gpu_room(
    type_id: str,
    description: str | None,
    on_gpu: list[str],
    descriptions: Mapping[str, str | None],
) -> int:
    """Room for ``type_id`` on a GPU whose VFs hold ``on_gpu`` (type
    ids; ``descriptions``: each type's): none while a vGPU of another
    framebuffer size is there, else its ``max_instance`` less every vGPU
    on the GPU."""
    size = framebuffer(description)
    if any(
        t != type_id
        and (size is None or framebuffer(descriptions.get(t)) != size)
        for t in on_gpu
    ):
        return 0
    found = re.search(r"max_instance=(\d+)", description or "")
    if found is None:
        return 0
    return max(0, int(found.group(1)) - len(on_gpu))


def framebuffer(description: str | None) -> str | None:
    """The ``framebuffer=`` a type's description gives, as written."""
    found = re.search(r"framebuffer=(\w+)", description or "")
    return None if found is None else found.group(1)
