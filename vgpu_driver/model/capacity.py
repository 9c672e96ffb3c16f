"""How many vGPUs of a type an NVIDIA SR-IOV card can really hold.

A VF lists a type in ``creatable_vgpu_types`` while at least one more
vGPU of it fits on the card; it never says how many. Counting the VFs
that list a type overstates it: an RTX PRO 6000 Blackwell has 48 VFs but
holds at most 24 DC-4Q. So the room left for a type is the smallest of:

* the VFs that list it (the driver's own word that each could take it);
* the framebuffer still free on the board over the type's size: the
  board's framebuffer (:data:`BOARDS`) less what the vGPUs already placed
  hold, whatever their type, so a card in mixed-size mode (vGPU 17+,
  several sizes on one GPU) is counted right;
* the time-sliced vGPUs the GPU can still run (:data:`MAX_TIME_SLICED`,
  NVIDIA's per-GPU maximum, less the vGPUs placed).

Where the library cannot know, it promises what it can prove and says
why (:class:`Room`.``why``):

* a board not in the table, or a placed vGPU whose type it cannot size:
  one more than in use (a VF listing the type proves that much), unless
  the operator vouches with ``max_instances``;
* a MIG-backed type (``A100D-1-10C``, ``DC-2-24Q``): its room is the GPU
  instances of its profile that are free, which only NVML shows, never
  the framebuffer over the type's size; without NVML, one more than in
  use.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import Counter
from collections.abc import Collection

from vgpu_driver.model import naming, nvml
from vgpu_driver.model.counting import tally
from vgpu_driver.model.device import PhysicalFunction

# Time-sliced vGPUs one physical GPU runs at most, whatever its VF count
# or framebuffer (NVIDIA vGPU type tables, "Maximum vGPUs per GPU": 32
# for the 1 GB and 2 GB types of 48 GB and 96 GB boards, e.g. L40-1B,
# A40-1Q, RTX PRO 6000 Blackwell DC-2B).
MAX_TIME_SLICED = 32


@dataclasses.dataclass(frozen=True)
class Board:
    name: str
    framebuffer_gb: int  # per physical GPU


# NVIDIA boards whose vGPUs are SR-IOV VFs, by PCI product id, with the
# framebuffer of one physical GPU. Ids from the public PCI ID database;
# sizes from NVIDIA's vGPU type tables (the largest 1:1 type).
BOARDS: dict[str, Board] = {
    "0x2bb5": Board("RTX PRO 6000 Blackwell Server Edition", 96),
    "0x2329": Board("H20", 96),
    "0x233b": Board("H200 NVL", 141),
    "0x2321": Board("H100 NVL", 94),
    "0x2331": Board("H100 PCIe", 80),
    "0x26b5": Board("L40", 48),
    "0x26b9": Board("L40S", 48),
    "0x26ba": Board("L20", 48),
    "0x26b1": Board("RTX 6000 Ada", 48),
    "0x27b8": Board("L4", 24),
    "0x2230": Board("RTX A6000", 48),
    "0x2235": Board("A40", 48),
    "0x2236": Board("A10", 24),
    "0x20b7": Board("A30", 24),
    "0x20f1": Board("A100 PCIe 40GB", 40),
    "0x20b5": Board("A100 PCIe 80GB", 80),
    "0x25b6": Board("A16 / A2 (per GPU)", 16),
}

# ``NVIDIA L40-4Q`` / ``NVIDIA RTX Pro 6000 Blackwell DC-4Q``: 4 GB,
# time-sliced; ``NVIDIA A100D-1-10C`` / ``... DC-2-24Q``: MIG-backed
# (slices-framebuffer).
_TYPE_RE = re.compile(r"-(?:(?P<slices>\d+)-)?(?P<gb>\d+)[A-Z]+$")


@dataclasses.dataclass(frozen=True)
class TypeSize:
    framebuffer_gb: int
    mig_backed: bool


@functools.lru_cache(maxsize=1024)
def type_size(name: str) -> TypeSize | None:
    """The framebuffer of an NVIDIA type from its name, if it says
    (a host has a few dozen type names, asked for per VF and per pass:
    each is parsed once)."""
    match = _TYPE_RE.search(name.strip())
    if match is None or int(match.group("gb")) == 0:
        return None
    return TypeSize(int(match.group("gb")), match.group("slices") is not None)


@dataclasses.dataclass(frozen=True)
class Room:
    room: int  # more devices of the type that fit
    why: str | None = None  # why room is less than the VFs listing it


def board_of(product_id: str | None) -> Board | None:
    return BOARDS.get((product_id or "").lower())


def sriov_room(
    pf: PhysicalFunction,
    vouched: Collection[str] = (),
    gpu: nvml.NvmlGpu | None = None,
) -> tuple[Counter[str], dict[str, str]]:
    """Room per type id on a card, and why it is less than its VFs offer.

    ``vouched``: type ids the operator capped with ``max_instances`` (on
    a board this table cannot size, their word stands in for NVIDIA's
    figure; the host-wide cap still applies). ``gpu``: what NVML says of
    the card, when present: its word replaces the table's."""
    listing = tally(t.type_id for vf in pf.vfs for t in vf.creatable)
    placed = tally(vf.current_type for vf in pf.vfs if vf.current_type)
    if gpu is not None:
        return _nvml_room(gpu, listing, placed)
    names = {t.type_id: t.name for t in pf.known_types()}
    board = board_of(pf.product_id)
    free_gb: int | str | None = None
    if board is not None:
        free_gb = _free_framebuffer(board, placed, names)
    slots = MAX_TIME_SLICED - sum(placed.values())
    rooms: Counter[str] = Counter()
    notes: dict[str, str] = {}
    for type_id, offered in listing.items():
        found = _room(
            pf,
            board,
            names.get(type_id, ""),
            free_gb,
            slots,
            type_id in vouched,
        )
        rooms[type_id] = min(offered, found.room)
        if found.why and found.room < offered:
            notes[type_id] = found.why
    return rooms, notes


def _free_framebuffer(
    board: Board, placed: Counter[int], names: dict[str, str]
) -> int | str:
    """The GB of ``board`` the ``placed`` vGPUs leave free, or, where a
    placed one's name gives no size (what is free is then unknown),
    which type that is."""
    free_gb = board.framebuffer_gb
    for number, count in placed.items():
        type_id = naming.sriov_type_id(number)
        name = names.get(type_id)
        size = type_size(name or "")
        if size is None:
            return (
                f"{type_id} ({name!r} gives no framebuffer)"
                if name
                else f"{type_id} (no VF lists it, nor did one before)"
            )
        free_gb -= size.framebuffer_gb * count
    return free_gb


def _nvml_room(
    gpu: nvml.NvmlGpu, listing: Counter[str], placed: Counter[int]
) -> tuple[Counter[str], dict[str, str]]:
    """The table's rule with NVML's word for the room (``listing``: VFs
    that list each type; ``placed``: vGPUs by type number)."""
    rooms: Counter[str] = Counter()
    notes: dict[str, str] = {}
    for type_id, offered in listing.items():
        found, why = nvml.room(gpu, naming.sriov_type_number(type_id), placed)
        rooms[type_id] = min(offered, found)
        if why and found < offered:
            notes[type_id] = why
    return rooms, notes


def _room(
    pf: PhysicalFunction,
    board: Board | None,
    name: str,
    free_gb: int | str | None,
    slots: int,
    vouched: bool,
) -> Room:
    size = type_size(name)
    if size is not None and size.mig_backed:
        return Room(
            1,
            f"{name!r} is MIG-backed: its room is the free GPU instances "
            "of its profile, which only NVML shows; offering one more "
            "than in use at a time",
        )
    if board is None:
        if vouched:
            return Room(max(0, slots))
        return Room(
            1,
            f"board {pf.vendor_id or '?'}:{pf.product_id or '?'} is not in "
            "the library's table, so how many fit is unknown; offering one "
            "more than in use at a time. Set max_instances of this type "
            "to NVIDIA's 'maximum vGPUs per GPU' for this board to offer "
            "that many",
        )
    if size is None:
        return Room(
            1,
            f"the framebuffer of {name or 'this vGPU type'!r} is not in "
            "its name, so how many fit is unknown; offering one more than "
            "in use at a time",
        )
    if isinstance(free_gb, str):  # a placed type the name cannot size
        return Room(
            1,
            f"a VF holds {free_gb}, so the framebuffer left free is "
            "unknown; offering one more than in use at a time",
        )
    assert free_gb is not None  # a board in the table
    return Room(max(0, min(free_gb // size.framebuffer_gb, slots)))


def gpu_room(
    gpu: str, type_id: str, in_use: int, max_instance: int | None
) -> tuple[int, str | None]:
    """The room a GPU whose VFs are the mdev parents (NVIDIA Ampere before
    kernel 6.8: one vGPU per VF) has left for a type: its VFs together
    hold the type's ``max_instance`` (the description says it: proven,
    nothing to say). Unknown max_instance: one more than ``in_use``, and
    why."""
    if max_instance is not None:
        return max(0, max_instance - in_use), None
    return 1, (
        f"the VFs of GPU {gpu} are its mdev parents and {type_id}'s "
        "description gives no max_instance, so what the GPU holds is "
        "unknown; offering one more than in use at a time"
    )


def card_max(
    pf: PhysicalFunction, gpu: nvml.NvmlGpu | None = None
) -> dict[str, int]:
    """Type id -> how many vGPUs of it the card holds when empty, for
    the time-sliced types whose figure is known (NVML's ``Max
    Instances``, else the board table and the type's size): what a
    ``card_share`` is a share of. MIG-backed types are not there (their
    room is their GPU instances)."""
    found: dict[str, int] = {}
    if gpu is not None:
        for said in gpu.types:
            if said.gi_profile is None:
                found[naming.sriov_type_id(said.type_id)] = said.max_instances
        return found
    board = board_of(pf.product_id)
    if board is None:
        return found
    for known in pf.known_types():
        size = type_size(known.name or "")
        if size is not None and not size.mig_backed:
            found[known.type_id] = min(
                board.framebuffer_gb // size.framebuffer_gb, MAX_TIME_SLICED
            )
    return found
