"""When the library reads the node's tree from Placement again: after its
``refresh_interval``, each host at its own moment within a quarter of
the interval more, so hosts started together do not all read at once."""

from __future__ import annotations

from vgpu_driver.placement.remote import Remote, RemoteView

INTERVAL = 300.0


def _views(now: list[float], count: int) -> list[RemoteView]:
    views = []
    for _ in range(count):
        view = RemoteView(
            None,  # type: ignore[arg-type]  # stale() asks nothing of it
            "node1",
            None,  # type: ignore[arg-type]
            refresh_interval=INTERVAL,
            clock=lambda: now[0],
        )
        view._read_at = 0.0  # as a refresh at time 0 leaves it
        views.append(view)
    return views


def test_a_view_never_read_is_stale():
    view = _views([0.0], 1)[0]
    view.invalidate()
    assert view.stale()


def test_views_read_together_go_stale_spread_over_a_quarter_interval():
    now = [0.0]
    views = _views(now, 40)
    now[0] = INTERVAL - 0.001
    assert not any(v.stale() for v in views)  # none before the interval
    now[0] = INTERVAL * 1.125
    stale = sum(v.stale() for v in views)
    assert 0 < stale < len(views)  # some now, the others later
    now[0] = INTERVAL * 1.25
    assert all(v.stale() for v in views)


def test_the_tree_places_children_under_parents_listed_after_them():
    """Placement lists a tree in no promised order: a grandchild before
    its parent is placed all the same; a provider whose parent is not in
    the listing (moved out between two reads) is left out, not waited
    for."""
    [view] = _views([0.0], 1)
    view.known_root = "root"

    def remote(uuid: str, parent: str | None) -> Remote:
        return Remote(uuid, f"p-{uuid}", parent, 1, {}, frozenset())

    for entry in (
        remote("grandchild", "child"),
        remote("orphan", "elsewhere"),
        remote("child", "root"),
        remote("root", None),
    ):
        view.providers[entry.uuid] = entry
    tree = view.tree()
    assert tree.exists("grandchild") and tree.exists("child")
    assert tree.data("grandchild").parent_uuid == "child"
    assert not tree.exists("orphan")
