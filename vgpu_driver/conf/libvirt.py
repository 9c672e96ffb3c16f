"""The ``[libvirt]`` group, read as nova.conf's."""

from __future__ import annotations

from oslo_config import cfg

from vgpu_driver.conf import group

libvirt_group = cfg.OptGroup("libvirt", title="libvirt connection")

libvirt_opts = [
    cfg.StrOpt(
        "connection_uri",
        default="qemu:///system",
        help="""
The libvirt URI of the hypervisor whose devices this library manages.
``test:///ABSOLUTE/PATH/host.xml`` serves a described host from libvirt's
built-in test driver, for tests and demonstrations.
""",
    ),
    cfg.StrOpt(
        "sysfs_root",
        default="/sys",
        help="""
Root of the sysfs tree, read for what libvirt does not report (NVIDIA
SR-IOV virtual functions, type descriptions, drivers) and written to
create mediated devices where libvirt cannot. Change it only for tests.
""",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group.fresh(libvirt_group))
    group.register_missing(conf, libvirt_opts, libvirt_group.name)


def list_opts() -> list[tuple[cfg.OptGroup, list[cfg.StrOpt]]]:
    return [(libvirt_group, libvirt_opts)]
