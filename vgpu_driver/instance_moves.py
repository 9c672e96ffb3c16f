"""What :class:`~vgpu_driver.driver.VgpuDriver` does when an instance
moves (resize, cold and live migration), with Nova's method names: the
destination binds from the new allocations or claims for an incoming
live migration, the source gets its devices back on a revert or lets
them go once the move is confirmed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_driver.model.binding import BoundDevice
from vgpu_driver.service import lifecycle
from vgpu_driver.service.binder import DeviceBinder
from vgpu_driver.service.refresh import Refresher


class InstanceMoves:
    binder: DeviceBinder
    _refresher: Refresher

    # the driver's own, as it (or a subclass: metrics) defines them
    def allocate_mdevs(
        self, instance_uuid: str, allocations: Mapping[str, Any]
    ) -> list[BoundDevice]:
        raise NotImplementedError

    def release_mdevs(self, instance_uuid: str) -> list[str]:
        raise NotImplementedError

    # resize and cold migration
    def finish_migration(
        self, instance_uuid: str, allocations: Mapping[str, Any]
    ) -> list[BoundDevice]:
        """On the destination: bind from the new allocations."""
        return self.allocate_mdevs(instance_uuid, allocations)

    def finish_revert_migration(self, instance_uuid: str) -> list[BoundDevice]:
        """On the source: the guest's own devices again (recreated if they
        went away meanwhile)."""
        return lifecycle.recover_guest(self._refresher, instance_uuid)

    def confirm_migration(self, instance_uuid: str) -> list[str]:
        """On the source, once the move is confirmed: release."""
        return self.release_mdevs(instance_uuid)

    # live migration (destination side)
    def claim_for_live_migration(
        self,
        instance_uuid: str,
        source_mdevs: Mapping[str, str],
        allocations: Mapping[str, Any],
    ) -> dict[str, str]:
        """Claim destination devices of the same types as the source's
        mdevs (``{source uuid: type id}``) and return ``{source uuid:
        destination uuid}`` for the guest's XML. The claim is on disk: it
        survives a restart of the service until success or rollback."""
        self._refresher.name_instances([instance_uuid])
        return lifecycle.claim_for_live_migration(
            self._refresher, instance_uuid, source_mdevs, allocations
        )

    def live_migration_succeeded(self, instance_uuid: str) -> None:
        self.binder.end_migration(instance_uuid)

    def rollback_live_migration_at_destination(
        self, instance_uuid: str
    ) -> list[str]:
        released = self.binder.release(instance_uuid)
        self._refresher.forget_instance(instance_uuid)
        return released
