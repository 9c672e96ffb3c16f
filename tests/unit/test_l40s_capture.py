"""The L40S host is held to a real card's listing: a free VF of the
simulated card lists its types as the captured VF did (ids, names,
header, spacing), the library reads them from it, a card with room for
no type lists the header alone, a description whose types drift from
its capture is refused, and vGPUs of another type of the same size
count against what the card holds."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests import helpers
from tests.helpers import providers, summary
from vgpu_driver.exception import HostDescriptionInvalid
from vgpu_driver.host.sysfs import SysfsTree
from vgpu_driver.sim import captures
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim.simulated import SimulatedHost

CAPTURE = "l40s-creatable-vgpu-types.txt"


def _listing(text: str) -> str:
    """A capture's lines without the ``#`` lines naming its source."""
    return "".join(
        line + "\n" for line in text.splitlines() if not line.startswith("#")
    )


def _free_card(tmp_path, vf_types=None):
    l40s = helpers.load("l40-sriov")
    [pf] = l40s.pfs
    pf = dataclasses.replace(pf, vf_types=vf_types or {})
    hostdesc.materialize(
        dataclasses.replace(l40s, pfs=[pf], guests=[]), tmp_path
    )
    return pf, tmp_path / "sys"


def test_a_free_vf_lists_its_types_as_the_captured_l40s_vf(tmp_path):
    pf, sysfs = _free_card(tmp_path)
    captured = captures.read(CAPTURE)
    assert len(captures.creatable(captured)) == 23
    for vf in (pf.vf_addresses[0], pf.vf_addresses[-1]):
        path = sysfs / "bus/pci/devices" / vf / "nvidia/creatable_vgpu_types"
        assert path.read_text() == _listing(captured)
    # and the library reads the same ids and names from every VF
    [card] = SysfsTree(sysfs).sriov_functions()
    assert card.product_id == "0x26b9"
    assert len(card.vfs) == 32
    for vf in card.vfs:
        listed = [(t.id, t.name) for t in vf.creatable]
        assert listed == captures.creatable(captured)


def test_a_card_with_room_for_no_type_lists_the_header_alone(tmp_path):
    """As kernel/hypeman pull request 327 saw on an L40S: one VF holding
    L40S-48Q (the whole board), every other VF prints the header and
    nothing else, and offers no type."""
    [first, other] = helpers.load("l40-sriov").pfs[0].vf_addresses[:2]
    _pf, sysfs = _free_card(tmp_path, vf_types={first: 1156})  # L40S-48Q
    path = sysfs / "bus/pci/devices" / other / "nvidia/creatable_vgpu_types"
    assert path.read_text() == "ID    : vGPU Name\n"
    [card] = SysfsTree(sysfs).sriov_functions()
    by_address = {vf.address: vf for vf in card.vfs}
    assert by_address[other].creatable == ()
    assert by_address[first].current_type == 1156


@pytest.mark.parametrize(
    "drift",
    [
        lambda types: types[5].update(name="NVIDIA L40S-4A"),
        lambda types: types[5].update(id=1157),
        lambda types: types.pop(),
        lambda types: types.reverse(),
    ],
    ids=["renamed", "renumbered", "one missing", "reordered"],
)
def test_types_that_drift_from_their_capture_are_refused(drift):
    path = hostdesc.Path(hostdesc.__file__).parent / "data/l40-sriov.json"
    raw = json.loads(path.read_text())
    hostdesc.parse(json.dumps(raw), "test")  # as shipped: accepted
    drift(raw["sriov"][0]["types"])
    with pytest.raises(HostDescriptionInvalid, match=CAPTURE) as caught:
        hostdesc.parse(json.dumps(raw), "test")
    assert "0000:41:00.0" in str(caught.value)


def test_vgpus_of_another_type_of_its_size_count_against_the_card(
    driver_for,
):
    """Two L40S-4A typed by another manager beside the two L40S-4Q in
    use: a free VF offers both 4 GB types (equal-size mode lists the
    placed vGPUs' size), and the card (48 GB) holds twelve 4 GB vGPUs
    in all: the L40S-4Q provider offers the two in use and eight more,
    10, not NVIDIA's 12 for the type."""
    host = SimulatedHost(helpers.load("l40-sriov"))
    [pf] = host.discover().pfs
    free = [vf for vf in pf.vfs if vf.current_type == 0]
    assert {t.id for t in free[0].creatable} == {1150, 1160}
    for vf in free[:2]:
        host.set_vf_type(vf.address, 1160)  # L40S-4A
    found = summary(providers(driver_for("l40-sriov", host=host)))
    assert found == {"pci_0000_41_00_0": ("VGPU", 10, 0)}
