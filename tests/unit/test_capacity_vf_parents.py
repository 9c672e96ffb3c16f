"""What a GPU whose VFs are mdev parents can hold (an A2 with 16 VF
parents, each with room for one vGPU): one provider per GPU of what
the GPU holds, the GPU's address naming its VFs in the configuration,
and the reasons a provider offers less, as the tools say them."""

from __future__ import annotations

import dataclasses
import uuid

from tests import helpers
from tests.capacity_helpers import enabled
from vgpu_driver.model.inventory import plan_providers
from vgpu_driver.sim import description as hostdesc

A2_GPU = "0000:08:00.0"


def a2_totals(inventory, **kwargs):
    plans = plan_providers(
        "cn",
        enabled("nvidia-746", **kwargs),
        inventory,
        held={"pci_0000_08_00_4": {"nvidia-746": 1}},
    )
    return plans


def test_the_vfs_of_one_gpu_are_one_provider_of_what_the_gpu_holds():
    """An A2 (16 VFs, each an mdev parent of one vGPU) with one A2-4Q in
    use on a VF: one provider, named after the GPU as the seeds' pGPU
    model has it, of the type description's max_instance=4, not 16."""
    inventory = helpers.simulated_host("a2-vf-parents").discover()
    assert len(inventory.parents) == 16
    [plan] = a2_totals(inventory)
    assert (plan.name, plan.device) == (
        "cn_pci_0000_08_00_0",
        "pci_0000_08_00_0",
    )
    assert (plan.total, plan.reserved) == (4, 0)
    assert plan.limit is None  # max_instance is proven: nothing to say


def test_the_simulated_kernel_refuses_a_fifth_as_the_driver_does():
    host = helpers.simulated_host("a2-vf-parents")
    for name in [p.name for p in host.discover().parents]:
        parent = host.discover().parent(name)
        if parent.type("nvidia-746").available:
            host.create_mdev(parent, "nvidia-746", str(uuid.uuid4()))
    inventory = host.discover()
    assert sum(1 for m in inventory.mdevs if m.type_id == "nvidia-746") == 4
    assert not any(p.type("nvidia-746").available for p in inventory.parents)


def test_the_gpu_address_in_device_addresses_means_its_vfs():
    from vgpu_driver.model import check

    inventory = helpers.simulated_host("a2-vf-parents").discover()
    config = enabled("nvidia-746", addresses=(A2_GPU,))
    assert check.host_problems(config, inventory) == []
    plans = plan_providers("cn", config, inventory, held={})
    assert sum(p.total for p in plans) == 4


def test_without_max_instance_the_gpu_offers_one_more_and_says_why():
    inventory = helpers.simulated_host("a2-vf-parents").discover()
    stripped = dataclasses.replace(
        inventory,
        parents=tuple(
            dataclasses.replace(
                p,
                types=tuple(
                    dataclasses.replace(t, description=None) for t in p.types
                ),
            )
            for p in inventory.parents
        ),
    )
    plans = a2_totals(stripped)
    assert sum(p.total for p in plans) == 2  # the one in use + one
    assert any(p.limit and "no max_instance" in p.limit for p in plans)


def test_through_libvirt_the_vfs_are_known_as_one_gpu_s(tmp_path):
    """libvirt's test driver reports each VF's phys_function; both
    parsers read it."""
    from vgpu_driver.host import nodedev_xml

    host = helpers.libvirt_host(helpers.load("a2-vf-parents"), tmp_path)
    inventory = host.discover()
    assert {p.physical_function for p in inventory.parents} == {A2_GPU}
    xml = (
        host.connection().nodeDeviceLookupByName("pci_0000_08_00_5").XMLDesc(0)
    )
    fast, _ = nodedev_xml.read_parent(xml)
    reference, _ = nodedev_xml.read_parent_tree(xml)
    assert fast == reference and fast.physical_function == A2_GPU


def test_inventory_says_why_a_provider_offers_less(tmp_path, capsys):
    """The operator sees the reason where the totals are printed."""
    import json

    from vgpu_driver.cmd import main as cli

    raw = json.loads(
        (
            hostdesc.Path(hostdesc.__file__).parent / "data" / "rtx6000.json"
        ).read_text()
    )
    raw["sriov"][0]["product_id"] = "0x9999"
    path = tmp_path / "host.json"
    path.write_text(json.dumps(raw))
    assert (
        cli.main(
            ["--host-description", str(path), "inventory", "--format", "json"]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    [note] = report["notes"]
    assert "0x10de:0x9999" in note["note"] and "max_instances" in note["note"]


def test_check_config_says_which_vfs_a_gpu_address_means(tmp_path, capsys):
    import json

    from vgpu_driver.cmd import main as cli

    path = tmp_path / "nova.conf"
    path.write_text(
        "[devices]\nenabled_mdev_types = nvidia-746\n"
        f"[mdev_nvidia-746]\ndevice_addresses = {A2_GPU}\n"
    )
    code = cli.main(
        [
            "--config-file",
            str(path),
            "--host-description",
            "a2-vf-parents",
            "check-config",
            "--format",
            "json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["valid"]
    [row] = report["types"]
    vfs = row["vfs_meant"][A2_GPU]
    assert len(vfs) == 16 and vfs[0] == "0000:08:00.4"


def test_a_reading_torn_by_a_change_offers_no_more_than_the_gpu_holds():
    """An M10 pGPU's mdevs listed just before one was removed and its
    room read just after (another process changed the host between the
    two reads, as ``sync --periodic`` beside the compute service sees
    it): the mdevs and the room add up to one more than the type
    description's max_instance. The provider offers what the GPU holds,
    and says why."""
    inventory = helpers.simulated_host("m10").discover()
    parent = next(p for p in inventory.parents if p.type("nvidia-35"))
    torn = dataclasses.replace(
        parent,
        types=tuple(
            dataclasses.replace(t, available=t.available + 1)
            if t.id == "nvidia-35"
            else t
            for t in parent.types
        ),
    )
    reading = dataclasses.replace(
        inventory,
        parents=tuple(torn if p is parent else p for p in inventory.parents),
    )
    plans = plan_providers("cn", enabled("nvidia-35"), reading, held={})
    [plan] = [p for p in plans if p.device == parent.name]
    assert plan.total == 16
    assert "above the 16" in plan.limit
    [whole] = [
        p
        for p in plan_providers("cn", enabled("nvidia-35"), inventory, held={})
        if p.device == parent.name
    ]
    assert (whole.total, whole.limit) == (16, None)


def test_guests_read_torn_by_a_change_count_no_more_than_the_gpu_holds():
    """``sync --periodic`` read the guests, then the service deleted one
    on a full M10 pGPU (its mdev removed) and bound the next spawn, which
    made its mdev in that room; then the sync read the devices. The gone
    guest's mdev is counted in use (as one gone in a reboot is) beside the
    new one's claim: 17 units held on a 16-unit GPU. It offers what the
    GPU holds. (Units Placement has allocated still count whole:
    test_mdev_changes.py.)"""
    inventory = helpers.simulated_host("m10").discover()
    parent = next(p for p in inventory.parents if p.type("nvidia-35"))
    held = {parent.name: {"nvidia-35": 17}}
    plans = plan_providers("cn", enabled("nvidia-35"), inventory, held=held)
    [plan] = [p for p in plans if p.device == parent.name]
    assert plan.total == 16


def test_claims_read_torn_by_a_change_count_no_more_than_the_card_holds():
    """The same on an L40 (SR-IOV: each vGPU a VF typed through sysfs):
    ``sync --periodic`` counted, beside every vGPU the card has and has
    room for, the claim of a bind typing one more VF, which the full
    card will refuse (the SR-IOV stress with a sync beside saw 13 on a
    card that holds 12). It offers what the card has and has room
    for."""
    inventory = helpers.simulated_host("l40-sriov").discover()
    [pf] = inventory.pfs
    whole = plan_providers("cn", enabled("nvidia-1150"), inventory, held={})
    [plan] = [p for p in whole if p.device == pf.name]
    held = {pf.name: {"nvidia-1150": plan.total + 1}}
    plans = plan_providers("cn", enabled("nvidia-1150"), inventory, held=held)
    [torn] = [p for p in plans if p.device == pf.name]
    assert torn.total == plan.total
