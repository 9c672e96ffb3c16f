"""A small Placement client over openstacksdk's placement adapter.

openstacksdk's placement proxy is a keystoneauth ``Adapter``: its raw
``get``/``put``/``post``/``delete`` take an explicit ``microversion`` and
return the response without raising, so every call here checks the
status code and Placement's ``errors[].code`` itself. Connection failures
and 5xx answers are retried with exponential backoff, within a bound.

:class:`PlacementClient` owns the count of requests sent (what the sync
figures report) and the resource classes and traits it knows Placement
has (so each is ensured once; forgotten when Placement is re-read, since
a Placement restarted empty has none).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from openstack.exceptions import SDKException
from oslo_config import cfg
from oslo_log import log as logging

from vgpu_driver.exception import (
    PlacementConfigInvalid,
    PlacementError,
    PlacementUnavailable,
)

LOG = logging.getLogger(__name__)

# 1.26: reserved may equal total; 1.30: reshaper; 1.36: same_subtree in
# allocation candidates. Placement has served 1.36 since Train (2019).
MICROVERSION = "1.36"

CONCURRENT_UPDATE = "placement.concurrent_update"
IN_USE = "placement.resource_provider.in_use"


class Response:
    """Status, JSON body and Placement's error code of one answer."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body

    @property
    def error_code(self) -> str | None:
        if isinstance(self.body, dict):
            errors = self.body.get("errors") or []
            if errors and isinstance(errors[0], dict):
                code = errors[0].get("code")
                return str(code) if code else None
        return None

    @property
    def detail(self) -> str:
        if isinstance(self.body, dict) and self.body.get("errors"):
            first = self.body["errors"][0]
            return str(first.get("detail") or first.get("title") or "")
        if isinstance(self.body, dict) and isinstance(
            self.body.get("error"), dict
        ):
            # keystonemiddleware's refusal, in front of Placement
            return str(self.body["error"].get("message") or "")
        return str(self.body)[:200]


class PlacementClient:
    def __init__(
        self,
        adapter: Any,
        *,
        max_attempts: int = 4,
        retry_delay: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.adapter = adapter
        self.max_attempts = max_attempts
        self.retry_delay = retry_delay
        self.sleep = sleep
        self.requests: Counter[str] = Counter()
        self.statuses: Counter[int] = Counter()  # answers by status
        # every HTTP request sent, when the session reports them (version
        # discovery included); None: only this client's own are known
        self.on_wire: int | None = None
        self._known_classes: set[str] = set()
        self._known_traits: set[str] = set()

    @property
    def request_count(self) -> int:
        if self.on_wire is not None:
            return self.on_wire
        return sum(self.requests.values())

    def count_wire(self, *_args: Any, **_kwargs: Any) -> None:
        """A ``requests`` response hook: one more request on the wire."""
        self.on_wire = (self.on_wire or 0) + 1

    @property
    def url(self) -> str:
        try:
            return str(self.adapter.get_endpoint())
        except Exception:
            return "placement"

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        ok: Iterable[int] = (200,),
        allow: Iterable[int] = (),
    ) -> Response:
        """Send one request; retry faults; raise unless the status is in
        ``ok`` or ``allow`` (``allow`` is returned for the caller to read).
        """
        ok, allow = set(ok), set(allow)
        delay = self.retry_delay
        reason = ""
        for attempt in range(1, self.max_attempts + 1):
            self.requests[method] += 1
            try:
                raw = self.adapter.request(
                    path,
                    method,
                    json=body,
                    microversion=MICROVERSION,
                    raise_exc=False,
                    headers={"Accept": "application/json"},
                )
            except (ks_exc.ConnectionError, ks_exc.RequestTimeout) as exc:
                reason = f"{type(exc).__name__}: {exc}"
            except ks_exc.DiscoveryFailure as exc:
                # no endpoint could be found or reached: as unreachable
                reason = f"{type(exc).__name__}: {exc}"
            except (ks_exc.ClientException, SDKException) as exc:
                # a misconfigured [placement]: retrying will not help
                raise PlacementConfigInvalid(
                    reason=f"{type(exc).__name__}: {exc}"
                ) from exc
            else:
                response = Response(raw.status_code, _json(raw))
                self.statuses[response.status] += 1
                if response.status in ok or response.status in allow:
                    return response
                if response.status == 400 and _names_unknown(response):
                    # Placement lost a class or trait we created (it was
                    # restarted on an empty database): create them again
                    self.forget_known()
                    raise PlacementNameUnknown(
                        method=method,
                        url=path,
                        reason=f"400 {response.detail}",
                    )
                if response.status < 500:
                    reason = (
                        f"{response.status} {response.error_code or ''}"
                        f" {response.detail}".strip()
                    )
                    if response.status in (401, 403):
                        reason += (
                            ": Placement refused these credentials; check "
                            "[placement] auth_type and its options (a user "
                            "with the admin or service role, as Nova's)"
                        )
                    raise PlacementError(
                        method=method, url=path, reason=reason
                    )
                reason = f"{response.status} {response.detail}"
            if attempt < self.max_attempts:
                LOG.warning(
                    "Placement %s %s failed (%s); retrying in %.1fs",
                    method,
                    path,
                    reason,
                    delay,
                )
                self.sleep(delay)
                delay *= 2
        raise PlacementUnavailable(
            method=method,
            url=self.url,
            attempts=self.max_attempts,
            reason=reason,
        )

    def forget_known(self) -> None:
        """Forget which custom classes and traits Placement has (after a
        re-read: it may have been restarted on an empty database)."""
        self._known_classes.clear()
        self._known_traits.clear()

    # -- calls the SDK has no helper for -------------------------------

    def ensure_resource_class(self, name: str) -> None:
        if name in self._known_classes or not name.startswith("CUSTOM_"):
            return
        self.request("PUT", f"/resource_classes/{name}", ok=(201, 204))
        self._known_classes.add(name)

    def ensure_traits(self, names: Iterable[str]) -> None:
        for name in sorted(set(names) - self._known_traits):
            if name.startswith("CUSTOM_"):
                self.request("PUT", f"/traits/{name}", ok=(201, 204))
            self._known_traits.add(name)


class PlacementNameUnknown(PlacementError):
    """Placement does not know a resource class or trait we sent."""

    code = "vgpu_driver.placement.name_unknown"


def _names_unknown(response: Response) -> bool:
    """Placement's words for a class or trait it does not know, on every
    request that can name one (inventories, traits, the reshaper,
    allocations): its ResourceClassNotFound and TraitNotFound."""
    detail = response.detail.lower()
    return "no such resource class" in detail or "no such trait" in detail


def _json(raw: Any) -> Any:
    try:
        return raw.json()
    except ValueError:
        return raw.text


def client_from_conf(
    conf: cfg.ConfigOpts, sleep: Callable[[float], None] = time.sleep
) -> PlacementClient:
    """A client from ``[placement]``, read exactly like nova.conf's. A
    Placement that refuses or drops the first connection (found by
    asking it) is tried ``[placement] max_attempts`` times, as requests
    are."""
    attempts = max(1, int(conf.placement.max_attempts))
    delay = float(conf.placement.retry_delay)
    for attempt in range(1, attempts + 1):
        try:
            return _connect(conf)
        except PlacementUnavailable as exc:
            if attempt == attempts:
                raise PlacementUnavailable(
                    method="GET",
                    url=exc.kwargs.get("url", "[placement] endpoint"),
                    attempts=attempts,
                    reason=exc.kwargs.get("reason", str(exc)),
                ) from exc
            LOG.warning(
                "Placement did not answer (%s); retrying in %.1fs",
                exc.kwargs.get("reason", exc),
                delay,
            )
            sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


def _connect(conf: cfg.ConfigOpts) -> PlacementClient:
    import openstack.connection

    group = "placement"
    try:
        auth = ks_loading.load_auth_from_conf_options(conf, group)
        session = ks_loading.load_session_from_conf_options(
            conf, group, auth=auth
        )
        early: list[int] = []
        session.session.hooks["response"].append(
            lambda *_a, **_k: early.append(1)
        )
        connection = openstack.connection.Connection(
            session=session, oslo_conf=conf
        )
        adapter = connection.placement
        max_attempts = conf.placement.max_attempts
        retry_delay = conf.placement.retry_delay
    except (
        ks_exc.DiscoveryFailure,
        ks_exc.ConnectionError,
        ks_exc.RequestTimeout,
    ) as exc:
        # the endpoint is found by asking Placement: it is down or wrong
        raise PlacementUnavailable(
            method="GET",
            url=conf.placement.endpoint_override or "[placement] endpoint",
            attempts=1,
            reason=f"{type(exc).__name__}: {exc}",
        ) from exc
    except (
        ks_exc.ClientException,
        SDKException,
        cfg.Error,
        ValueError,
    ) as exc:
        raise PlacementConfigInvalid(
            reason=f"{type(exc).__name__}: {exc}"
        ) from exc
    client = PlacementClient(
        adapter, max_attempts=max_attempts, retry_delay=retry_delay
    )
    # count what keystoneauth sends on its own too (version discovery,
    # which may already have happened while building the adapter)
    client.on_wire = len(early)
    session.session.hooks["response"] = [client.count_wire]
    return client
