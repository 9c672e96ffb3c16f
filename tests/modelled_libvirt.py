"""Libvirt's test driver with the mdev calls it lacks modelled
(:mod:`vgpu_driver.sim.mdev_libvirt`), every call logged, and a
LibvirtHost on it."""

from __future__ import annotations

from pathlib import Path

from tests import helpers
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.sim.mdev_libvirt import MdevConnection


def logged_connection(uri, description, persistent=True, sysfs=None):
    """The modelled connection, every call logged."""
    return MdevConnection(
        uri, description, persistent=persistent, sysfs=sysfs, log=[]
    )


def modelled_host(tmp_path, name="m10", persistent=True):
    """A LibvirtHost on host description ``name`` (the test driver with
    libvirt's mdev calls modelled, every call logged) after its first
    reading, and the connection it opened."""
    description = helpers.load(name)
    uri, sysfs = helpers.hostdesc.materialize(description, tmp_path)
    conns = []

    def opener(u):
        conns.append(
            logged_connection(u, description, persistent, Path(sysfs))
        )
        return conns[0]

    host = LibvirtHost(uri, sysfs, opener=opener)
    host.discover()
    return host, conns[0]
