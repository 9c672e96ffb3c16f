"""The ``[placement]`` group: keystoneauth options exactly as nova.conf's.

An operator's existing ``[placement]`` section (``auth_type``,
``auth_url``, ``username``, ``password``, ``project_name``, domains,
``region_name``, ``valid_interfaces``, ``endpoint_override``...) works
unchanged, plus a few options of this library's sync.
"""

from __future__ import annotations

from typing import Any

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from vgpu_driver.conf import group

placement_group = cfg.OptGroup(
    "placement",
    title="Placement service",
    help="How to reach Placement, read like nova.conf's [placement].",
)

sync_opts = [
    cfg.IntOpt(
        "refresh_interval",
        default=300,
        min=0,
        help="""
Seconds after which a sync re-reads the providers from Placement instead
of trusting what it last wrote, to notice outside changes (an operator's
traits, another writer). Between refreshes, a sync with nothing changed
sends no request at all. 0 re-reads at every sync.
""",
    ),
    cfg.IntOpt(
        "max_attempts",
        default=4,
        min=1,
        help="""
Attempts for a request that fails because Placement is down or answers
5xx, and for a write that loses a generation race (409), before the sync
gives up with an error (the next sync carries on).
""",
    ),
    cfg.FloatOpt(
        "retry_delay",
        default=0.5,
        min=0,
        help="First delay (seconds) between attempts; it doubles each time.",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    name = placement_group.name
    conf.register_group(group.fresh(placement_group))
    if "auth_type" not in conf[name]:
        # keystoneauth's own registration (a caller such as Nova has
        # already done it, with its own deprecations: theirs is kept)
        ks_loading.register_session_conf_options(conf, name)
        ks_loading.register_auth_conf_options(conf, name)
    group.register_missing(
        conf,
        ks_loading.get_adapter_conf_options(include_deprecated=False),
        name,
    )
    conf.set_default("service_type", "placement", group=name)
    conf.set_default("valid_interfaces", ["internal", "public"], group=name)
    group.register_missing(conf, sync_opts, name)


def list_opts() -> list[tuple[Any, list[Any]]]:
    ks_opts = (
        ks_loading.get_session_conf_options()
        + ks_loading.get_auth_common_conf_options()
        + ks_loading.get_auth_plugin_conf_options("password")
        + ks_loading.get_adapter_conf_options(include_deprecated=False)
    )
    unique: dict[str, Any] = {}
    for opt in ks_opts:
        unique.setdefault(opt.dest, opt)
    return [(placement_group, [*unique.values(), *sync_opts])]
