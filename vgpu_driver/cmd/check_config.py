"""``vgpu-driver check-config``: the effective per-type configuration."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from oslo_config import cfg

from vgpu_driver import exception
from vgpu_driver.cmd import output
from vgpu_driver.cmd.context import open_context
from vgpu_driver.conf import loader
from vgpu_driver.model.check import host_problems
from vgpu_driver.model.config import DeviceConfig, Problem

DEFAULT_PARENTS = "default for unlisted parents"


def type_rows(
    config: DeviceConfig, vfs_of: dict[str, list[str]] | None = None
) -> list[dict[str, Any]]:
    vfs_of = vfs_of or {}
    return [
        {
            "type": t.type_id,
            "section": t.group,
            "resource_class": t.resource_class,
            "parents": list(t.addresses),
            # a GPU's address where its VFs are the mdev parents (Ampere
            # before kernel 6.8) means them: which they are
            "vfs_meant": {a: vfs_of[a] for a in t.addresses if a in vfs_of},
            "default_for_unlisted_parents": t.is_default,
            "max_instances": t.max_instances,
            "card_share": t.card_share,
            "traits": list(t.traits),
        }
        for t in config.types
    ]


def run(conf: cfg.ConfigOpts, argv: Sequence[str] = ()) -> int:
    fmt = conf.command.format
    config, errors = loader.read_device_config(conf)
    host_note = None
    vfs_of: dict[str, list[str]] = {}
    if errors:
        host_note = "host checks skipped: fix the errors first"
    elif conf.config_file or conf.config_dir or conf.host_description:
        found, host_note, vfs_of = _host_problems(conf, argv, config)
        errors.extend(p for p in found if p.severity == "error")
        config = dataclasses.replace(
            config,
            warnings=(
                *config.warnings,
                *(p for p in found if p.severity != "error"),
            ),
        )
    if fmt == "json":
        output.dump_json(
            {
                "valid": not errors,
                "host": conf.host,
                "types": type_rows(config, vfs_of),
                "warnings": [str(w) for w in config.warnings],
                "errors": [str(e) for e in errors],
                "host_checks": host_note or "done",
            }
        )
    else:
        _print_table(conf, config, errors, vfs_of)
        if host_note:
            print(f"NOTE: {host_note}")
    return 2 if errors else 0


def _host_problems(
    conf: cfg.ConfigOpts, argv: Sequence[str], config: DeviceConfig
) -> tuple[list[Problem], str | None, dict[str, list[str]]]:
    """The configuration checked against the host: problems, a note when
    the host could not be read, and the VFs each GPU address means
    where a GPU's VFs are its mdev parents."""
    try:
        context = open_context(conf, argv)
    except exception.VgpuDriverError as exc:
        return [], f"host checks skipped: {exc}", {}
    try:
        inventory = context.host.discover()
        vfs_of: dict[str, list[str]] = {}
        for parent in inventory.parents:
            if parent.physical_function and parent.address:
                vfs_of.setdefault(parent.physical_function, []).append(
                    parent.address
                )
        return host_problems(config, inventory), None, vfs_of
    except exception.VgpuDriverError as exc:
        return [], f"host checks skipped: {exc}", {}
    finally:
        context.close()


def _print_table(
    conf: cfg.ConfigOpts,
    config: DeviceConfig,
    errors: list[Problem],
    vfs_of: dict[str, list[str]],
) -> None:
    print(f"Compute node: {conf.host}")
    print(f"libvirt:      {conf.libvirt.connection_uri}")
    print()
    if config.types:
        output.table(
            ["Type", "Resource class", "Parents", "Cap", "Share", "Traits"],
            [
                [
                    t.type_id,
                    t.resource_class,
                    [
                        f"{a} ({len(vfs_of[a])} VFs)" if a in vfs_of else a
                        for a in t.addresses
                    ]
                    if t.addresses
                    else DEFAULT_PARENTS,
                    t.max_instances,
                    f"{t.card_share}%" if t.card_share else None,
                    list(t.traits),
                ]
                for t in config.types
            ],
        )
    else:
        print("No mdev type is enabled ([devices] enabled_mdev_types).")
    for warning in config.warnings:
        print(f"WARNING: {warning}", file=sys.stderr)
    if errors:
        print(
            f"\n{len(errors)} error(s); nothing will be applied until "
            "they are fixed:",
            file=sys.stderr,
        )
        for error in errors:
            print(f"ERROR: {error}", file=sys.stderr)
