"""A store failure after a turn's reply is recorded does not hold the reply back."""

from __future__ import annotations

from hermes_actors import Gateway, InMemoryAdapter, MessageEvent, SessionSource, load_config
from hermes_actors.agents.base import TurnResult
from hermes_actors.errors import StoreError
from hermes_actors.testing import FakeClock


class _CountingAgent:
    """Answers ``echo: <text>`` and reports token usage."""

    def run_turn(self, request):
        return TurnResult(reply=f"echo: {request.message}",
                          usage={"input_tokens": 5, "output_tokens": 2, "prompt_tokens": 5})

    def interrupt(self, reason=None):
        pass

    def release_clients(self):
        pass

    def close(self):
        pass


def test_a_failed_usage_write_still_delivers_the_recorded_reply(tmp_path):
    clock = FakeClock()
    adapter = InMemoryAdapter("telegram")
    gw = Gateway(tmp_path / "home", config=load_config({}, env={}),
                 agent_factory=lambda ctx: _CountingAgent(), adapters=[adapter], clock=clock)
    gw.start()
    try:
        store = gw.store
        real_update = store.update_session
        failures = []

        def update_once(*args, **kwargs):
            if not failures:
                failures.append(1)
                raise StoreError("the database is gone for a moment")
            return real_update(*args, **kwargs)

        store.update_session = update_once
        src = SessionSource("telegram", chat_id="42", user_id="7")
        gw.submit(MessageEvent(source=src, text="hello"))
        assert gw.wait_idle(10)
        # housekeeping's ledger sweep would send a reply left owed; it must not be needed
        gw.housekeeping_tick()
        assert gw.wait_idle(10)
        assert failures
        assert "echo: hello" in adapter.texts()
        owed = store.ledger_rows(("pending", "attempting", "failed"))
        assert owed == []
    finally:
        gw.stop(drain_timeout=5)
