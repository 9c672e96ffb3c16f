"""The configuration in force, shared by the parts of a driver.

:class:`Settings` holds the caller's ``ConfigOpts`` and the device
configuration read from it, which a reload swaps as a whole. The parts
read it through this one object, so a reload reaches all of them at
once; it refers to none of them (a host asking it for the enabled types
keeps no driver alive).
"""

from __future__ import annotations

import os_resource_classes as orc
from oslo_config import cfg

from vgpu_driver.model.config import DeviceConfig


class Settings:
    def __init__(self, conf: cfg.ConfigOpts, config: DeviceConfig) -> None:
        self.conf = conf
        self.config = config

    def __call__(self) -> frozenset[str]:
        """The ids of the enabled types (what the host describes)."""
        return frozenset(t.type_id for t in self.config.types)

    def managed_classes(self) -> set[str]:
        """Resource classes of the devices this library manages."""
        return {str(orc.VGPU), *self.config.resource_classes()}
