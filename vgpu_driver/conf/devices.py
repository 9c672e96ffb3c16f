"""The ``[devices]`` group and the per-type ``[mdev_<type>]`` groups."""

from __future__ import annotations

import os

from oslo_config import cfg

from vgpu_driver.conf import group

devices_group = cfg.OptGroup(
    "devices",
    title="Mediated devices and virtual GPUs",
    help="Which mediated device (mdev) types this host offers.",
)

STANDALONE_STATE_PATH = "/var/lib/vgpu-driver"
MDEV_GROUP_PREFIX = "mdev_"
LEGACY_GROUP_PREFIX = "vgpu_"

devices_opts = [
    cfg.ListOpt(
        "enabled_mdev_types",
        default=[],
        deprecated_name="enabled_vgpu_types",
        help="""
The mediated device types this host offers, as the kernel names them
(``nvidia-35``, ``i915-GVTg_V5_4``, ``mlx5_core-local``...). For NVIDIA
SR-IOV cards (no mdev bus), use the vGPU type id as the card lists it in
``creatable_vgpu_types``, prefixed with ``nvidia-`` (``nvidia-1145``).

Most vendor drivers accept one type per physical device, so each type is
tied to the parent devices it is used on by a group named after it::

    [devices]
    enabled_mdev_types = nvidia-35, nvidia-36, mlx5_core-local

    [mdev_nvidia-35]
    device_addresses = 0000:84:00.0,0000:85:00.0
    max_instances = 12

    [mdev_nvidia-36]
    # no device_addresses: used on every parent not named elsewhere

    [mdev_mlx5_core-local]
    device_addresses = 0000:86:00.0
    mdev_class = CUSTOM_MLX5
    traits = CUSTOM_FAST_NIC

Options of ``[mdev_<type>]`` (the legacy name ``[vgpu_<type>]`` is read
too):

``device_addresses``
  Parent devices of this type: PCI addresses ``DDDD:BB:SS.F`` or the name
  of a non-PCI parent (for example the mtty sample driver's). An mdev
  parent serves one type (the first it is listed under); an NVIDIA SR-IOV
  card listed under several types serves each (mixed size), a provider
  per type.
``mdev_class``
  Placement resource class of this type's inventory: ``VGPU`` (default)
  or ``CUSTOM_<NAME>``, as Nova reads it. Outside Nova a bare name is
  read as ``CUSTOM_<NAME>`` with a warning; in nova.conf it is an error
  (nova-compute would not start).
``max_instances``
  Host-wide cap on the devices of this type (at least 1); parents are
  filled in address order until it is spent.
``traits``
  Extra traits (os-traits names or ``CUSTOM_*``) put on the resource
  providers of this type.
``card_share``
  On an NVIDIA card serving several types: the percent (1-100) of what
  the empty card holds of this type that it may hold, what fits beyond
  reserved. Shares of a card's types adding up to 100 or less cannot be
  over-allocated by two schedulers' picks within one refresh. Unset: all
  that fits.

The first enabled type without ``device_addresses`` is the default type of
every mdev-capable parent not listed elsewhere; further types without
addresses are ignored with a warning.

Related options: ``[devices] remove_unused_mdevs``.
""",
    ),
    cfg.StrOpt(
        "owner_trait",
        default="OWNER_NOVA",
        help="""
The owner trait set on every resource provider this library manages, as
Nova's scheduler pre-filter expects. Change it only if another service
owns the device providers of this host.
""",
    ),
    cfg.BoolOpt(
        "remove_unused_mdevs",
        default=False,
        help="""
Remove a mediated device when the instance using it is deleted. By
default it is kept and reused by the next instance, which is faster; set
this when a device must not carry state from one guest to the next.
""",
    ),
    cfg.IntOpt(
        "failed_device_retry_interval",
        default=300,
        min=0,
        help="""
Seconds a parent device whose operations failed (an mdev create error, a
VF that refused its type) stays reserved in Placement before it is
offered again. If it fails again it is reserved again. 0 offers it again
at the next provider-tree update.
""",
    ),
    cfg.BoolOpt(
        "use_nvml",
        default=True,
        help="""
Read NVIDIA GPUs through NVIDIA's management library (NVML) where it is
present (the ``nvml`` extra, ``nvidia-ml-py``, and the vGPU manager's
``libnvidia-ml.so``): how many vGPUs of each type fit, MIG GPU instances,
faults and the migration capability, in the vGPU manager's own words.
Without it (or set to false) capacity comes from sysfs and the library's
table of boards, which offers less where it cannot prove more.
""",
    ),
    cfg.IntOpt(
        "gpu_error_hold",
        default=3600,
        min=0,
        help="""
Seconds a GPU that reported an XID error through NVML (other than those
a guest's own program causes) takes no new guest after the last one.
NVML never says an error is over: a GPU that was reset reports no more,
and is offered again when this time has passed without one.
""",
    ),
    cfg.StrOpt(
        "metrics_listen",
        default=None,
        sample_default="<unset: not served>",
        help="""
``ADDRESS:PORT`` on which the compute service itself serves Prometheus
metrics of its devices (``vgpu_libvirt.LibvirtDriver`` only), e.g.
``127.0.0.1:9847``. Unset, nothing is served (``vgpu-driver metrics``
gives the same figures from outside the service).
""",
    ),
    cfg.StrOpt(
        "state_path",
        sample_default="<[DEFAULT] state_path>/vgpu in nova.conf, "
        + STANDALONE_STATE_PATH
        + " otherwise",
        help="""
Directory of the library's own records: device claims held between a
bind and the guest's definition, live-migration claims, and the vGPU type
of each NVIDIA SR-IOV virtual function (which the card forgets at reboot;
``vgpu-driver restore`` re-applies them). Files are written atomically.
Unset, it is ``vgpu`` under Nova's own ``[DEFAULT] state_path`` inside
nova-compute and for ``--nova-node`` (``/var/lib/nova/vgpu``, which the
nova user owns), and ``/var/lib/vgpu-driver`` otherwise. Nothing is
created until there is something to record: a host with no vGPU
configured never needs it. What root writes there (``restore``,
``audit --fix``) is given to the directory's owner.
""",
    ),
]

# Options of each [mdev_<type>] group; registered per enabled type.
type_opts_help = {
    "device_addresses": "Parent devices (PCI addresses or names).",
    "mdev_class": "Resource class: VGPU or CUSTOM_<NAME> (as Nova reads it).",
    "max_instances": "Host-wide cap on devices of this type (>= 1).",
    "traits": "Extra traits for this type's resource providers.",
    "card_share": (
        "On an NVIDIA card serving several types (mixed size): the percent "
        "(1-100) of what the empty card holds of this type that it may "
        "hold; what fits beyond is reserved. Shares of a card's types "
        "adding up to at most 100 mean two schedulers' picks within one "
        "refresh always fit "
        "(no reschedule), at the cost of each type offering less. Unset: "
        "all that fits (a second pick that no longer fits is refused at "
        "spawn and rescheduled)."
    ),
}


def records_path(conf: cfg.ConfigOpts) -> str:
    """Where the records are: ``[devices] state_path`` if set, else
    ``vgpu`` under Nova's ``[DEFAULT] state_path`` when Nova's options
    are there, else the standalone default."""
    if conf.devices.state_path is not None:
        return str(conf.devices.state_path)
    if "state_path" in conf and conf.state_path:
        return os.path.join(str(conf.state_path), "vgpu")
    return STANDALONE_STATE_PATH


def type_group_name(type_id: str) -> str:
    return MDEV_GROUP_PREFIX + type_id


def make_type_opts(type_id: str) -> list[cfg.Opt]:
    legacy = LEGACY_GROUP_PREFIX + type_id
    return [
        cfg.ListOpt(
            "device_addresses",
            default=[],
            deprecated_group=legacy,
            help=type_opts_help["device_addresses"],
        ),
        # Read as strings: validation reports every bad value at once with
        # the section and option named, instead of oslo's first failure.
        cfg.StrOpt(
            "mdev_class",
            default="VGPU",
            deprecated_group=legacy,
            help=type_opts_help["mdev_class"],
        ),
        cfg.StrOpt(
            "max_instances",
            deprecated_group=legacy,
            help=type_opts_help["max_instances"],
        ),
        cfg.ListOpt(
            "traits",
            default=[],
            deprecated_group=legacy,
            help=type_opts_help["traits"],
        ),
        cfg.StrOpt("card_share", help=type_opts_help["card_share"]),
    ]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(group.fresh(devices_group))
    group.register_missing(conf, devices_opts, devices_group.name)


def register_type_opts(conf: cfg.ConfigOpts, type_ids: list[str]) -> None:
    """Register ``[mdev_<type>]`` for each type (idempotent)."""
    for type_id in type_ids:
        name = type_group_name(type_id)
        conf.register_group(cfg.OptGroup(name))
        group.register_missing(conf, make_type_opts(type_id), name)


def list_opts() -> list[tuple[cfg.OptGroup, list[cfg.Opt]]]:
    return [(devices_group, devices_opts)]
