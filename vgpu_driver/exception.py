"""The library's exceptions.

Every error the library raises on purpose is a :class:`VgpuDriverError`.
Its message is built from ``msg_fmt`` and the keyword arguments given to
the constructor, so a message always names the thing that is wrong and
what to do about it.  ``code`` is a stable, machine-readable name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class VgpuDriverError(Exception):
    msg_fmt = "An unknown error occurred."
    code = "vgpu_driver.error"

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        self.kwargs = kwargs
        if message is None:
            message = self.msg_fmt % kwargs
        self.message = message
        super().__init__(message)


class ConfigInvalid(VgpuDriverError):
    """One or more configuration problems; ``problems`` lists them all."""

    msg_fmt = "The configuration is invalid:\n%(details)s"
    code = "vgpu_driver.config.invalid"

    def __init__(self, problems: Sequence[object]) -> None:
        self.problems = list(problems)
        details = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(details=details)


class HostUnreachable(VgpuDriverError):
    msg_fmt = (
        "Cannot connect to libvirt at %(uri)s: %(reason)s. Check "
        "[libvirt] connection_uri and that libvirtd is running."
    )
    code = "vgpu_driver.host.unreachable"


class HostOperationFailed(VgpuDriverError):
    msg_fmt = (
        "libvirt at %(uri)s could not %(action)s: %(reason)s. See "
        "libvirtd's log; the next operation tries again."
    )
    code = "vgpu_driver.host.operation_failed"


class DeviceXMLInvalid(VgpuDriverError):
    msg_fmt = "Cannot parse the XML of %(what)s: %(reason)s"
    code = "vgpu_driver.host.xml_invalid"


class HostDescriptionInvalid(VgpuDriverError):
    msg_fmt = "Host description %(source)s is invalid: %(reason)s"
    code = "vgpu_driver.host.description_invalid"


class DeviceOperationFailed(VgpuDriverError):
    msg_fmt = "Cannot %(action)s on %(device)s: %(reason)s"
    code = "vgpu_driver.host.operation_failed"


class DeviceNoRoom(DeviceOperationFailed):
    """The kernel (or libvirt for it) refused to make a device because
    the parent has no room left for its type (the mdev core answers
    EDQUOT): the parent is full, not failing. Raised by the host
    adapters, which alone know how the host says it."""

    code = "vgpu_driver.host.no_room"


# how the host says a parent is full: errno of a sysfs write or of a
# caller's create, the same told by libvirt or mdevctl as text
NO_ROOM_ERRNOS = frozenset({122, 28})  # EDQUOT, ENOSPC (Linux)
NO_ROOM_WORDS = ("disk quota exceeded", "no available instances", "edquot")


def says_no_room(exc: BaseException) -> bool:
    """Does the host's error ``exc`` say the parent is full?"""
    if isinstance(exc, OSError) and exc.errno in NO_ROOM_ERRNOS:
        return True
    text = str(exc).lower()
    return any(word in text for word in NO_ROOM_WORDS)


class ProviderUnknown(VgpuDriverError):
    msg_fmt = (
        "Allocation names resource provider %(rp_uuid)s, which is not a "
        "device provider of this host; the instance must be rescheduled."
    )
    code = "vgpu_driver.bind.provider_unknown"


class DeviceCapacityExhausted(VgpuDriverError):
    msg_fmt = (
        "No room for %(count)d more %(type_id)s device(s) on %(parent)s; "
        "the instance must be rescheduled."
    )
    code = "vgpu_driver.bind.exhausted"


class WriterConflict(VgpuDriverError):
    msg_fmt = (
        "Provider %(provider)s was written by another configuration "
        "(%(theirs)s, from %(their_source)s) after this one (%(ours)s, from "
        "%(our_source)s) wrote it: two writers with different "
        "configurations serve node %(nodename)s. Nothing was written; stop "
        "one of them or give both the same configuration."
    )
    code = "vgpu_driver.placement.writer_conflict"


class ClaimConflict(VgpuDriverError):
    msg_fmt = (
        "Instance %(instance)s already holds %(held)s from an earlier bind, "
        "but its allocations now ask for %(wanted)s. Release its devices "
        "first (the earlier spawn, resize or migration must end or be "
        "rolled back); nothing was changed."
    )
    code = "vgpu_driver.bind.claim_conflict"


class PlacementError(VgpuDriverError):
    msg_fmt = "Placement request %(method)s %(url)s failed: %(reason)s"
    code = "vgpu_driver.placement.error"


class PlacementUnavailable(PlacementError):
    msg_fmt = (
        "Placement at %(url)s did not answer after %(tries)s "
        "(%(reason)s). Check the [placement] section and that the service "
        "is up; the next sync will finish the job."
    )
    code = "vgpu_driver.placement.unavailable"

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        attempts = kwargs.get("attempts")
        kwargs.setdefault(
            "tries", "1 attempt" if attempts == 1 else f"{attempts} attempts"
        )
        super().__init__(message, **kwargs)


class ReshapeNeeded(VgpuDriverError):
    msg_fmt = (
        "The provider tree of %(nodename)s has an old layout and must be "
        "reshaped; call update_provider_tree again with allocations."
    )
    code = "vgpu_driver.placement.reshape_needed"


class ReshapeFailed(VgpuDriverError):
    msg_fmt = "Cannot reshape the providers of %(nodename)s: %(reason)s"
    code = "vgpu_driver.placement.reshape_failed"


class MigrationTypeMismatch(VgpuDriverError):
    msg_fmt = (
        "Live migration of instance %(instance)s: source mdev %(source)s is "
        "of type %(type_id)s, but the destination's allocations give "
        "%(offered)s; a guest keeps its device type, so the destination "
        "must offer %(type_id)s."
    )
    code = "vgpu_driver.bind.migration_type_mismatch"


class PlacementConfigInvalid(VgpuDriverError):
    msg_fmt = (
        "Cannot build a Placement client from [placement]: %(reason)s. "
        "Set auth_type (for example password, or admin_token with the "
        "embedded Placement) and the options it needs."
    )
    code = "vgpu_driver.placement.config_invalid"
