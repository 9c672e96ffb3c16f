"""``vgpu-driver``: the command line.

Options are oslo.config's, so ``--config-file``, ``--config-dir`` and
``--debug`` behave as in every OpenStack service; the sub-command comes
last: ``vgpu-driver --config-file nova.conf check-config``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging as std_logging
import os
import sys
from collections.abc import Callable, Sequence

from oslo_config import cfg
from oslo_log import log as logging

from vgpu_driver import conf as vconf
from vgpu_driver import exception
from vgpu_driver.cmd.context import Context, open_context, register_cli_opts

LOG = logging.getLogger(__name__)

Handler = Callable[[cfg.ConfigOpts], int]
_ARGV: list[str] = []
# Errors in what the user gave (files, options, descriptions): exit 2.
USER_ERRORS = (
    exception.ConfigInvalid,
    exception.HostDescriptionInvalid,
    exception.PlacementConfigInvalid,
)
# Commands that run as services log their decisions at INFO.
SERVICE_COMMANDS = {"sync", "placement-server", "restore", "metrics"}


def _format_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        choices=["table", "json"],
        default="table",
        help="Output for people (table) or for programs (one JSON document).",
    )


def _check_config(conf: cfg.ConfigOpts) -> int:
    from vgpu_driver.cmd import check_config

    return check_config.run(conf, _ARGV)


def _demo(context: Context) -> int:
    from vgpu_driver.cmd import demo

    return demo.run(context)


def _with_context(
    run: Callable[[Context], int],
) -> Handler:
    def handler(conf: cfg.ConfigOpts) -> int:
        context = open_context(conf, _ARGV)
        try:
            return run(context)
        finally:
            context.close()

    return handler


def _discover(context: Context) -> int:
    from vgpu_driver.cmd import discover

    return discover.run(context)


def _inventory(context: Context) -> int:
    from vgpu_driver.cmd import inventory

    return inventory.run(context)


def _sync(context: Context) -> int:
    from vgpu_driver.cmd import sync

    return sync.run(context)


def _sync_args(parser: argparse.ArgumentParser) -> None:
    _format_arg(parser)
    parser.add_argument(
        "--periodic",
        type=int,
        metavar="SECONDS",
        default=0,
        help="Sync again every SECONDS, until interrupted.",
    )
    parser.add_argument(
        "--metrics-textfile",
        metavar="PATH",
        default=None,
        help="After every pass, write the device and sync metrics there "
        "for node_exporter's textfile collector.",
    )


def _placement_server(conf: cfg.ConfigOpts) -> int:
    from pathlib import Path

    from vgpu_driver.placement import server

    server.serve(
        conf.command.bind,
        conf.command.port,
        Path(conf.command.database),
    )
    return 0


def _server_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8778)
    parser.add_argument(
        "--database",
        default="placement.sqlite",
        help="SQLite file; the schema is created on first start.",
    )


def _audit(context: Context) -> int:
    from vgpu_driver.cmd import audit

    return audit.run(context)


def _audit_args(parser: argparse.ArgumentParser) -> None:
    _format_arg(parser)
    parser.add_argument(
        "--fix",
        action="store_true",
        help="Repair what is safe (stale claims, unrecorded VF types, "
        "free mdevs of a type no longer served); report the rest.",
    )


def _doctor(context: Context) -> int:
    from vgpu_driver.cmd import doctor

    return doctor.run(context)


def _metrics(context: Context) -> int:
    from vgpu_driver.cmd import metrics

    return metrics.run(context)


def _metrics_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--serve",
        metavar="ADDRESS:PORT",
        default=None,
        help="Serve the metrics over HTTP (e.g. 127.0.0.1:9847) and "
        "refresh them every --interval seconds, until interrupted.",
    )
    parser.add_argument("--interval", type=float, default=60.0)
    parser.add_argument(
        "--textfile",
        metavar="PATH",
        default=None,
        help="Write them for node_exporter's textfile collector (atomic).",
    )


def _restore(context: Context) -> int:
    from vgpu_driver.cmd import restore

    return restore.run(context)


COMMANDS: dict[str, tuple[str, Handler, Callable[..., None]]] = {
    "check-config": (
        "Validate the configuration and print what it will apply.",
        _check_config,
        _format_arg,
    ),
    "discover": (
        "Show the host's mdev parents, types, mdevs and their guests.",
        _with_context(_discover),
        _format_arg,
    ),
    "doctor": (
        "Check the host is ready for vGPUs (IOMMU, vfio, NVIDIA's vGPU "
        "manager, SR-IOV, every GPU and what is done with it).",
        _with_context(_doctor),
        _format_arg,
    ),
    "metrics": (
        "Device metrics for Prometheus: printed, served or written as a "
        "textfile.",
        _with_context(_metrics),
        _metrics_args,
    ),
    "inventory": (
        "Show the resource-provider tree the host would report.",
        _with_context(_inventory),
        _format_arg,
    ),
    "sync": (
        "Report the host's device providers to Placement.",
        _with_context(_sync),
        _sync_args,
    ),
    "restore": (
        "Re-apply recorded SR-IOV VF vGPU types (run at boot).",
        _with_context(_restore),
        _format_arg,
    ),
    "audit": (
        "List mismatches between Placement, claims, guests and devices.",
        _with_context(_audit),
        _audit_args,
    ),
    "placement-server": (
        "Run the embedded Placement (real service, SQLite, noauth2).",
        _placement_server,
        _server_args,
    ),
    "demo": (
        "Run the main job on the embedded simulated host.",
        _with_context(_demo),
        _format_arg,
    ),
}


def _add_parsers(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    for name, (help_text, _handler, add_args) in COMMANDS.items():
        parser = subparsers.add_parser(
            name,
            help=help_text,
            description=help_text,
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        )
        add_args(parser)


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("vgpu-driver")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def make_conf() -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    vconf.register_opts(conf)
    logging.register_options(conf)
    conf.set_default("use_stderr", True)
    register_cli_opts(conf)
    conf.register_cli_opt(
        cfg.SubCommandOpt(
            "command",
            title="Commands",
            handler=_add_parsers,
            help="Run 'vgpu-driver COMMAND --help' for a command's options.",
        )
    )
    return conf


def main(argv: Sequence[str] | None = None) -> int:
    conf = make_conf()
    args = list(sys.argv[1:] if argv is None else argv)
    _ARGV[:] = args
    try:
        conf(args, project="vgpu-driver", version=_version())
    except FileNotFoundError as exc:
        # oslo.config's --shell_completion reads a template some of its
        # installations lack
        print(
            f"ERROR: {exc.filename}: missing from this oslo.config "
            "installation (--shell_completion needs it)",
            file=sys.stderr,
        )
        return 2
    except (cfg.ConfigFilesNotFoundError, cfg.ConfigFileParseError) as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as exc:
        print(
            "ERROR: a configuration file is not text (UTF-8): "
            f"{exc.reason} at byte {exc.start}; check --config-file and "
            "--config-dir",
            file=sys.stderr,
        )
        return 2
    logging.setup(conf, "vgpu-driver")
    # An interactive command prints its result; INFO lines about each
    # provider would only bury it. Set either way: main() may run twice
    # in one process.
    quiet = conf.command.name not in SERVICE_COMMANDS and not conf.debug
    std_logging.getLogger("vgpu_driver").setLevel(
        std_logging.WARNING if quiet else std_logging.NOTSET
    )
    _help, handler, _args = COMMANDS[conf.command.name]
    try:
        return handler(conf)
    except USER_ERRORS as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    except cfg.Error as exc:
        print(f"ERROR: configuration: {exc}", file=sys.stderr)
        return 2
    except exception.VgpuDriverError as exc:
        LOG.debug("Command failed", exc_info=True)
        print(f"ERROR: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (``discover | head``): not an error, and
        # nothing more to say; stdout is closed so exit does not fail
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0
    finally:
        conf.reset()


if __name__ == "__main__":
    sys.exit(main())
