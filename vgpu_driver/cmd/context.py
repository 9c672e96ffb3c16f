"""What a command works on: the configuration and the host.

With ``--host-description NAME|PATH``, or with no configuration file at
all, a command works on a simulated host: the description is rendered
into a temporary folder and served by libvirt's real test driver (with a
fake sysfs tree), and, without a configuration file, the description's
own configuration is used. Otherwise it opens ``[libvirt]
connection_uri`` and ``[libvirt] sysfs_root``.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Sequence
from pathlib import Path

from oslo_config import cfg
from oslo_log import log as logging

from vgpu_driver.conf import devices
from vgpu_driver.host import nvml
from vgpu_driver.host.libvirt_host import LibvirtHost
from vgpu_driver.nova import nova_state_path
from vgpu_driver.sim import description as hostdesc
from vgpu_driver.sim import nvml_lib

LOG = logging.getLogger(__name__)
# Nova's [DEFAULT] state_path as distributions set it
NOVA_STATE = "/var/lib/nova"

cli_opts = [
    cfg.StrOpt(
        "host-description",
        metavar="NAME|PATH",
        help="Work on a simulated host: a shipped description ("
        + ", ".join(hostdesc.shipped_names())
        + ") or a JSON file. Used by default when no configuration file "
        "is given.",
    ),
    cfg.StrOpt(
        "nova-node",
        metavar="NODENAME",
        help="Work on the records nova-compute keeps through "
        "vgpu_driver.nova for this compute node: [devices] state_path/"
        "NODENAME (e.g. audit or restore on a host whose nova-compute "
        "runs compute_driver = vgpu_libvirt.LibvirtDriver, with "
        "--config-file nova.conf).",
    ),
]


@dataclasses.dataclass
class Context:
    conf: cfg.ConfigOpts
    host: LibvirtHost
    description: hostdesc.HostDescription | None
    workdir: tempfile.TemporaryDirectory[str] | None
    argv: Sequence[str] = ()
    config_files: list[str] = dataclasses.field(default_factory=list)
    # (option, value, group): re-applied after every parse, which clears
    # oslo.config's overrides.
    overrides: list[tuple[str, str, str]] = dataclasses.field(
        default_factory=list
    )

    def apply_overrides(self) -> None:
        for name, value, group in self.overrides:
            self.conf.set_override(name, value, group=group)

    def folder(self) -> Path:
        """The command's own temporary folder: the simulated host's, or
        one made now (a host of the operator's); removed at close."""
        if self.workdir is None:
            self.workdir = tempfile.TemporaryDirectory(prefix="vgpu-driver-")
        return Path(self.workdir.name)

    def add_config(self, text: str) -> None:
        """Load one more configuration file after the others."""
        path = self.folder() / f"extra-{len(self.config_files)}.conf"
        path.write_text(text)
        self.config_files.append(str(path))
        args = [arg for f in self.config_files for arg in ("--config-file", f)]
        self.conf(args + list(self.argv), default_config_files=[])
        self.apply_overrides()

    def close(self) -> None:
        self.host.close()
        if self.workdir is not None:
            self.workdir.cleanup()


def register_cli_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_cli_opts(cli_opts)


def open_context(conf: cfg.ConfigOpts, argv: Sequence[str]) -> Context:
    context = _open_context(conf, argv)
    if conf.nova_node:
        if "state_path" not in conf:
            # Nova's own option, read from nova.conf as Nova reads it
            # (distributions set /var/lib/nova)
            conf.register_opt(cfg.StrOpt("state_path", default=NOVA_STATE))
        try:
            records = nova_state_path(
                devices.records_path(conf), conf.nova_node
            )
        except ValueError as exc:
            context.close()
            raise cfg.Error(str(exc)) from exc
        context.overrides.append(("state_path", records, "devices"))
        context.apply_overrides()
    return context


def _open_context(conf: cfg.ConfigOpts, argv: Sequence[str]) -> Context:
    has_config = bool(conf.config_file or conf.config_dir)
    name = conf.host_description
    if name is None and has_config:
        host = LibvirtHost(
            conf.libvirt.connection_uri,
            conf.libvirt.sysfs_root,
            nvml=nvml.maybe_load(
                conf.devices.use_nvml, conf.devices.gpu_error_hold
            ),
        )
        return Context(conf, host, None, None, argv, list(conf.config_file))
    description = hostdesc.load(name or hostdesc.DEFAULT_HOST)
    workdir = tempfile.TemporaryDirectory(prefix="vgpu-driver-")
    uri, sysfs_root = hostdesc.materialize(description, Path(workdir.name))
    conf.set_default("host", description.hostname)
    files = list(conf.config_file)
    if not has_config and description.config.strip():
        path = Path(workdir.name) / "vgpu-driver.conf"
        path.write_text(description.config)
        files = [str(path)]
        conf(["--config-file", str(path), *argv], default_config_files=[])
    state = Path(workdir.name) / "state"
    LOG.debug(
        "Working on simulated host %s through %s", description.source, uri
    )
    host = LibvirtHost(
        uri, sysfs_root, nvml=nvml_lib.rendered(description, sysfs_root)
    )
    context = Context(conf, host, description, workdir, argv, files)
    context.overrides = [
        ("connection_uri", uri, "libvirt"),
        ("sysfs_root", str(sysfs_root), "libvirt"),
    ]
    if not has_config:
        # the operator's own file keeps its state_path
        context.overrides.append(("state_path", str(state), "devices"))
    context.apply_overrides()
    return context
