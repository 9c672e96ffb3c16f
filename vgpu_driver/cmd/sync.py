"""``vgpu-driver sync``: report the host to Placement (once or
periodically)."""

from __future__ import annotations

import time

from oslo_log import log as logging

from vgpu_driver import exception
from vgpu_driver.cmd.context import Context
from vgpu_driver.driver import VgpuDriver, sync_placement
from vgpu_driver.placement.client import client_from_conf
from vgpu_driver.placement.sync import PlacementSync, SyncReport

LOG = logging.getLogger(__name__)


def describe(report: SyncReport) -> str:
    parts = [
        f"{len(report.created)} created",
        f"{len(report.updated)} updated",
        f"{len(report.removed)} removed",
    ]
    if report.kept_in_use:
        parts.append(
            f"{len(report.kept_in_use)} kept (allocations): "
            + ", ".join(report.kept_in_use)
        )
    return ", ".join(parts) + f"; {report.requests} request(s)"


def run(context: Context) -> int:
    conf = context.conf
    driver = VgpuDriver(conf, context.host)
    syncer = PlacementSync(
        client_from_conf(conf),
        conf.host,
        refresh_interval=conf.placement.refresh_interval,
    )
    period = conf.command.periodic
    while True:
        try:
            report = sync_placement(driver, syncer)
            print(f"Synced {conf.host}: {describe(report)}", flush=True)
        except exception.PlacementError as exc:
            if not period:
                raise
            LOG.error("Sync failed, trying again in %ss: %s", period, exc)
        if not period:
            return 0
        time.sleep(period)
