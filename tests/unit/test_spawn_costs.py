"""What Nova's calls around a spawn and a delete cost beside the bind
(#24): a guest defined, undefined and released looks at that guest's
devices alone, and what goes on disk for them does not grow with the
mdevs the host has."""

from __future__ import annotations

import pytest

from tests.dense_service import service
from vgpu_driver.model.users import Users
from vgpu_driver.sim import guest_xml


class _UnwalkableUsers(Users):
    """The devices in use, refusing to be walked whole while
    ``refusing``."""

    refusing = True

    def _check(self):
        if self.refusing:
            raise AssertionError("walked every device in use")

    def __iter__(self):
        self._check()
        return dict.__iter__(self)

    def items(self):
        self._check()
        return dict.items(self)

    def keys(self):
        self._check()
        return dict.keys(self)

    def values(self):
        self._check()
        return dict.values(self)


def _unwalkable(driver):
    ledger = driver._refresher.binder.ledger
    ledger.view.used = _UnwalkableUsers(ledger.view.used)
    return ledger


@pytest.mark.parametrize("told", ["guest_undefined", "domain_event"])
def test_a_guest_gone_and_released_walks_no_other_guest(tmp_path, told):
    """Nova deletes an instance: its guest undefined (told by
    ``guest_undefined``, or by its domain event alone), then
    ``release_mdevs``. The devices it had are found from its own entry,
    not by walking every device in use; they are free after."""
    host, driver, _tree, guests = service(tmp_path, (2, 24, 16))
    instance = guests[3]
    had = set(driver.instance_devices()[instance]["in_use"])
    assert had
    ledger = _unwalkable(driver)
    guest_xml.delete(host.connection().lookupByUUIDString(instance))
    driver.domain_event(instance, False)
    freed = (
        driver.guest_undefined(instance) if told == "guest_undefined" else []
    )
    released = driver.release_mdevs(instance)
    ledger.view.used.refusing = False
    assert had <= set(freed) | set(released) | driver.free_mdevs()
    assert instance not in driver.instance_devices()
    assert not had & set(ledger.view.used)
    # the other guests keep theirs
    assert set(driver.instance_devices()) == set(guests) - {instance}


def test_users_keeps_each_guests_devices_in_step():
    """A device moved to another guest, deleted or popped leaves its old
    guest's entry; a guest with none left has no entry."""
    used = Users({"m1": "g1", "m2": "g1", "m3": "g2"})
    assert used.of_guest("g1") == {"m1", "m2"}
    used["m2"] = "g2"
    assert used.of_guest("g1") == {"m1"} and used.of_guest("g2") == {
        "m2",
        "m3",
    }
    del used["m1"]
    assert used.of_guest("g1") == frozenset() and "g1" not in used._devices_of
    assert used.pop("m3") == "g2" and used.of_guest("g2") == {"m2"}
    used.update({"m4": "g3"})
    assert used.of_guest("g3") == {"m4"}
    assert used.pop("gone", "nobody") == "nobody"
    with pytest.raises(KeyError):
        used.pop("gone")
    # the guests' side, once built, is kept (not built again per ask)
    built = used._devices_of
    assert used.of_guest("g2") == {"m2"} and used._devices_of is built
    assert dict(used) == {"m2": "g2", "m4": "g3"} == used
    copy = used.copy()
    copy["m5"] = "g3"
    assert copy.of_guest("g3") == {"m4", "m5"} and used.of_guest("g3") == {
        "m4"
    }
    # written before the guests' side is first asked for, and after
    fresh = Users({"a": "g"})
    fresh["b"] = "g"
    del fresh["a"]
    assert fresh.of_guest("g") == {"b"}
    fresh["c"] = "h"
    fresh["b"] = "h"
    assert fresh.of_guest("h") == {"b", "c"} and fresh.of_guest("g") == set()
    for refused in (used.setdefault, used.popitem, used.clear):
        with pytest.raises(TypeError, match="each guest's devices follow"):
            refused("m9")
