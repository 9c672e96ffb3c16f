"""A ConfigOpts as Nova builds it, with Nova's real ``[devices]`` and
``[mdev_*]`` options registered before the library's (Nova's
``nova/conf/devices.py`` loaded on its own: the rest of nova.conf needs
Nova's service dependencies; skipped without Nova installed)."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest
from oslo_config import cfg

from vgpu_driver import conf as vconf


def nova_devices_module():
    """Nova's real ``nova/conf/devices.py``, loaded on its own (the rest of
    nova.conf needs Nova's service dependencies)."""
    spec = importlib.util.find_spec("nova")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("nova is not installed")
    path = Path(spec.submodule_search_locations[0]) / "conf" / "devices.py"
    module_spec = importlib.util.spec_from_file_location("nova_devices", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def nova_conf(tmp_path: Path, text: str) -> cfg.ConfigOpts:
    """A ConfigOpts as Nova builds it: Nova's options first, ours after."""
    path = tmp_path / "nova.conf"
    path.write_text(textwrap.dedent(text))
    nova_devices = nova_devices_module()
    conf = cfg.ConfigOpts()
    nova_devices.register_opts(conf)
    conf.register_opt(cfg.StrOpt("host", default="nova-host"))
    conf(["--config-file", str(path)], default_config_files=[])
    nova_devices.register_dynamic_opts(conf)
    vconf.register_opts(conf)  # must not raise DuplicateOptError
    return conf
