"""Option groups, one object per ``ConfigOpts``."""

from __future__ import annotations

from oslo_config import cfg


def fresh(group: cfg.OptGroup) -> cfg.OptGroup:
    """A copy of ``group`` for one ``ConfigOpts``: oslo.config keeps the
    options registered in a group (and their overrides and defaults) on
    the group object, so sharing one module-level group between two
    ConfigOpts (the caller's and ours, or two services in one process)
    would share their overrides too."""
    return cfg.OptGroup(group.name, title=group.title, help=group.help)
