"""Option groups, one object per ``ConfigOpts``."""

from __future__ import annotations

from collections.abc import Iterable

from oslo_config import cfg


def fresh(group: cfg.OptGroup) -> cfg.OptGroup:
    """A copy of ``group`` for one ``ConfigOpts``: oslo.config keeps the
    options registered in a group (and their overrides and defaults) on
    the group object, so sharing one module-level group between two
    ConfigOpts (the caller's and ours, or two services in one process)
    would share their overrides too."""
    return cfg.OptGroup(group.name, title=group.title, help=group.help)


def register_missing(
    conf: cfg.ConfigOpts, opts: Iterable[cfg.Opt], group: str | None
) -> None:
    """Register each option the caller's ``ConfigOpts`` lacks. One the
    caller already registered (Nova's ``[devices] enabled_mdev_types``,
    ``[mdev_<type>] max_instances``, its keystoneauth options) is left
    as it is: the caller's definition wins and is read the same way."""
    for opt in opts:
        try:
            conf.register_opt(opt, group=group)
        except cfg.DuplicateOptError:
            continue
