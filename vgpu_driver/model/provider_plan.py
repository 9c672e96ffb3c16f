"""What a pass reports of one device provider."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ProviderPlan:
    name: str  # resource provider name
    device: str  # libvirt name of the parent or physical function
    type_id: str
    resource_class: str
    total: int
    reserved: int
    traits: frozenset[str]
    reason: str | None = None  # why it is reserved
    limit: str | None = None  # why its total is less than the host lists
    # the provider's parent, by name (None: the compute node's)
    parent: str | None = None

    def inventory(self) -> dict[str, dict[str, int | float]]:
        if not self.total:  # it only holds its card's other types
            return {}
        return {
            self.resource_class: {
                "total": self.total,
                "reserved": self.reserved,
                "min_unit": 1,
                "max_unit": self.total,
                "step_size": 1,
                "allocation_ratio": 1.0,
            }
        }
