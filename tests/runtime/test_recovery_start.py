"""Startup recovery in-process: markers settled in one transaction, owed replies delivered.

The crash itself is simulated by leaving a durable state behind (a turn marker, a persisted
reply, no ``.clean_shutdown``); real SIGKILLs are in ``tests/reliability``.
"""

from __future__ import annotations

import pytest

from hermes_actors import EchoAgent, Gateway, InMemoryAdapter, SessionSource, load_config
from hermes_actors.runtime.delivery import RECOVERED_PREFIX
from hermes_actors.store import SessionStore
from hermes_actors.testing import FakeClock


def _crashed_home(home, clock) -> dict[str, str]:
    """Two sessions mid-turn: one whose reply was persisted, one without a reply."""
    store = SessionStore(home / "sessions", clock=clock, mirror_interval=None)
    keys = {}
    for chat, reply in (("1", "the answer"), ("2", None)):
        entry = store.get_or_create_session(SessionSource("telegram", chat_id=chat, user_id="7"))
        token = store.mark_turn_active(entry.session_key)
        store.append_message(entry.session_id, {"role": "user", "content": f"q{chat}"},
                             turn_token=token)
        if reply:
            store.append_message(entry.session_id, {"role": "assistant", "content": reply},
                                 turn_token=token, is_reply=True)
        keys[chat] = entry.session_key
    store.close()
    return keys


@pytest.mark.parametrize("ledger", [True, False])
def test_recovered_reply_is_delivered_once_and_markers_are_settled(tmp_path, ledger):
    clock = FakeClock()
    home = tmp_path / "home"
    keys = _crashed_home(home, clock)
    adapter = InMemoryAdapter("telegram")
    gw = Gateway(home, config=load_config({"delivery_ledger": ledger}, env={}),
                 agent_factory=lambda _ctx: EchoAgent(), adapters=[adapter], clock=clock)
    try:
        report = gw.start()
        assert report.recovered_replies == 1
        assert gw.wait_idle(10)
        assert adapter.texts("1") == [RECOVERED_PREFIX + "the answer"]
        # the other session was resumed (auto-continue) and its marker is gone
        assert report.resumed == [keys["2"]]
        assert all(gw.store.get(k).active_turn_token is None for k in keys.values())
        if ledger:
            assert gw.store.ledger_rows(("pending", "attempting", "failed")) == []
    finally:
        gw.stop(drain_timeout=5)
