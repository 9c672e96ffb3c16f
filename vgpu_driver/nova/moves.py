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
        self._vgpu.check_driver_compatible(
            instance.uuid, source_driver_traits(ctxt, migration)
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


def source_driver_traits(ctxt: Any, migration: Any) -> set[str]:
    """The host-driver traits of the source node's providers, read from
    Placement through Nova's report client; empty (no check) when they
    cannot be read: missing data never blocks a migration."""
    node = getattr(migration, "source_node", None)
    if not node:
        return set()
    try:
        from nova.scheduler.client import report

        client = report.report_client_singleton()
        request_id = getattr(ctxt, "global_id", None)

        def get(url: str, version: str) -> Any:
            answer = client.get(
                url, version=version, global_request_id=request_id
            )
            return answer.json() if answer else {}

        roots = get(f"/resource_providers?name={node}", "1.14")
        found: set[str] = set()
        for root in roots.get("resource_providers", []):
            tree = get(f"/resource_providers?in_tree={root['uuid']}", "1.14")
            for provider in tree.get("resource_providers", []):
                traits = get(
                    f"/resource_providers/{provider['uuid']}/traits", "1.6"
                )
                found.update(traits.get("traits", []))
        return found
    except Exception as exc:  # never block a migration on missing data
        LOG.warning(
            "Cannot read the vGPU host driver of source node %s from "
            "Placement (%s); its compatibility is not checked",
            node,
            exc,
        )
        return set()
