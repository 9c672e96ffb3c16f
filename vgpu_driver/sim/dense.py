"""Generated hosts for benchmarks and scale tests."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any


def dense_raw(
    parents: int, mdevs: int, guests: int, *, type_id: str = "nvidia-35"
) -> dict[str, Any]:
    """A dense NVIDIA host: ``parents`` pGPUs with ``mdevs`` mdevs spread
    evenly, the first ``guests`` of them each in use by one guest.

    Synthetic, for scale: its pGPUs are Tesla M10s whose type is named
    as the real nvidia-35 (GRID M10-0B), but each holds as many as the
    benchmark asks (at least 16, the real figure), which no M10 does."""
    per_parent = -(-mdevs // parents) if parents else 0
    capacity = max(per_parent + 4, 16)
    addresses = [
        f"0000:{0x10 + i // 4:02x}:{(i % 4) * 2:02x}.0" for i in range(parents)
    ]
    ns = uuidlib.UUID("6c0c8e5a-0a7e-4b9e-9d7a-7d1f2b0c4a11")
    raw_mdevs = []
    for i in range(mdevs):
        raw_mdevs.append(
            {
                "uuid": str(uuidlib.uuid5(ns, f"mdev-{i}")),
                "parent": addresses[i % parents],
                "type": type_id,
            }
        )
    raw_guests = [
        {
            "uuid": str(uuidlib.uuid5(ns, f"guest-{i}")),
            "name": f"instance-{i:08x}",
            "mdevs": [raw_mdevs[i]["uuid"]] if i < mdevs else [],
        }
        for i in range(guests)
    ]
    return {
        "summary": f"Dense host: {parents} pGPUs, {mdevs} mdevs, "
        f"{guests} guests (synthetic: more per pGPU than an M10 holds)",
        "hostname": "dense1",
        "config": ["[devices]", f"enabled_mdev_types = {type_id}"],
        "parents": [
            {
                "kind": "pci",
                "address": address,
                "vendor_id": "0x10de",
                "vendor": "NVIDIA Corporation",
                "product_id": "0x13bd",
                "product": "GM107GL [Tesla M10]",
                "driver": "nvidia",
                "numa_node": i % 2,
                "types": [
                    {
                        "id": type_id,
                        "name": "GRID M10-0B",
                        "capacity": capacity,
                        "description": "num_heads=2, frl_config=45, "
                        "framebuffer=512M, max_resolution=2560x1600, "
                        f"max_instance={capacity}",
                    }
                ],
            }
            for i, address in enumerate(addresses)
        ],
        "mdevs": raw_mdevs,
        "guests": raw_guests,
    }
