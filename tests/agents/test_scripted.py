"""``ScriptedAgent``'s ``sleep <s>`` and ``delegate <s>`` for any number of seconds (§1.1)."""

from __future__ import annotations

import threading

import pytest

from hermes_actors.agents.base import TurnResult
from hermes_actors.testing import ScriptedAgent, wait_until

from .conftest import make_request


@pytest.mark.parametrize("seconds", ["inf", "1e10", "1e400"])
def test_a_sleep_longer_than_any_timer_lasts_until_interrupted(seconds):
    # it failed the turn at once with OverflowError ("timestamp out of range")
    agent = ScriptedAgent()
    results: list = []
    errors: list = []

    def turn():
        try:
            results.append(agent.run_turn(make_request(f"sleep {seconds}")))
        except Exception as exc:  # noqa: BLE001 - the bug being shown
            errors.append(exc)

    worker = threading.Thread(target=turn)
    worker.start()
    wait_until(lambda: agent.log or errors, message="the turn's start")  # now it sleeps
    agent.interrupt("/stop")
    worker.join(10)
    assert errors == []
    assert results == [TurnResult(reply=None, status="interrupted")]
