"""``hermes_actors.adapters.backoff``: the pull adapters' pauses after failures."""

from __future__ import annotations

from hermes_actors.adapters.backoff import BACKOFF, pause_after


def test_the_pause_grows_with_the_failures_then_stays_at_the_last():
    assert [pause_after(n) for n in range(8)] == [1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 30.0, 30.0]
    assert pause_after(0) == BACKOFF[0]
    assert [pause_after(n, (0.1, 0.5)) for n in range(3)] == [0.1, 0.5, 0.5]
