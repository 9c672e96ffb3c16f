"""Prometheus metrics of a compute host's devices (``prometheus_client``).

Two kinds:

* what the host holds, read at each scrape from the last refresh's
  plans and the records (no bookkeeping of its own that could drift):
  per provider and type its total, reserved, used and free devices,
  whether its total is held below what the host lists (and so why, in
  the logs and ``discover``), the claims in flight, the providers taking
  no new guests;
* what the service did, counted as it happens by :class:`MeteredDriver`:
  binds (by result), releases, refresh durations.

``vgpu-driver metrics`` serves them (``--serve``, default 127.0.0.1) or
writes them for node_exporter's textfile collector (``--textfile``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)

from vgpu_driver.driver import VgpuDriver
from vgpu_driver.exception import VgpuDriverError
from vgpu_driver.model import health
from vgpu_driver.model.binding import BoundDevice
from vgpu_driver.model.inventory import ProviderPlan

PREFIX = "vgpu_driver"
PROVIDER_LABELS = ["provider", "device", "type", "resource_class"]


def by_result(registry: CollectorRegistry, name: str, what: str) -> Counter:
    """A counter of ``what``, labelled by result (ok or the error)."""
    return Counter(
        f"{PREFIX}_{name}",
        f"{what}, by result.",
        ["result"],
        registry=registry,
    )


def seconds(
    registry: CollectorRegistry,
    name: str,
    what: str,
    buckets: tuple[float, ...],
) -> Histogram:
    return Histogram(
        f"{PREFIX}_{name}", what, registry=registry, buckets=buckets
    )


class MeteredDriver(VgpuDriver):
    """A VgpuDriver that counts its binds and releases and times its
    refreshes into ``registry``."""

    def __init__(
        self, *args: Any, registry: CollectorRegistry, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.registry = registry
        self.served_at: str | None = None  # ADDRESS:PORT when served
        self._binds = by_result(
            registry, "binds", "Binds of an instance's allocations to devices"
        )
        self._releases = Counter(
            f"{PREFIX}_releases",
            "Releases of an instance's devices.",
            registry=registry,
        )
        self._refresh = seconds(
            registry,
            "refresh_seconds",
            "Duration of a provider-tree refresh (update_provider_tree).",
            (
                0.0005,
                0.001,
                0.0025,
                0.005,
                0.01,
                0.025,
                0.05,
                0.1,
                0.25,
                0.5,
                1.0,
                2.5,
            ),
        )
        registry.register(HostCollector(self))

    def update_provider_tree(
        self,
        provider_tree: Any,
        nodename: str,
        allocations: Any = None,
    ) -> list[ProviderPlan]:
        start = time.perf_counter()
        try:
            return super().update_provider_tree(
                provider_tree, nodename, allocations
            )
        finally:
            self._refresh.observe(time.perf_counter() - start)

    def allocate_mdevs(
        self, instance_uuid: str, allocations: Mapping[str, Any]
    ) -> list[BoundDevice]:
        try:
            devices = super().allocate_mdevs(instance_uuid, allocations)
        except Exception as exc:
            self._binds.labels(result=type(exc).__name__).inc()
            raise
        self._binds.labels(result="ok").inc()
        return devices

    def release_mdevs(self, instance_uuid: str) -> list[str]:
        released = super().release_mdevs(instance_uuid)
        self._releases.inc()
        return released


class HostCollector:
    """Read at each scrape: the providers as last planned, what guests
    and claims hold, the claims in flight."""

    def __init__(self, driver: VgpuDriver) -> None:
        self.driver = driver

    def describe(self) -> list[Metric]:
        return []  # collected lazily: nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        plans = self.driver.last_plans
        gone = GaugeMetricFamily(
            f"{PREFIX}_guest_devices_gone",
            "mdevs guests' domains name that are not on the host: those "
            "guests lost their vGPU ('vgpu-driver audit' names them).",
        )
        held: dict[str, Any] | None
        try:
            inventory = self.driver.discover(guests=True)
            present = {m.uuid for m in inventory.mdevs}
            gone.add_metric(
                [],
                sum(
                    1
                    for g in inventory.guests
                    for u in g.mdevs
                    if u not in present
                ),
            )
            held = self.driver.held_devices(inventory)
        except VgpuDriverError:  # the records: see records_readable
            held = None
        yield from _provider_figures(plans, held)
        yield _unschedulable_causes(plans)
        yield gone
        yield from self._records()

    def _records(self) -> Iterator[Metric]:
        """The claims in flight, and whether the records can be read."""
        claims = GaugeMetricFamily(
            f"{PREFIX}_claims_in_flight",
            "Devices claimed by binds whose guests are not defined yet.",
        )
        readable = GaugeMetricFamily(
            f"{PREFIX}_records_readable",
            "1 while the records under state_path can be read; 0: run "
            "'vgpu-driver restore' (moves them aside, rebuilds them).",
        )
        try:
            claims.add_metric([], len(self.driver.binder.claimed_devices()))
            readable.add_metric([], 1)
        except VgpuDriverError:
            readable.add_metric([], 0)
        yield claims
        yield readable


def _provider_figures(
    plans: list[ProviderPlan], held: dict[str, Any] | None
) -> Iterator[Metric]:
    """Each provider's total, reserved, used and free devices (the last
    two only when the records could be read: ``held``), and whether it
    is capacity-limited or takes no new guest."""
    families = {
        name: GaugeMetricFamily(
            f"{PREFIX}_provider_{name}", text, labels=PROVIDER_LABELS
        )
        for name, text in (
            ("total", "Devices the provider reports (inventory total)."),
            ("reserved", "Devices reserved: taking no new guests."),
            ("used", "Devices guests use or binds have claimed."),
            ("free", "Devices a new guest could get now."),
            (
                "capacity_limited",
                "1 when the total is held below what the host lists, "
                "because what the card holds cannot be proven.",
            ),
            ("unschedulable", "1 when the provider takes no new guest."),
        )
    }
    for plan in plans:
        labels = [
            plan.name,
            plan.device,
            plan.type_id,
            plan.resource_class,
        ]
        values = {
            "total": plan.total,
            "reserved": plan.reserved,
            "capacity_limited": 1 if plan.limit else 0,
            "unschedulable": 1 if plan.reason else 0,
        }
        if held is not None:  # what is used needs the records
            counts = held.get(plan.device)
            used = counts[plan.type_id] if counts else 0
            values["used"] = used
            values["free"] = max(0, plan.total - plan.reserved - used)
        for name, value in values.items():
            families[name].add_metric(labels, value)
    yield from families.values()


def _unschedulable_causes(plans: list[ProviderPlan]) -> Metric:
    causes = GaugeMetricFamily(
        f"{PREFIX}_provider_unschedulable_cause",
        "1 for why a provider takes no new guest: driver_down, "
        "gpu_fault (NVML), device_gone, operations_failing, "
        "max_instances, other_manager, outside_nova or other (the log "
        "has the full reason).",
        labels=[*PROVIDER_LABELS, "cause"],
    )
    for plan in plans:
        cause = health.cause_of(plan.reason)
        if cause is not None:
            causes.add_metric(
                [
                    plan.name,
                    plan.device,
                    plan.type_id,
                    plan.resource_class,
                    cause,
                ],
                1,
            )
    return causes


class SyncCollector:
    """What a ``sync`` process asked Placement, and how its passes went:
    requests by method and answers by status (as its client counted
    them), passes by result and their durations."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.client: Any = None  # the PlacementClient, once made
        self.passes = by_result(
            registry, "sync_passes", "Placement sync passes"
        )
        self.duration = seconds(
            registry,
            "sync_seconds",
            "Duration of a Placement sync pass.",
            (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
        )
        registry.register(self)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            f"{PREFIX}_placement_requests",
            "Requests sent to Placement, by method.",
            labels=["method"],
        )
        answers = CounterMetricFamily(
            f"{PREFIX}_placement_answers",
            "Answers from Placement, by HTTP status.",
            labels=["status"],
        )
        if self.client is not None:
            for method, count in sorted(self.client.requests.items()):
                requests.add_metric([method], count)
            for status, count in sorted(self.client.statuses.items()):
                answers.add_metric([str(status)], count)
        yield requests
        yield answers
