"""``vgpu-driver sync``: report the host to Placement (once or
periodically)."""

from __future__ import annotations

import json
import time
from typing import Any

from oslo_log import log as logging

from vgpu_driver import exception
from vgpu_driver.cmd.context import Context
from vgpu_driver.driver import VgpuDriver, sync_placement
from vgpu_driver.placement.client import client_from_conf
from vgpu_driver.placement.sync import PlacementSync, SyncReport

LOG = logging.getLogger(__name__)
# a periodic sync that fails waits longer each time, up to this
MAX_BACKOFF = 600.0


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


def as_json(host: str, report: SyncReport) -> dict[str, object]:
    return {
        "host": host,
        "created": report.created,
        "updated": report.updated,
        "removed": report.removed,
        "kept_in_use": report.kept_in_use,
        "requests": report.requests,
    }


class Metrics:
    """``--metrics-textfile``: the host's device metrics and the sync's
    own (passes, durations, Placement requests and answers), written
    after every pass for node_exporter's textfile collector."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.registry: Any = None
        self.sync: Any = None
        if path:
            from prometheus_client import CollectorRegistry

            from vgpu_driver.metrics import SyncCollector

            self.registry = CollectorRegistry()
            self.sync = SyncCollector(self.registry)

    def driver(self, conf: Any, host: Any) -> VgpuDriver:
        if self.registry is None:
            return VgpuDriver(conf, host, yields=True)
        from vgpu_driver.metrics import MeteredDriver

        return MeteredDriver(conf, host, yields=True, registry=self.registry)

    def watch(self, client: Any) -> None:
        if self.sync is not None:
            self.sync.client = client

    def passed(self, seconds: float, result: str) -> None:
        if self.sync is None or self.path is None:
            return
        from prometheus_client import write_to_textfile

        self.sync.passes.labels(result=result).inc()
        self.sync.duration.observe(seconds)
        write_to_textfile(self.path, self.registry)


def _sleep(seconds: float) -> None:
    """Wait between periodic passes (a seam for tests)."""
    time.sleep(seconds)


def run(context: Context) -> int:
    """Sync once (exit 1 on failure) or, with ``--periodic``, for ever:
    a failed pass is logged once, and the next one waits twice as long
    (up to MAX_BACKOFF) until a pass works again."""
    conf = context.conf
    period = conf.command.periodic
    driver: VgpuDriver | None = None
    syncer: PlacementSync | None = None
    wait = float(period)
    metrics = Metrics(conf.command.metrics_textfile)
    while True:
        started = time.monotonic()
        try:
            if driver is None:
                driver = metrics.driver(conf, context.host)
            if syncer is None:
                syncer = PlacementSync(
                    client_from_conf(conf),
                    conf.host,
                    refresh_interval=conf.placement.refresh_interval,
                    store=driver.state,
                )
                metrics.watch(syncer.client)
            report = sync_placement(driver, syncer)
            metrics.passed(time.monotonic() - started, "ok")
        except exception.ConfigInvalid:
            raise
        except exception.VgpuDriverError as exc:
            metrics.passed(time.monotonic() - started, type(exc).__name__)
            if not period:
                raise
            wait = min(max(wait * 2, float(period)), MAX_BACKOFF)
            LOG.error(
                "Sync of %s failed; next try in %.0fs: %s",
                conf.host,
                wait,
                exc,
            )
        else:
            if conf.command.format == "json":
                # one JSON document per pass (JSON lines when periodic)
                print(json.dumps(as_json(conf.host, report)), flush=True)
            else:
                print(f"Synced {conf.host}: {describe(report)}", flush=True)
            wait = float(period)
        if not period:
            return 0
        _sleep(wait)
