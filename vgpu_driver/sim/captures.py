"""Real ``nvidia-smi`` output that shipped simulated hosts are built from.

The files are in ``data/captures``. Each names its source in its opening
``#`` lines. A host description points at one of them, and this module
parses the figures the simulated host's NVML then answers with. So the
figures are the tool's own output, never transcribed by hand:

* ``nvidia-smi vgpu -s -v``: each vGPU type's id, name, framebuffer,
  ``Max Instances`` and GPU instance profile (MIG-backed types);
* ``nvidia-smi mig -cgi ...``: the GPU instances created, with their
  profiles;
* a free VF's ``nvidia/creatable_vgpu_types`` (vendor VFIO cards): the
  card's type ids and names, which its description must give as they
  are, in the same order.
"""

from __future__ import annotations

import dataclasses
import re
from importlib import resources
from typing import Any

from vgpu_driver.sim.specs import PfSpec, TypeSpec

SHIPPED = "vgpu_driver.sim"

_CREATABLE = re.compile(r"^(\d+) +: (.+)$", re.MULTILINE)
_TYPE_FILE = re.compile(
    r"^([\w.-]+)/(available_instances|description|device_api|name):(.*)$",
    re.MULTILINE,
)
_INSTANCE = re.compile(
    r"created GPU instance ID\s+(\d+) on GPU\s+\d+ using profile .*"
    r"\(ID\s+(\d+)\)"
)


@dataclasses.dataclass(frozen=True)
class CapturedType:
    id: int
    name: str
    max_instances: int
    framebuffer_mib: int
    gi_profile: int | None


def read(name: str) -> str:
    """A shipped capture by its file name."""
    path = resources.files(SHIPPED) / "data" / "captures" / name
    return path.read_text()


def vgpu_types(text: str) -> list[CapturedType]:
    """The types of ``nvidia-smi vgpu -s -v``, in the order printed."""
    blocks: list[dict[str, str]] = []
    for line in text.splitlines():
        if line.lstrip().startswith("#") or " : " not in line:
            continue
        key, value = (part.strip() for part in line.split(" : ", 1))
        if key == "vGPU Type ID":
            blocks.append({})
        if blocks:
            blocks[-1].setdefault(key, value)
    found = []
    for block in blocks:
        profile = block.get("GPU Instance Profile ID", "N/A")
        found.append(
            CapturedType(
                id=int(block["vGPU Type ID"], 16),
                name=block["Name"],
                max_instances=int(block["Max Instances"]),
                framebuffer_mib=int(block["FB Memory"].split()[0]),
                gi_profile=None if profile == "N/A" else int(profile),
            )
        )
    return found


def gpu_instances(text: str) -> list[tuple[int, int]]:
    """(GPU instance id, profile id) of each instance ``nvidia-smi mig
    -cgi`` reports created, in the order reported."""
    return [
        (int(m.group(1)), int(m.group(2))) for m in _INSTANCE.finditer(text)
    ]


def creatable(text: str) -> list[tuple[int, str]]:
    """(id, name) of each type a ``creatable_vgpu_types`` lists, in its
    order (the ``ID    : vGPU Name`` header is not one)."""
    return [(int(i), name) for i, name in _CREATABLE.findall(text)]


def mdev_types(text: str) -> dict[str, dict[str, str]]:
    """Type id -> {file: its text} of a ``grep -r .`` listing of a
    parent's ``mdev_supported_types``, in the listing's order."""
    found: dict[str, dict[str, str]] = {}
    for type_id, name, value in _TYPE_FILE.findall(text):
        found.setdefault(type_id, {})[name] = value
    return found


def parent_types(
    entry: dict[str, Any], where: str, bad: Any
) -> list[TypeSpec]:
    """The types of a parent whose description names a capture of its
    ``mdev_supported_types`` (``types_from``), each with room for
    ``type_capacity`` on the parent, as the capture names and describes
    them."""
    if "types" in entry:
        raise bad(f"{where}: give its types or types_from, not both")
    if not isinstance(entry.get("type_capacity"), int):
        raise bad(f"{where}: types_from needs type_capacity (an integer)")
    listed = mdev_types(_shipped(entry["types_from"], bad))
    if not listed:
        raise bad(
            f"{where}: its capture {entry['types_from']!r} lists no type"
        )
    return [
        TypeSpec(
            id=type_id,
            capacity=entry["type_capacity"],
            name=files.get("name"),
            device_api=files.get("device_api", "vfio-pci"),
            description=files.get("description"),
        )
        for type_id, files in listed.items()
    ]


def apply(pf: PfSpec, entry: dict[str, Any], bad: Any) -> None:
    """Fill a card from the captures its description names:
    ``nvml_types_from`` (each listed type's Max Instances, framebuffer
    and GPU instance profile, as NVML gives them) and
    ``gpu_instances_from`` (the MIG GPU instances that exist); and hold
    its types to ``creatable_from`` (a free VF's listing)."""
    name = entry.get("creatable_from")
    if name:
        listed = creatable(_shipped(name, bad))
        described = [(t.id, t.name) for t in pf.types]
        if described != listed:
            raise bad(
                f"card {pf.address}: its types {described} are not those "
                f"its capture {name!r} lists ({listed}); give them as the "
                "capture has them"
            )
    name = entry.get("nvml_types_from")
    if name:
        captured = {t.id: t for t in vgpu_types(_shipped(name, bad))}
        for spec in pf.types:
            found = captured.get(spec.id)
            if found is None:
                continue
            spec.nvml_max_instances = found.max_instances
            spec.gi_profile = found.gi_profile
            spec.framebuffer_gb = found.framebuffer_mib // 1024
    name = entry.get("gpu_instances_from")
    if name:
        pf.gpu_instances = gpu_instances(_shipped(name, bad))


def _shipped(name: Any, bad: Any) -> str:
    try:
        return read(str(name))
    except (OSError, ValueError) as exc:
        raise bad(
            f"capture {name!r} is not a shipped capture (data/captures): {exc}"
        ) from exc
