"""A service on a dense host served by libvirt's test driver (records
on, started as a compute service starts), and the changes and counts
the tests of its structural figures make."""

from __future__ import annotations

import json

from benchmarks.common import conf_for, dense
from tests import helpers
from tests.helpers import Node
from vgpu_driver.driver import VgpuDriver
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim import guest_xml


def service(tmp_path, shape, extra=""):
    """(host, driver, tree, guests) on ``dense(*shape)``: init_host then
    two refreshes; ``extra``: configuration added."""
    description = dense(*shape)
    description.config += extra
    uri, sysfs = hostdesc.materialize(description, tmp_path)
    host = helpers.LibvirtHost(uri, sysfs)
    driver = VgpuDriver(conf_for(description.config, tmp_path), host)
    tree = helpers.new_tree("n")
    guests = [g.uuid for g in host.discover(rescan_guests=True).guests]
    driver.init_host(guests)
    for _ in range(2):
        driver.update_provider_tree(tree, "n")
    return host, driver, tree, guests


def defined_again_as_it_was(host, driver, uuid):
    """libvirt undefines a guest and defines it again unchanged; the
    driver is told both, as Nova's lifecycle callback tells it."""
    conn = host.connection()
    guest = conn.lookupByUUIDString(uuid)
    xml = guest.XMLDesc(0)
    guest_xml.delete(guest)
    conn.defineXML(xml)
    driver.domain_event(uuid, False)
    driver.domain_event(uuid, True)


def counting(monkeypatch, module, name, counts):
    """``module.name`` counted in ``counts[name]`` at each call."""
    real = getattr(module, name)

    def counted(*args, **kwargs):
        counts[name] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)


def dense_node(make_conf, directory, parents, mdevs, guests):
    """A driver on a dense host served by libvirt's test driver."""
    raw = hostdesc.dense_raw(parents, mdevs, guests)
    description = hostdesc.parse(json.dumps(raw), "dense")
    host = helpers.libvirt_host(description, directory / "host")
    return Node(
        make_conf,
        directory / "state",
        "dense",
        host=host,
        config=description.config,
    )
