"""The A2 host is held to a real card's listing: a free VF of the
simulated card lists its types as a captured A2 VF did (every file of
``mdev_supported_types``, with 4 GB vGPUs on the card), the library
reads the same types, the rule the captures show (types of one
framebuffer size share the GPU, no two sizes) holds, and a provider
counts every vGPU on the GPU against what it holds."""

from __future__ import annotations

import dataclasses
import json
import uuid
from importlib import resources

import pytest

from tests import helpers
from tests.capacity_helpers import enabled
from vgpu_driver.exception import DeviceNoRoom, HostDescriptionInvalid
from vgpu_driver.model.inventory import plan_providers
from vgpu_driver.sim import captures
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim.simulated import SimulatedHost
from vgpu_driver.sim.specs import MdevSpec

CAPTURE = "a2-vf-mdev-supported-types.txt"
FILES = ("available_instances", "description", "device_api", "name")
IN_USE = "pci_0000_08_00_4"  # the host's one A2-4Q


def _with(*placed: tuple[str, str]) -> hostdesc.HostDescription:
    """The A2 host with more mdevs (parent, type), no guest for them."""
    a2 = helpers.load("a2-vf-parents")
    more = [MdevSpec(str(uuid.uuid4()), p, t) for p, t in placed]
    return dataclasses.replace(a2, mdevs=[*a2.mdevs, *more])


def _sysfs_types(tmp_path, description, vf):
    hostdesc.materialize(description, tmp_path)
    base = tmp_path / "sys/class/mdev_bus" / vf / "mdev_supported_types"
    return {
        d.name: {f: (d / f).read_text().rstrip("\n") for f in FILES}
        for d in sorted(base.iterdir())
    }


def test_a_free_vf_lists_what_the_captured_a2_vf_listed(tmp_path):
    """The captured VF was free while the card held 4 GB vGPUs: the
    simulated VF 0000:08:01.7 beside the host's one A2-4Q lists every
    type, file for file, as the capture has it."""
    captured = captures.mdev_types(captures.read(CAPTURE))
    assert len(captured) == 15
    assert captured["nvidia-746"]["name"] == "NVIDIA A2-4Q"
    listed = _sysfs_types(tmp_path, _with(), "0000:08:01.7")
    assert listed == captured


def test_the_library_reads_the_captured_types_through_libvirt(tmp_path):
    captured = captures.mdev_types(captures.read(CAPTURE))
    host = helpers.libvirt_host(_with(), tmp_path)
    inventory = host.discover()
    free = inventory.parent("pci_0000_08_01_7")
    assert [
        (t.id, t.name, t.available, t.description) for t in free.types
    ] == [
        (i, f["name"], int(f["available_instances"]), f["description"])
        for i, f in captured.items()
    ]
    # the descriptions (from sysfs: libvirt's XML has none) give what the
    # GPU holds: A2-4Q's max_instance=4, the one in use among them
    [plan] = plan_providers(
        "cn",
        enabled("nvidia-746"),
        inventory,
        held={IN_USE: {"nvidia-746": 1}},
    )
    assert (plan.total, plan.limit) == (4, None)
    assert {p.physical_function for p in inventory.parents} == {"0000:08:00.0"}


def test_beside_an_a2_8q_a_free_vf_offers_the_8_gb_types_alone(tmp_path):
    """As harvester's vGPU proposal shows it: A2-8Q on 0000:08:00.4, VF
    0000:08:02.1 offers A2-8A, A2-8C and A2-8Q, nothing else."""
    a2 = helpers.load("a2-vf-parents")
    a2 = dataclasses.replace(
        a2, mdevs=[MdevSpec(str(uuid.uuid4()), IN_USE, "nvidia-747")]
    )
    listed = _sysfs_types(tmp_path, a2, "0000:08:02.1")
    offered = {
        f["name"] for f in listed.values() if f["available_instances"] != "0"
    }
    assert offered == {"NVIDIA A2-8A", "NVIDIA A2-8C", "NVIDIA A2-8Q"}


def test_four_4_gb_vgpus_of_any_series_fill_the_gpu(tmp_path):
    """The A2-4Q in use and three A2-4A: 16 GB placed, a free VF offers
    nothing, and the simulated kernel refuses a fifth."""
    full = _with(*((f"pci_0000_08_00_{f}", "nvidia-751") for f in (5, 6, 7)))
    listed = _sysfs_types(tmp_path, full, "0000:08:01.7")
    assert {f["available_instances"] for f in listed.values()} == {"0"}
    host = SimulatedHost(full)
    free = host.discover().parent("pci_0000_08_01_7")
    with pytest.raises(DeviceNoRoom, match="no available instances"):
        host.create_mdev(free, "nvidia-754", str(uuid.uuid4()))


def _a2_4q_plan(description):
    inventory = SimulatedHost(description).discover()
    [plan] = plan_providers(
        "cn",
        enabled("nvidia-746"),
        inventory,
        held={IN_USE: {"nvidia-746": 1}},
    )
    return plan


def test_vgpus_of_another_type_of_its_size_count_against_the_gpu():
    """Two A2-4A made by another manager beside the A2-4Q in use: the
    driver still offers A2-4Q on every free VF, but the GPU (16 GB)
    holds four 4 GB vGPUs in all, so one more A2-4Q fits: the provider
    offers 2, not the 4 of A2-4Q's max_instance."""
    plan = _a2_4q_plan(
        _with(
            ("pci_0000_08_00_5", "nvidia-751"),
            ("pci_0000_08_00_6", "nvidia-751"),
        )
    )
    assert (plan.total, plan.reserved) == (2, 0)


def test_a_vgpu_of_another_size_leaves_the_type_no_room():
    plan = _a2_4q_plan(_with(("pci_0000_08_00_5", "nvidia-745")))  # 2Q
    assert (plan.total, plan.reserved) == (1, 0)  # the one in use


def _raw():
    data = resources.files(hostdesc.SHIPPED_PACKAGE) / "data"
    return json.loads((data / "a2-vf-parents.json").read_text())


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda p: p.update(types=[]), "types or types_from, not both"),
        (lambda p: p.pop("type_capacity"), "needs type_capacity"),
        (lambda p: p.update(types_from="none.txt"), "none.txt"),
        (lambda p: p.update(type_capacity=-1), "type_capacity"),
    ],
    ids=["both", "no capacity", "no such capture", "negative capacity"],
)
def test_a_parent_naming_its_capture_wrongly_is_refused(change, said):
    raw = _raw()
    change(raw["parents"][3])
    with pytest.raises(HostDescriptionInvalid, match=said):
        hostdesc.parse(json.dumps(raw), "test")


def test_an_mdev_made_through_libvirt_takes_room_from_every_vf(tmp_path):
    """Through the modelled libvirt (its kernel shares the GPU among the
    VF parents): beside the A2-4Q in use, an A2-4A made on another VF
    leaves a free VF room for one more 4 GB vGPU of any series (its
    own capacity), in its XML and in sysfs, and for no 8 GB one; the
    VF made on has none."""
    import re
    from pathlib import Path

    from vgpu_driver.sim.mdev_devices import mdev_xml
    from vgpu_driver.sim.mdev_libvirt import MdevConnection

    a2 = helpers.load("a2-vf-parents")
    uri, sysfs = hostdesc.materialize(a2, tmp_path)
    conn = MdevConnection(uri, a2, sysfs=Path(sysfs))

    def rooms(vf):
        name = "pci_" + vf.replace(":", "_").replace(".", "_")
        xml = conn.nodeDeviceLookupByName(name).XMLDesc(0)
        found = re.findall(
            r"<type id='([^']+)'>.*?<availableInstances>(\d+)<", xml, re.S
        )
        live = Path(sysfs) / "class/mdev_bus" / vf / "mdev_supported_types"
        return {
            t: (int(n), int((live / t / "available_instances").read_text()))
            for t, n in found
            if t in ("nvidia-746", "nvidia-751", "nvidia-747")
        }

    assert rooms("0000:08:02.3")["nvidia-747"] == (0, 0)  # the 4Q placed
    made = mdev_xml("pci_0000_08_00_6", "nvidia-751", str(uuid.uuid4()))
    conn.nodeDeviceCreateXML(made, 0)
    assert rooms("0000:08:00.6") == {t: (0, 0) for t in rooms("0000:08:00.6")}
    for vf in ("0000:08:00.5", "0000:08:02.3"):
        assert rooms(vf) == {
            "nvidia-746": (1, 1),
            "nvidia-747": (0, 0),
            "nvidia-751": (1, 1),
        }, vf
