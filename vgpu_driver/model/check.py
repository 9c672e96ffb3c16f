"""Checks of the configuration against what the host has."""

from __future__ import annotations

from vgpu_driver.model import naming
from vgpu_driver.model.config import DeviceConfig, Problem
from vgpu_driver.model.device import HostInventory


def unknown_addresses(
    config: DeviceConfig, inventory: HostInventory
) -> list[Problem]:
    """``device_addresses`` entries that are not mdev parents of this host
    (the spec's "fat-fingered PCI ID")."""
    present = inventory.addresses()
    # a VF's address -> its physical GPU's (as Nova's docs have operators
    # list VFs for SR-IOV vGPUs; here the physical GPU is listed)
    pf_of = {vf.address: pf.address for pf in inventory.pfs for vf in pf.vfs}
    problems = []
    for type_cfg in config.types:
        for address in type_cfg.addresses:
            if address in present:
                continue
            if address in pf_of:
                reason = (
                    f"is a VF of the SR-IOV GPU {pf_of[address]}: list the "
                    f"GPU's own address ({pf_of[address]}), and the library "
                    "gives its VFs the type"
                )
            else:
                reason = (
                    "no mdev-capable device or SR-IOV GPU with this "
                    "address is on the host; check the address with "
                    "'vgpu-driver discover'"
                )
            problems.append(
                Problem(type_cfg.group, "device_addresses", address, reason)
            )
    return problems


def host_problems(
    config: DeviceConfig, inventory: HostInventory
) -> list[Problem]:
    """Everything in the configuration the host contradicts: unknown
    addresses, types no device offers, types mapped to a parent that does
    not offer them."""
    problems = unknown_addresses(config, inventory)
    offered: dict[str, tuple[str, ...]] = {}
    for parent in inventory.parents:
        for key in parent.keys:
            offered[key] = parent.type_ids
    for pf in inventory.pfs:
        # the types its VFs list, and those they hold (a card full of
        # one type lists nothing, yet offers it)
        types = tuple(
            dict.fromkeys(
                [
                    *(t.type_id for t in pf.known_types()),
                    *(
                        naming.sriov_type_id(vf.current_type)
                        for vf in pf.vfs
                        if vf.current_type
                    ),
                ]
            )
        )
        for key in pf.keys:
            offered[key] = types
    for gpu in inventory.plain_gpus:  # its VFs, given as they are
        for key in gpu.keys:
            offered[key] = (gpu.type_id,)
    everywhere = sorted({t for types in offered.values() for t in types})
    disabled = {
        k: pf.address for pf in inventory.pfs if not pf.vfs for k in pf.keys
    }
    for type_cfg in config.types:
        for address in type_cfg.addresses:
            if address in disabled:
                problems.append(
                    _sriov_disabled(type_cfg.group, address, disabled)
                )
    problems += _vf_parent_addresses(config, inventory)
    problems += _parents_named_twice(config, inventory)
    problems += _shares_over_the_card(config, inventory)
    for type_cfg in config.types:
        if type_cfg.type_id not in everywhere:
            problems.append(
                Problem(
                    "devices",
                    "enabled_mdev_types",
                    type_cfg.type_id,
                    "no device on this host offers this type; the host "
                    "offers " + (", ".join(everywhere) or "no mdev type"),
                    "warning",
                )
            )
        # a device named for it that offers something else is an error
        # either way: that device would serve nothing
        for address in type_cfg.addresses:
            here = offered.get(address)
            if address in disabled:
                continue  # told above
            if here is not None and type_cfg.type_id not in here:
                problems.append(
                    Problem(
                        type_cfg.group,
                        "device_addresses",
                        address,
                        f"this device does not offer {type_cfg.type_id}; "
                        "it offers " + (", ".join(here) or "nothing"),
                    )
                )
    return problems


def _sriov_disabled(
    group: str, address: str, disabled: dict[str, str]
) -> Problem:
    command = f"/usr/lib/nvidia/sriov-manage -e {disabled[address]}"
    return Problem(
        group,
        "device_addresses",
        address,
        "this SR-IOV GPU has no VF enabled (sriov_numvfs is 0), so it "
        f"offers no vGPU: enable its VFs ('{command}' with NVIDIA's vGPU "
        "manager), then restart the service",
    )


def _vf_parent_addresses(
    config: DeviceConfig, inventory: HostInventory
) -> list[Problem]:
    """A VF listed where a GPU's VFs are its mdev parents: the GPU is one
    provider, so the entry means the whole GPU (a warning that says so
    and which address to write)."""
    gpu_of = {
        p.address: p.physical_function
        for p in inventory.parents
        if p.address and p.physical_function
    }
    return [
        Problem(
            type_cfg.group,
            "device_addresses",
            address,
            f"is a VF of GPU {gpu_of[address]}, whose VFs are one provider: "
            f"the whole GPU serves {type_cfg.type_id}; list the GPU's "
            f"address ({gpu_of[address]}) to say so",
            "warning",
        )
        for type_cfg in config.types
        for address in type_cfg.addresses
        if address in gpu_of
    ]


def _parents_named_twice(
    config: DeviceConfig, inventory: HostInventory
) -> list[Problem]:
    """An mdev parent named for several types serves the first alone
    (one type per pGPU, as Nova has it); only an NVIDIA SR-IOV card in
    mixed-size mode serves several."""
    problems = []
    for parent in inventory.parents:
        named = [
            t for t in config.types if set(parent.keys) & set(t.addresses)
        ]
        for extra in named[1:]:
            problems.append(
                Problem(
                    extra.group,
                    "device_addresses",
                    parent.address or parent.name,
                    f"this mdev parent serves one type, {named[0].type_id} "
                    f"(listed first); only an NVIDIA SR-IOV card in "
                    "mixed-size mode serves several: remove it here",
                )
            )
    return problems


def _shares_over_the_card(
    config: DeviceConfig, inventory: HostInventory
) -> list[Problem]:
    """``card_share`` set on a card's types, adding up to more than 100
    (an unset share counts as 100): two schedulers' picks can together
    exceed the card (a warning: the second is refused at spawn)."""
    problems = []
    for pf in inventory.pfs:
        named = [t for t in config.types if set(pf.keys) & set(t.addresses)]
        if len(named) < 2 or not any(t.card_share for t in named):
            continue
        total = sum(t.card_share or 100 for t in named)
        if total > 100:
            problems.append(
                Problem(
                    named[0].group,
                    "card_share",
                    pf.address,
                    f"the shares of the types this card serves "
                    f"({', '.join(t.type_id for t in named)}) add up to "
                    f"{total}% (unset counts as 100): picks of several "
                    "types within one refresh can exceed the card; set "
                    "shares adding up to 100 or less",
                    "warning",
                )
            )
    return problems
