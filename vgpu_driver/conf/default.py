"""Options of ``[DEFAULT]``, read as nova.conf's."""

from __future__ import annotations

import socket

from oslo_config import cfg

from vgpu_driver.conf import group

default_opts = [
    cfg.StrOpt(
        "host",
        default=socket.gethostname(),
        sample_default="<current_hostname>",
        help="""
Name of this compute node: the name of its root resource provider in
Placement. It must match the compute service's ``host``.
""",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    group.register_missing(conf, default_opts, None)


def list_opts() -> list[tuple[str, list[cfg.StrOpt]]]:
    return [("DEFAULT", default_opts)]
