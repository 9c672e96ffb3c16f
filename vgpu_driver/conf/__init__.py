"""Configuration: one module per option group.

Nothing here holds a global ``CONF``: callers build a ``ConfigOpts``, call
:func:`register_opts` on it, load their files, and pass it in.
"""

from __future__ import annotations

from oslo_config import cfg

from vgpu_driver.conf import default, devices, libvirt, placement


def register_opts(conf: cfg.ConfigOpts) -> None:
    default.register_opts(conf)
    devices.register_opts(conf)
    libvirt.register_opts(conf)
    placement.register_opts(conf)
