"""libvirt's node-device events: which parents a reading reads again.

A parent's XML changes (its ``availableInstances``) when an mdev is
made, started, stopped or removed on it, or on a VF of the same card;
libvirt's udev monitor sees the kernel add or remove that mdev and sends
a lifecycle event naming it (``VIR_NODE_DEVICE_EVENT_CREATED`` ... since
libvirt 2.2). Where the caller runs a libvirt event loop and asked for
them (:meth:`NodeDeviceEvents.want`), the callbacks are registered on
each connection in use, and a reading reads again only the parents the
events since the last one name: a steady refresh makes no ``XMLDesc``
call at all, where it made one per parent. The other parents are as last
read until the next full listing (every ``relist_interval`` seconds, a
lost connection, a parent registered or gone in sysfs), which is the
bound on a change libvirt sends no event for.

:class:`NodeDeviceEvents` owns the names the events gave since the last
reading, and the connection the callbacks are on.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Collection
from typing import Any

from oslo_log import log as logging

from vgpu_driver.host.connection import Connection
from vgpu_driver.host.listing import Listed
from vgpu_driver.host.mdev_cache import MdevCache
from vgpu_driver.model import naming
from vgpu_driver.model.device import Parent

LOG = logging.getLogger(__name__)

# what an event names when every parent is to be read again: the
# callbacks were (re)registered, and what came before is unknown
EVERY = ""


class NodeDeviceEvents:
    def __init__(self, link: Connection) -> None:
        self.link = link
        self._names: collections.deque[str] = collections.deque()
        self._wanted = False
        self._watched: Any = None  # the connection the callbacks are on
        self._asked: Any = None  # the last connection registered on

    def want(self) -> None:
        """Register the callbacks on the connection each reading uses
        (the caller runs a libvirt event loop, as a compute service
        does)."""
        self._wanted = True

    def note(self, name: str) -> None:
        """Safe from libvirt's event thread: no lock, no call, no log."""
        self._names.append(name)

    def watch_again(self, conn: Any) -> None:
        """At each reading: register on ``conn`` if it is new (asked
        once per connection: one that refuses is read as if unwatched)."""
        if not self._wanted or conn is self._asked:
            return
        self._asked, self._watched = conn, None
        api = self.link.api
        lifecycle, update = api.nodedev_lifecycle, api.nodedev_update
        try:
            conn.nodeDeviceEventRegisterAny(
                None,
                lifecycle,
                lambda _c, d, _e, _x, _o: self.note(d.name()),
                None,
            )
            conn.nodeDeviceEventRegisterAny(
                None, update, lambda _c, d, _o: self.note(d.name()), None
            )
        except (api.error, AttributeError) as exc:
            LOG.info(
                "No node-device events on this libvirt connection (%s): "
                "every parent's XML is read at every refresh",
                exc,
            )
            return
        self._watched = conn
        self.note(EVERY)  # what changed before the callbacks is unknown

    def take(self, conn: Any) -> set[str] | None:
        """The node devices the events named since the last call; None
        where the callbacks are not on ``conn`` or every parent is to be
        read again."""
        names = set()
        while self._names:
            names.add(self._names.popleft())
        if conn is not self._watched or EVERY in names:
            return None
        return names


def parents_named(
    names: set[str],
    listed: Collection[str],
    parent_of: Callable[[str], str | None],
    last: Callable[[str], Parent | None],
) -> set[str] | None:
    """The parents of ``listed`` whose XML the events' ``names`` say may
    have changed: a parent named, an mdev's parent (``parent_of`` an
    mdev read, or as libvirt >= 7.3 names it), and for a VF every VF of
    its card (an mdev made on one changes its siblings' rooms: ``last``
    gives a parent as last read). None: read them all (an mdev whose
    parent cannot be told). A device neither a parent nor an mdev
    changes none."""
    only = names & set(listed)
    for name in names - only:
        if not name.startswith("mdev_"):
            continue
        parent = parent_of(name) or naming.mdev_parent_name(name)
        if parent not in listed:
            return None
        only.add(parent)
    cards = {p.physical_function for p in map(last, only) if p is not None}
    cards.discard(None)
    if cards:
        for name in listed:
            read = last(name)
            if read is not None and read.physical_function in cards:
                only.add(name)
    return only


def parents_to_read(
    names: set[str] | None,
    also: set[str],
    listed: Listed,
    mdevs: MdevCache,
    last: Callable[[str], Parent | None],
) -> set[str] | None:
    """The parents whose XML a reading reads (None: all): those the
    events' ``names`` name, and ``also`` (those sysfs and libvirt did not
    agree on yet, those the adapter changed); see
    :func:`parents_named`."""
    if names is None:
        return None
    return parents_named(
        names | also,
        {name for name, _ in listed},
        lambda name: mdev.parent if (mdev := mdevs.get(name)) else None,
        last,
    )
