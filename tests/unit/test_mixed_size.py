"""An NVIDIA SR-IOV card in mixed-size mode serves several enabled types,
a provider each: the first type's provider is named after the card, the
others ``<card>__<type>``, siblings under the compute node (none holds
another's allocations, none is orphaned when another is dropped). Each
total is what is placed of the type plus what still fits beside what is
placed. The host is ``rtx6000-nvml``: an RTX PRO 6000 (96 GB) with the
figures of a captured ``nvidia-smi vgpu -s -v`` (DC-4Q: 24, DC-48Q: 2).
"""

from __future__ import annotations

import pytest

from tests import helpers
from vgpu_driver.exception import DeviceCapacityExhausted
from vgpu_driver.model import check
from vgpu_driver.sim.simulated import SimulatedHost

CARD = "pci_0001_c8_00_0"
SECOND = f"{CARD}__nvidia-1540"
CONFIG = """
[devices]
enabled_mdev_types = nvidia-1521, nvidia-1540
[mdev_nvidia-1521]
device_addresses = 0001:c8:00.0
[mdev_nvidia-1540]
device_addresses = 0001:c8:00.0
mdev_class = CUSTOM_DC_48Q
"""


@pytest.fixture
def card(make_conf, tmp_path):
    host = SimulatedHost(helpers.load("rtx6000-nvml"))
    for pf in host._state.pfs:
        pf.vf_types.clear()
        pf.mixed_size = True  # nvidia-smi vgpu -shm 1
    host._state.guests.clear()
    return helpers.Node(make_conf, tmp_path, "rtx6000-nvml", CONFIG, host)


def totals(node):
    return {
        name: (p.total, p.resource_class)
        for name, p in (
            (p.name.removeprefix("node1_"), p)
            for p in node.driver.update_provider_tree(node.tree, "node1")
        )
    }


def test_each_type_a_provider_with_what_fits(card):
    assert totals(card) == {
        CARD: (24, "VGPU"),
        SECOND: (2, "CUSTOM_DC_48Q"),
    }
    root = card.tree.data("node1").uuid
    for name in (CARD, SECOND):  # siblings under the compute node
        assert card.tree.data(f"node1_{name}").parent_uuid == root
    assert "CUSTOM_NVIDIA_1540" in card.tree.data(f"node1_{SECOND}").traits


def test_a_bind_of_the_second_type_shrinks_the_first(card):
    rp = card.tree.data(f"node1_{SECOND}").uuid
    [vf] = card.driver.allocate_mdevs(
        "i1", {rp: {"resources": {"CUSTOM_DC_48Q": 1}}}
    )
    assert (vf.kind, vf.type_id, vf.parent) == ("vf", "nvidia-1540", CARD)
    # 48 GB placed: 48 GB left, 12 x DC-4Q (not 24), 1 more DC-48Q
    assert totals(card) == {
        CARD: (12, "VGPU"),
        SECOND: (2, "CUSTOM_DC_48Q"),
    }


def test_a_bind_that_no_longer_fits_fails_before_the_host_changes(card):
    """Two schedulers' picks within one refresh: the second DC-48Q fits,
    a third finds no VF that takes it and writes nothing."""
    rp = card.tree.data(f"node1_{SECOND}").uuid
    wanted = {rp: {"resources": {"CUSTOM_DC_48Q": 1}}}
    card.driver.allocate_mdevs("i1", wanted)
    card.driver.allocate_mdevs("i2", wanted)
    before = card.host.discover()
    with pytest.raises(DeviceCapacityExhausted):
        card.driver.allocate_mdevs("i3", wanted)
    assert card.host.discover() == before
    # a full card is not a failing one: its providers are not reserved
    # for a failure, and the first type's has nothing left to offer
    found = {
        p.name.removeprefix("node1_"): p
        for p in card.driver.update_provider_tree(card.tree, "node1")
    }
    assert CARD not in found  # nothing of DC-4Q fits, none in use
    assert (found[SECOND].total, found[SECOND].reserved) == (2, 0)


def test_an_mdev_parent_named_for_two_types_serves_the_first():
    from tests.unit.test_capacity import enabled
    from vgpu_driver.model.config import DeviceConfig

    inventory = helpers.simulated_host("demo").discover()
    a = enabled("nvidia-35", addresses=("0000:84:00.0",)).types[0]
    b = enabled("nvidia-36", addresses=("0000:84:00.0",)).types[0]
    config = DeviceConfig((a, b))
    [problem] = [
        p
        for p in check.host_problems(config, inventory)
        if "serves one" in str(p)
    ]
    assert problem.severity == "error" and "nvidia-35" in str(problem)
    from vgpu_driver.model.inventory import plan_providers

    plans = plan_providers("cn", config, inventory, held={})
    assert {p.type_id for p in plans if p.device == "pci_0000_84_00_0"} == {
        "nvidia-35"
    }


def test_the_host_adapter_refuses_a_type_the_vf_no_longer_lists(tmp_path):
    """Read through sysfs: a VF whose creatable list lacks the type is
    not written (DeviceNoRoom: a full card, not a failing one)."""
    from vgpu_driver.exception import DeviceNoRoom
    from vgpu_driver.host.sysfs import SysfsTree

    _uri, sysfs = helpers.hostdesc.materialize(
        helpers.load("l40-sriov"), tmp_path
    )
    vf = sysfs / "bus/pci/devices/0000:41:04.3/nvidia"
    (vf / "creatable_vgpu_types").write_text("ID    : vGPU Name\n")
    with pytest.raises(DeviceNoRoom, match="creatable"):
        SysfsTree(str(sysfs)).set_vf_type("0000:41:04.3", 1157)
    assert (vf / "current_vgpu_type").read_text().strip() == "0"


@pytest.mark.parametrize(
    ("short", "found"),
    [
        ("pci_0001_c8_00_0", ("pci_0001_c8_00_0", None)),
        ("pci_0001_c8_00_0__nvidia-1540", ("pci_0001_c8_00_0", "nvidia-1540")),
        ("mtty__mtty-2", ("mtty", "mtty-2")),
    ],
)
def test_a_provider_name_says_its_device_and_type(short, found):
    """What audit and the kept-while-in-use rule read back from a
    provider's name (the type's own providers count as the device's)."""
    from vgpu_driver.model import naming

    assert naming.provider_device(short) == found
    device, type_id = found
    if type_id:
        assert naming.type_provider_name("n", device, type_id) == f"n_{short}"


def test_a_type_dropped_while_in_use_is_kept_on_its_own_provider(card):
    """DC-48Q (both types in VGPU here) removed from the configuration
    while a guest's VF has it: its provider stays, reserved, holding that
    one; the card's own provider goes on offering DC-4Q beside it."""
    card.conf.set_override("mdev_class", "VGPU", "mdev_nvidia-1540")
    card.driver.reload_config()
    card.update()
    rp = card.tree.data(f"node1_{SECOND}").uuid
    card.driver.allocate_mdevs("i1", {rp: {"resources": {"VGPU": 1}}})
    card.conf.set_override("enabled_mdev_types", ["nvidia-1521"], "devices")
    card.driver.reload_config()
    found = {
        p.name.removeprefix("node1_"): (p.total, p.reserved, p.type_id)
        for p in card.driver.update_provider_tree(card.tree, "node1")
    }
    assert found == {
        CARD: (12, 0, "nvidia-1521"),
        SECOND: (1, 1, "nvidia-1540"),
    }
