"""``vgpu-driver demo``: the main job on its embedded default.

It works on a shipped simulated host (``demo`` unless
``--host-description`` names another) served by libvirt's real test
driver, with the host's own nova.conf-style configuration.
"""

from __future__ import annotations

from vgpu_driver.cmd import check_config, discover, inventory
from vgpu_driver.cmd.context import Context


def _banner(title: str) -> None:
    print(f"\n=== {title} ===\n")


def run(context: Context) -> int:
    if context.description is not None:
        _banner(f"Simulated host: {context.description.source}")
        print(context.description.summary)
        _banner("Configuration")
        print(context.description.config)
    _banner("Effective configuration")
    rc = check_config.run(context.conf)
    if rc:
        return rc
    _banner("Discovery")
    rc = discover.run(context)
    if rc:
        return rc
    _banner("Resource-provider tree")
    return inventory.run(context)
