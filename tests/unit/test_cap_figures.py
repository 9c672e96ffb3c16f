"""``max_instances`` in the plan's figures (pure): the cap counts what
Placement has allocated as well as what guests use, never lets a
provider offer more than its card lists, and a provider says the cap is
why it is full only when the cap, not the card, is what filled it.

The M10 of ``m10.json``: ``nvidia-36`` is listed on 85, 86 (two free
mdevs made) and 87, 16 to a GPU; the providers are spent in name order.
"""

from __future__ import annotations

from tests import helpers
from vgpu_driver.model.config import DeviceConfig, TypeConfig
from vgpu_driver.model.inventory import plan_providers

CAPPED = "[mdev_nvidia-36] max_instances is reached"


def _plans(cap, allocated=None):
    inventory = helpers.simulated_host("m10").discover()
    config = DeviceConfig(
        (TypeConfig("nvidia-36", "VGPU", (), cap, (), True, "mdev_nvidia-36"),)
    )
    plans = plan_providers(
        "cn", config, inventory, held={}, allocated=allocated
    )
    return {p.device: p for p in plans}


def _figures(plans):
    return {
        device: (p.total, p.reserved, p.reason) for device, p in plans.items()
    }


def test_a_cap_with_room_left_on_the_card_reserves_nothing():
    """The first GPU takes the whole cap of 4 and has 12 more it could
    offer: its 4 are schedulable and no reason is given (nothing of it
    is reserved)."""
    assert _figures(_plans(4)) == {"pci_0000_85_00_0": (4, 0, None)}


def test_units_allocated_in_placement_count_against_the_cap():
    """During a reshape the caller knows what Placement has allocated:
    three units on 87 with no guest defined yet (spawns in flight) leave
    one of the cap of 4 for the first GPU, and 87 keeps its three, full
    because of the cap."""
    allocated = {"cn_pci_0000_87_00_0": {"VGPU": 3}}
    assert _figures(_plans(4, allocated)) == {
        "pci_0000_85_00_0": (1, 0, None),
        "pci_0000_87_00_0": (3, 3, CAPPED),
    }


def test_a_card_full_below_the_cap_offers_no_more_than_it_lists():
    """87 full of allocations (16 of 16), the cap of 40 far from reached:
    its total stays 16, and nothing blames the cap (raising it would not
    help); the cap's rest goes to the other GPUs, no more than each
    lists."""
    allocated = {"cn_pci_0000_87_00_0": {"VGPU": 16}}
    found = _figures(_plans(40, allocated))
    assert found["pci_0000_87_00_0"] == (16, 0, None)
    assert found["pci_0000_85_00_0"] == (16, 0, None)
    # 86 lists 14 more beside its 2 free mdevs; the cap's last 8 go there
    assert found["pci_0000_86_00_0"] == (8, 0, None)
    assert sum(total for total, _r, _w in found.values()) == 40
