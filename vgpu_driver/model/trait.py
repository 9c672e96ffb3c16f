"""Capability traits of a device type.

Vendors describe a type in different ways; this module turns what is
known into standard os-traits names:

* NVIDIA writes its description as ``num_heads=4, frl_config=60,
  framebuffer=1024M, max_resolution=5120x2880, max_instance=24``;
* Intel GVT-g writes ``resolution: 1920x1200`` lines;
* where the driver gives no description, :data:`CATALOGUE` has the
  figures of the types in the specs this library grew from (the GRID K1
  and Intel GVT-g tables of Nova's Queens vGPU spec).

From the figures it derives ``HW_GPU_MAX_DISPLAY_HEADS_N`` and
``HW_GPU_RESOLUTION_WxH`` traits. Both are inclusive: a type gets every
head count up to its own and every listed resolution that fits within
its maximum, so a flavor asking for ``HW_GPU_RESOLUTION_W1920H1200``
lands on a 2560x1600 type.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from os_traits.hw.gpu import max_display_heads, resolution

from vgpu_driver.model.device import MdevType

RESOLUTION_RE = re.compile(r"(\d+)\s*x\s*(\d+)")
HEADS_PREFIX = "HW_GPU_MAX_DISPLAY_HEADS_"
RESOLUTION_PREFIX = "HW_GPU_RESOLUTION_"
TRAIT_RESOLUTION_RE = re.compile(r"^HW_GPU_RESOLUTION_W(\d+)H(\d+)$")


@dataclasses.dataclass(frozen=True)
class Capabilities:
    heads: int | None = None
    max_resolution: tuple[int, int] | None = None
    framebuffer_mb: int | None = None
    # vGPUs of the type one physical GPU holds (NVIDIA's max_instance)
    max_instance: int | None = None


NOTHING_KNOWN = Capabilities()

# Known types whose driver gives no description, keyed by type name (or,
# for i915, which names none, by type id). Figures from Nova's Queens
# vGPU spec: NVIDIA GRID K1 and Intel GVT-g on an Iris Pro P6300.
CATALOGUE: dict[str, Capabilities] = {
    "GRID K180Q": Capabilities(4, (2560, 1600), 4096),
    "GRID K160Q": Capabilities(4, (2560, 1600), 2048),
    "GRID K140Q": Capabilities(2, (2560, 1600), 1024),
    "GRID K120Q": Capabilities(2, (1920, 1200), 512),
    "GRID K100": Capabilities(2, (1920, 1200), 256),
    "i915-GVTg_V5_4": Capabilities(1, (1920, 1080), 128),
}


@functools.lru_cache(maxsize=1024)
def parse_description(text: str | None) -> Capabilities:
    """Figures from a vendor's type description (NVIDIA or i915 style).
    Remembered: the pGPUs of one model describe a type alike, and a plan
    is made again after every change on the host."""
    if not text:
        return NOTHING_KNOWN
    fields: dict[str, str] = {}
    for part in text.replace("\n", ",").split(","):
        key, sep, value = part.partition("=")
        if not sep:
            key, sep, value = part.partition(":")
        if sep:
            fields[key.strip().lower()] = value.strip()
    heads = _int(fields.get("num_heads"))
    resolution = None
    match = RESOLUTION_RE.search(
        fields.get("max_resolution") or fields.get("resolution") or ""
    )
    if match:
        resolution = (int(match.group(1)), int(match.group(2)))
    framebuffer = _int(
        (fields.get("framebuffer") or fields.get("low_gm_size") or "")
        .rstrip("MmBb")
        .strip()
    )
    max_instance = _int(fields.get("max_instance"))
    if (heads, resolution, framebuffer, max_instance) == (None,) * 4:
        return NOTHING_KNOWN
    return Capabilities(heads, resolution, framebuffer, max_instance)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def capabilities_of(mdev_type: MdevType) -> Capabilities:
    found = parse_description(mdev_type.description)
    if found is not NOTHING_KNOWN:
        return found
    key = mdev_type.name or mdev_type.id
    return CATALOGUE.get(key, CATALOGUE.get(mdev_type.id, NOTHING_KNOWN))


# os-traits' module of each prefix: it names each of its short names
# (``W1920H1200``) after the whole trait. Its get_traits, or a scan of
# every trait it has, walks all 400 names: about 0.1 ms a prefix at a
# restarted service's first refresh.
_PREFIX_MODULES = {
    HEADS_PREFIX: max_display_heads,
    RESOLUTION_PREFIX: resolution,
}


@functools.cache
def _standard_traits(prefix: str) -> tuple[str, ...]:
    """os-traits' traits of one of the capability prefixes."""
    module = _PREFIX_MODULES[prefix]
    return tuple(str(getattr(module, short)) for short in module.TRAITS)


@functools.cache
def capability_traits(capabilities: Capabilities) -> frozenset[str]:
    traits: set[str] = set()
    if capabilities.heads:
        for trait in _standard_traits(HEADS_PREFIX):
            if int(trait.removeprefix(HEADS_PREFIX)) <= capabilities.heads:
                traits.add(trait)
    if capabilities.max_resolution:
        max_w, max_h = capabilities.max_resolution
        for trait in _standard_traits(RESOLUTION_PREFIX):
            match = TRAIT_RESOLUTION_RE.match(trait)
            if (
                match
                and int(match.group(1)) <= max_w
                and (int(match.group(2)) <= max_h)
            ):
                traits.add(trait)
    return frozenset(traits)


def is_capability_trait(name: str) -> bool:
    return name.startswith((HEADS_PREFIX, RESOLUTION_PREFIX))
