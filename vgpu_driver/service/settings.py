"""The configuration in force, shared by the parts of a driver.

:class:`Settings` holds the caller's ``ConfigOpts`` and the device
configuration read from it, which a reload swaps as a whole. The parts
read it through this one object, so a reload reaches all of them at
once; it refers to none of them (a host asking it for the enabled types
keeps no driver alive).
"""

from __future__ import annotations

import os
import sys

import os_resource_classes as orc
from oslo_config import cfg

from vgpu_driver.model.config import DeviceConfig


class Settings:
    def __init__(
        self,
        conf: cfg.ConfigOpts,
        config: DeviceConfig,
        *,
        yields: bool = False,
    ) -> None:
        """``yields``: this writer gives way to another one with a
        different configuration (an operator's tool) instead of writing
        over it (a compute service does not)."""
        self.conf = conf
        self.config = config
        self.yields = yields
        files = [*_option(conf, "config_file"), *_option(conf, "config_dir")]
        program = os.path.basename(sys.argv[0]) if sys.argv else ""
        # the program and its files, not its pid: a restarted service is
        # the same writer, and its record is read, not written again
        # (each start would rewrite it, with two flushes)
        self.source = f"{program or 'python'} with " + (
            ", ".join(files) or "no configuration file"
        )

    def __call__(self) -> frozenset[str]:
        """The ids of the enabled types (what the host describes)."""
        return frozenset(t.type_id for t in self.config.types)

    def managed_classes(self) -> set[str]:
        """Resource classes of the devices this library manages."""
        return {str(orc.VGPU), *self.config.resource_classes()}


def _option(conf: cfg.ConfigOpts, name: str) -> list[str]:
    """A command-line option of the caller's, if it has it (Nova's CONF
    in a test was never given a command line)."""
    try:
        value = getattr(conf, name)
    except cfg.NoSuchOptError:
        return []
    if not value:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]
