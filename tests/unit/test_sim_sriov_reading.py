"""The simulated NVIDIA SR-IOV card lists each VF's creatable types as
the kernel rules say, working out the card's figures once a reading,
not once per VF (a reading of the demo host asked every type's size
per VF: its no-op Placement sync cost 4x what it did)."""

from __future__ import annotations

import pytest

from vgpu_driver.model import capacity
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim.simulated import SimulatedHost
from vgpu_driver.sim.specs import PfSpec


@pytest.mark.parametrize("name", ["l40-sriov", "rtx6000-mixed", "demo"])
def test_every_vf_lists_what_it_lists_alone(name):
    """All VFs at once list what each VF asked alone lists, a VF typed
    (the others then list only the types of its size) and not."""
    description = hostdesc.load(name)
    assert description.pfs
    for pf in description.pfs:
        vfs = pf.vf_addresses
        pf.vf_types[vfs[0]] = pf.types[0].id  # one VF typed
        together = pf.creatable_by_vf(vfs)
        assert list(together) == vfs
        assert together == {vf: pf.creatable(vf) for vf in vfs}
        assert together[vfs[0]] == []  # a typed VF lists none
        assert any(together[vf] for vf in vfs[1:])


def test_a_reading_works_out_a_cards_figures_once(monkeypatch):
    description = hostdesc.load("l40-sriov")
    (pf,) = description.pfs
    host = SimulatedHost(description)
    asked = []
    real = PfSpec.capacities

    def capacities(self: PfSpec) -> dict[int, int]:
        asked.append(self.address)
        return real(self)

    monkeypatch.setattr(PfSpec, "capacities", capacities)
    inventory = host.discover()
    (card,) = inventory.pfs
    assert len(card.vfs) == pf.vf_count == 32
    assert asked == [pf.address]


def test_a_type_name_is_parsed_once():
    capacity.type_size.cache_clear()
    for _ in range(3):
        found = capacity.type_size("NVIDIA L40S-4Q")
    assert found == capacity.TypeSize(4, mig_backed=False)
    assert capacity.type_size("NVIDIA A100D-1-10C") == capacity.TypeSize(
        10, mig_backed=True
    )
    assert capacity.type_size("NVIDIA L40S-0B") is None
    info = capacity.type_size.cache_info()
    assert (info.hits, info.misses) == (2, 3)
