"""When the library reads the node's tree from Placement again: after its
``refresh_interval``, each host at its own moment within a quarter of
the interval more, so hosts started together do not all read at once."""

from __future__ import annotations

from vgpu_driver.placement.remote import RemoteView

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
