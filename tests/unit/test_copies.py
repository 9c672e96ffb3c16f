"""``replaced``: a frozen dataclass copied with fields changed is what
:func:`dataclasses.replace` makes, and the original is left as it was."""

from __future__ import annotations

import dataclasses

import pytest

from vgpu_driver.model.copies import replaced
from vgpu_driver.model.device import Mdev, MdevType, Parent

TYPE = MdevType("nvidia-35", "GRID M10-2Q", "vfio-pci", 3, "2048 MB")
PARENT = Parent(
    "pci_0000_84_00_0", "0000:84:00.0", driver="nvidia", types=(TYPE,)
)


@pytest.mark.parametrize(
    ("instance", "changes"),
    [
        (TYPE, {"available": 2}),
        (PARENT, {"types": (dataclasses.replace(TYPE, available=0),)}),
        (Mdev("u", "nvidia-35", PARENT.name, "mdev_u"), {"active": False}),
    ],
)
def test_a_copy_is_what_dataclasses_replace_makes(instance, changes):
    copy = replaced(instance, **changes)
    assert copy == dataclasses.replace(instance, **changes)
    assert type(copy) is type(instance) and copy is not instance
    assert copy != instance  # the original is as it was
    assert replaced(instance) == instance
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.name = "another"  # type: ignore[misc]
