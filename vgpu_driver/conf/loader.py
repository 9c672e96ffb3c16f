"""Turn a loaded ``ConfigOpts`` into the validated device configuration."""

from __future__ import annotations

import dataclasses
import difflib
import glob
import os

from oslo_config import cfg
from oslo_log import log as logging

from vgpu_driver import exception
from vgpu_driver.conf import devices
from vgpu_driver.model import naming
from vgpu_driver.model.config import (
    DeviceConfig,
    Problem,
    RawType,
    build_device_config,
)

LOG = logging.getLogger(__name__)


def _read(
    conf: cfg.ConfigOpts, group: str, option: str, errors: dict[str, str]
) -> object:
    try:
        return conf[group][option]
    except (cfg.ConfigFileValueError, ValueError) as exc:
        reason = str(exc)
        if "is not valid:" in reason:  # oslo names the file and option
            reason = reason.split("is not valid:", 1)[1].strip()
        errors[option] = f"cannot be read: {reason}"
        return None


def load_device_config(conf: cfg.ConfigOpts) -> DeviceConfig:
    """Validate ``[devices]`` and every ``[mdev_<type>]`` group.

    Raises :class:`~vgpu_driver.exception.ConfigInvalid` listing every
    error; warnings are logged and kept on the returned config.
    """
    config, problems = read_device_config(conf)
    for warning in config.warnings:
        LOG.warning("Configuration: %s", warning)
    if problems:
        raise exception.ConfigInvalid(problems)
    return config


def read_device_config(
    conf: cfg.ConfigOpts,
) -> tuple[DeviceConfig, list[Problem]]:
    """The valid part of the configuration and the list of its errors."""
    enabled = [t.strip() for t in conf.devices.enabled_mdev_types]
    enabled = [t for t in enabled if t]
    devices.register_type_opts(conf, enabled)
    sections = set(conf.list_all_sections())

    raw_types = []
    for type_id in enabled:
        group = devices.type_group_name(type_id)
        legacy = devices.LEGACY_GROUP_PREFIX + type_id
        shown = (
            legacy if legacy in sections and group not in sections else group
        )
        errors: dict[str, str] = {}
        raw_types.append(
            RawType(
                type_id=type_id,
                group=shown,
                device_addresses=_as_list(
                    _read(conf, group, "device_addresses", errors)
                ),
                mdev_class=str(
                    _read(conf, group, "mdev_class", errors) or "VGPU"
                ),
                max_instances=_as_optional_str(
                    _read(conf, group, "max_instances", errors)
                ),
                traits=_as_list(_read(conf, group, "traits", errors)),
                card_share=_as_optional_str(
                    _read(conf, group, "card_share", errors)
                ),
                read_errors=errors,
            )
        )

    known = {devices.type_group_name(t) for t in enabled} | {
        devices.LEGACY_GROUP_PREFIX + t for t in enabled
    }
    stray = sorted(
        s
        for s in sections
        if s.startswith(
            (devices.MDEV_GROUP_PREFIX, devices.LEGACY_GROUP_PREFIX)
        )
        and s not in known
    )
    config, problems = build_device_config(
        enabled, raw_types, stray, nova=_for_nova(conf)
    )
    parsed = _parsed_files(conf)
    problems.extend(_unreadable_scalars(conf, parsed))
    state_path = _read(conf, "devices", "state_path", {})
    if isinstance(state_path, str) and not state_path.strip():
        problems.append(
            Problem(
                "devices",
                "state_path",
                "",
                "is empty: set the directory where the library keeps its "
                "records, or remove the option for the default",
            )
        )
    unknown = _unknown_options(conf, parsed)
    if unknown:
        config = dataclasses.replace(
            config, warnings=(*config.warnings, *unknown)
        )
    owner = conf.devices.owner_trait
    if not naming.is_valid_trait(owner):
        problems.append(
            Problem(
                "devices",
                "owner_trait",
                owner,
                "unknown trait: use OWNER_NOVA, another os-traits OWNER_* "
                "name, or CUSTOM_<NAME>",
            )
        )
    return config, problems


# Groups whose scalar options are read by the library; a value oslo
# cannot convert would otherwise surface as a traceback later.
SCALAR_GROUPS = ("devices", "libvirt", "placement")


def _unreadable_scalars(conf: cfg.ConfigOpts, parsed: Parsed) -> list[Problem]:
    """The options of the library's groups whose value oslo cannot
    convert. Only a value from a file or the environment can be one (a
    default is the declaring project's own, an override its caller's):
    those alone are read, each about 10 µs (in nova.conf ``[libvirt]``
    alone registers about 150). All of a group are read where a file
    sets a name the group does not register (a deprecated name, or a
    typo), or a ``config_source`` may give values."""
    given = {
        name.replace("-", "_")
        for _path, sections in parsed
        for options in sections.values()
        for name in options
    }
    # (oslo.config registers config_source on every ConfigOpts)
    everything = bool(conf.config_source)
    environment = {key for key in os.environ if key.startswith("OS_")}
    problems: list[Problem] = []
    for group in SCALAR_GROUPS:
        if group not in conf:
            continue
        registered = list(conf[group])
        named = {
            name.replace("-", "_")
            for _path, sections in parsed
            for name in sections.get(group, {})
        }
        whole = everything or not named <= set(registered)
        for option in registered:
            if not (
                whole
                or option in given
                or f"OS_{group.upper()}__{option.upper()}" in environment
            ):
                continue
            errors: dict[str, str] = {}
            _read(conf, group, option, errors)
            problems.extend(
                Problem(group, name, None, reason + "; fix the value")
                for name, reason in errors.items()
            )
    return problems


def _config_files(conf: cfg.ConfigOpts) -> list[str]:
    """The files the caller's ConfigOpts read (none if it was never
    called on a command line, as a service's CONF in tests)."""
    try:
        files = list(conf.config_file or [])
        directories = list(conf.config_dir or [])
    except cfg.NoSuchOptError:
        return []
    for directory in directories:
        files.extend(sorted(glob.glob(os.path.join(directory, "*.conf"))))
    return files


# each file read: (its path, section -> option -> values)
Parsed = list[tuple[str, dict[str, dict[str, list[str]]]]]


def _parsed_files(conf: cfg.ConfigOpts) -> Parsed:
    """The caller's files as oslo.config's parser reads them (those it
    cannot read are left out: oslo.config itself reports them)."""
    parsed: Parsed = []
    for path in _config_files(conf):
        sections: dict[str, dict[str, list[str]]] = {}
        try:
            cfg.ConfigParser(path, sections).parse()
        except (OSError, cfg.ParseError, UnicodeDecodeError):
            continue
        parsed.append((path, sections))
    return parsed


def _unknown_options(conf: cfg.ConfigOpts, parsed: Parsed) -> list[Problem]:
    """Option names in ``[devices]`` and ``[mdev_*]``/``[vgpu_*]`` groups
    that nothing reads (a typo such as ``device_adresses`` would
    otherwise be silently ignored)."""
    type_options = set(devices.type_opts_help)
    # an option's deprecated name (enabled_vgpu_types) is read too
    device_options = set(conf.devices) | {
        old.name
        for opt in devices.devices_opts
        for old in opt.deprecated_opts
        if old.name
    }
    found: list[Problem] = []
    for path, sections in parsed:
        for section, options in sections.items():
            if section == "devices":
                known = device_options
            elif section.startswith(
                (devices.MDEV_GROUP_PREFIX, devices.LEGACY_GROUP_PREFIX)
            ):
                known = type_options
            else:
                continue
            for option in sorted(set(options) - known):
                close = difflib.get_close_matches(option, sorted(known), 1)
                hint = (
                    f"did you mean {close[0]}?"
                    if close
                    else ("known options: " + ", ".join(sorted(known)))
                )
                found.append(
                    Problem(
                        section,
                        option,
                        None,
                        f"unknown option in {path}, ignored; {hint}",
                        "warning",
                    )
                )
    return found


def _as_list(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _as_optional_str(value: object) -> str | None:
    return None if value is None else str(value)


def _for_nova(conf: cfg.ConfigOpts) -> bool:
    """The files are nova.conf: read inside nova-compute (Nova registers
    ``compute_driver``) or by a command given ``--nova-node``."""
    if "compute_driver" in conf:
        return True
    try:
        return bool(conf.nova_node)
    except cfg.NoSuchOptError:
        return False
