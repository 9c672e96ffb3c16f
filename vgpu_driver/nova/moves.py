"""Resize and live migration in Nova's driver: the source guest's own
devices on revert, a release once a move to another host is confirmed,
and live-migration reservations as claims on disk that survive a restart
of nova-compute until the migration succeeds or is rolled back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oslo_log import log as logging

from vgpu_driver.nova.base import VgpuBase

LOG = logging.getLogger(__name__)


class Moves(VgpuBase):
    def finish_revert_migration(
        self, context: Any, instance: Any, *a: Any, **kw: Any
    ) -> Any:
        # the source guest's own devices, recreated if they went away
        self._vgpu.driver.finish_revert_migration(instance.uuid)
        return super().finish_revert_migration(context, instance, *a, **kw)

    def confirm_migration(
        self, context: Any, migration: Any, instance: Any, *a: Any, **kw: Any
    ) -> Any:
        result = super().confirm_migration(
            context, migration, instance, *a, **kw
        )
        if migration.source_compute != migration.dest_compute:
            self._vgpu.driver.confirm_migration(instance.uuid)
        return result

    # -- live migration (destination) ------------------------------------

    def check_source_migrate_data_at_dest(
        self,
        ctxt: Any,
        instance: Any,
        migrate_data: Any,
        migration: Any,
        limits: Any,
        allocs: Mapping[str, Any],
    ) -> Any:
        source = (
            migrate_data.source_mdev_types
            if "source_mdev_types" in migrate_data
            else None
        )
        if not source:
            return super().check_source_migrate_data_at_dest(
                ctxt, instance, migrate_data, migration, limits, allocs
            )
        targets = self._vgpu.claim_for_live_migration(
            instance.uuid, dict(source), allocs
        )
        LOG.info(
            "Live migration of %s: destination mdevs claimed "
            "(source: destination) %s",
            instance.uuid,
            targets,
        )
        # Nova's own checks run too, with the mdev part already done
        migrate_data.source_mdev_types = {}
        try:
            result = super().check_source_migrate_data_at_dest(
                ctxt, instance, migrate_data, migration, limits, allocs
            )
        except Exception:
            self._vgpu.driver.rollback_live_migration_at_destination(
                instance.uuid
            )
            raise
        finally:
            migrate_data.source_mdev_types = source
        result.target_mdevs = targets
        return result

    def post_live_migration_at_destination(
        self, context: Any, instance: Any, *a: Any, **kw: Any
    ) -> Any:
        result = super().post_live_migration_at_destination(
            context, instance, *a, **kw
        )
        self._vgpu.driver.guest_defined(instance.uuid)
        self._vgpu.driver.live_migration_succeeded(instance.uuid)
        return result

    def rollback_live_migration_at_destination(
        self, context: Any, instance: Any, *a: Any, **kw: Any
    ) -> Any:
        try:
            return super().rollback_live_migration_at_destination(
                context, instance, *a, **kw
            )
        finally:
            self._vgpu.driver.rollback_live_migration_at_destination(
                instance.uuid
            )
