"""Every configuration example we ship is one Nova itself accepts.

The examples of the README, the admin guide, the option help (and so
the sample file) and the shipped simulated hosts are read through Nova's
own ``[devices]`` and ``[mdev_<type>]`` options (Nova's real
``nova/conf/devices.py``): an ``mdev_class`` Nova refuses would stop
nova-compute, whatever the library accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.nova_options import nova_conf
from vgpu_driver import conf as vconf
from vgpu_driver.conf import devices as devices_opts
from vgpu_driver.conf import loader
from vgpu_driver.exception import ConfigInvalid
from vgpu_driver.sim import description as hostdesc

ROOT = Path(__file__).resolve().parents[2]
SECTION = re.compile(r"^\[[\w.-]+\]$")


def literal_ini_blocks(text: str) -> list[str]:
    """Indented blocks that hold a ``[devices]`` section."""
    blocks, current = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith(("    ", "\t")) or (current and not line.strip()):
            current.append(line)
            continue
        if any(SECTION.match(x.strip()) for x in current) and any(
            x.strip() == "[devices]" for x in current
        ):
            blocks.append("\n".join(x.strip() for x in current))
        current = []
    return blocks


def examples() -> list[tuple[str, str]]:
    found = []
    for path in [
        ROOT / "README.rst",
        *sorted((ROOT / "doc" / "source").rglob("*.rst")),
    ]:
        for i, block in enumerate(literal_ini_blocks(path.read_text())):
            found.append((f"{path.relative_to(ROOT)}#{i}", block))
    for i, block in enumerate(
        literal_ini_blocks(devices_opts.devices_opts[0].help)
    ):
        found.append((f"conf/devices.py#{i}", block))
    for name in hostdesc.shipped_names():
        config = hostdesc.load(name).config
        if config:
            found.append((f"host {name}", config))
    return found


def test_the_examples_are_found():
    names = {name.split("#")[0] for name, _ in examples()}
    assert {"README.rst", "conf/devices.py", "host demo"} <= names
    assert any("hardware.rst" in n for n in names)


@pytest.mark.parametrize(("where", "text"), examples())
def test_nova_reads_every_shipped_example(tmp_path, where, text):
    # as written: INI has no trailing comments, "x = A  # note" is "A  # note"
    conf = nova_conf(tmp_path, text)
    for type_id in conf.devices.enabled_mdev_types:
        group = f"mdev_{type_id.strip()}"
        # Nova's own option, with its regex (raises if it refuses)
        assert conf[group].mdev_class
    conf.set_override("state_path", str(tmp_path), "devices")
    loader.load_device_config(conf)  # and the library, as nova.conf


def test_a_bare_class_name_in_nova_conf_is_an_error_naming_the_fix(tmp_path):
    from oslo_config import cfg

    path = tmp_path / "nova.conf"
    path.write_text(
        "[devices]\nenabled_mdev_types = mlx5_core-local\n"
        "[mdev_mlx5_core-local]\nmdev_class = mlx5\n"
    )
    conf = cfg.ConfigOpts()
    conf.register_opt(cfg.StrOpt("compute_driver"))  # as Nova has it
    vconf.register_opts(conf)
    conf(["--config-file", str(path)], default_config_files=[])
    with pytest.raises(ConfigInvalid, match="write CUSTOM_MLX5"):
        loader.load_device_config(conf)


def test_outside_nova_a_bare_class_name_is_read_with_a_warning(make_conf):
    conf = make_conf(
        "[devices]\nenabled_mdev_types = mlx5_core-local\n"
        "[mdev_mlx5_core-local]\nmdev_class = mlx5\n"
    )
    config = loader.load_device_config(conf)
    assert config.get("mlx5_core-local").resource_class == "CUSTOM_MLX5"
    assert any("write CUSTOM_MLX5" in str(w) for w in config.warnings)


def test_the_sample_file_carries_the_same_example():
    sample = (ROOT / "etc" / "vgpu-driver.conf.sample").read_text()
    assert "mdev_class = CUSTOM_MLX5" in sample
    assert not re.search(r"mdev_class = (?!VGPU|CUSTOM_)", sample)


def test_the_openstack_ansible_overrides_make_a_nova_conf_nova_accepts(
    tmp_path,
):
    """The guide's user_variables.yml, rendered as os_nova renders
    nova_nova_conf_overrides (a section per key), is read by Nova's own
    options and by the library."""
    yaml = pytest.importorskip("yaml")
    text = (ROOT / "doc" / "source" / "admin" / "deploying.rst").read_text()
    start = text.index("    nova_user_pip_packages:")
    block = text[start : text.index("\n\n", start)]
    variables = yaml.safe_load(
        "\n".join(line[4:] for line in block.splitlines())
    )
    assert variables["nova_user_pip_packages"] == ["vgpu-driver"]
    lines = []
    for section, options in variables["nova_nova_conf_overrides"].items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {v}" for k, v in options.items()]
    conf = nova_conf(tmp_path, "\n".join(lines))
    conf.set_override("state_path", str(tmp_path), "devices")
    [t] = loader.load_device_config(conf).types
    assert (t.type_id, t.addresses) == ("nvidia-35", ("0000:84:00.0",))
