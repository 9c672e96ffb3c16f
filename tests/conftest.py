"""Shared fixtures."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from oslo_config import cfg

from vgpu_driver import conf as vconf

ConfFactory = Callable[[str], cfg.ConfigOpts]


@pytest.fixture
def make_conf(tmp_path: Path) -> ConfFactory:
    """Build a ConfigOpts from INI text, as a service would."""
    counter = iter(range(1000))

    def factory(text: str) -> cfg.ConfigOpts:
        path = tmp_path / f"nova-{next(counter)}.conf"
        path.write_text(textwrap.dedent(text))
        conf = cfg.ConfigOpts()
        vconf.register_opts(conf)
        conf(["--config-file", str(path)], default_config_files=[])
        return conf

    return factory


@pytest.fixture
def write_conf(tmp_path: Path) -> Callable[[str], str]:
    def factory(text: str) -> str:
        path = tmp_path / "vgpu.conf"
        path.write_text(textwrap.dedent(text))
        return str(path)

    return factory


@pytest.fixture(autouse=True)
def _reset_root_logging():
    """The CLI sets up oslo.log on the root logger; undo it per test."""
    import logging

    root = logging.getLogger()
    before = list(root.handlers)
    level = root.level
    yield
    for handler in list(root.handlers):
        if handler not in before:
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture
def node(make_conf, tmp_path):
    """A factory of drivers on simulated hosts, sharing one state_path."""
    from tests.helpers import Node

    def factory(name="m10", **kwargs):
        return Node(make_conf, tmp_path / "state", name, **kwargs)

    return factory


@pytest.fixture
def driver_for(make_conf, tmp_path):
    """A driver on a shipped host description (its own configuration,
    or ``config``; its simulated host, or ``host``)."""
    from tests import helpers
    from vgpu_driver.driver import VgpuDriver
    from vgpu_driver.sim.simulated import SimulatedHost

    def factory(name, config=None, host=None):
        description = helpers.load(name)
        conf = make_conf(textwrap.dedent(config or description.config))
        conf.set_override("state_path", str(tmp_path / "state"), "devices")
        return VgpuDriver(conf, host or SimulatedHost(description))

    return factory
