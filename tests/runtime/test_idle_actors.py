"""Live session actors are bounded: idle ones retire, the store keeps every session."""

from __future__ import annotations

import os
import threading

from hermes_actors import MessageEvent, SessionSource
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.turn import FAILED_NOTICE


class TestIdleRetirement:
    """Actors idle past session_actor_idle_secs stop and come back on the next message."""

    def test_many_sessions_retire_and_return(self, make_harness):
        h = make_harness(session_actor_idle_secs=300)
        # 10,000 under gevent (greenlet actors); plain threads run a smaller count so the
        # suite stays fast, the mechanism being the same.
        n = 10_000 if os.environ.get("HERMES_TEST_BACKEND") == "gevent" else 2_000
        for i in range(n):
            h.gw.submit(MessageEvent(source=SessionSource("telegram", chat_id=str(i)),
                                     text=f"m{i}"))
        h.idle()
        assert len(h.texts()) == n
        assert h.gw.stats()["live_sessions"] == n
        h.gw.housekeeping_tick()
        assert h.gw.stats()["live_sessions"] == n  # not idle long enough yet
        h.clock.advance(301)
        h.gw.housekeeping_tick()
        assert h.gw.stats()["live_sessions"] == 0
        assert len(h.gw.store.list_sessions()) == n
        h.send("back", chat_id="5")
        h.idle()
        assert h.texts()[-1] == "echo: back"
        assert h.gw.stats()["live_sessions"] == 1

    def test_busy_actor_is_not_retired(self, make_harness):
        h = make_harness(session_actor_idle_secs=1)
        h.hold("g")
        h.clock.advance(10)
        h.gw.housekeeping_tick()
        assert h.gw.stats()["live_sessions"] == 1
        h.gates.open("g")
        h.idle()
        assert h.texts() == ["held g"]


class TestTurnTimeout:
    """Housekeeping interrupts a turn that runs longer than agent.timeout."""

    def test_overdue_turn_interrupted(self, make_harness):
        h = make_harness(agent={"timeout": 60})
        event_id = h.send("wait g")
        assert h.gates.wait_until_waiting("g")
        h.clock.advance(30)
        h.gw.housekeeping_tick()
        assert h.gw.session_statistics(h.key()).running is True
        h.clock.advance(31)
        h.gw.housekeeping_tick()
        h.idle()
        assert h.gw.session_statistics(h.key()).running is False
        # the message's final answer says so (it is not left unanswered)
        assert h.texts() == [FAILED_NOTICE.format("TimeoutError")]
        assert h.adapter.sent[0].in_reply_to == (event_id,) and h.adapter.sent[0].final


class TestHousekeepingPrune:
    """The hourly prune drops stale routing entries and keeps their transcripts."""

    def test_prune_keeps_transcript(self, make_harness):
        h = make_harness(session_store_max_age_days=1, housekeeping={"first_delay": 0})
        h.send("old")
        h.idle()
        session_id = h.gw.store.get(h.key()).session_id
        h.clock.advance(2 * 86400)
        h.gw.housekeeping_tick()
        assert h.gw.store.get(h.key()) is None
        assert [m["content"] for m in h.gw.store.load_transcript(session_id)] == [
            "old", "echo: old"]

    def test_a_message_that_comes_while_the_prune_runs_is_answered(self, make_harness,
                                                                     monkeypatch):
        # The prune asks the runtime about each stale key, then deletes the ones nobody
        # uses: a message for one of them that arrived in between found its entry at the
        # turn's start and lost it before the turn began (the user was told the agent
        # failed, StoreError, and the message was consumed).
        checked: list[str] = []
        paused, go_prune = threading.Event(), threading.Event()
        real_check = Gateway._has_active_processes

        def check(gw, key):
            checked.append(key)
            if len(checked) == 2:  # the prune has judged the first key: hold it here
                paused.set()
                assert go_prune.wait(10)
            return real_check(gw, key)

        monkeypatch.setattr(Gateway, "_has_active_processes", check)
        h = make_harness(session_store_max_age_days=1, session_actor_idle_secs=60,
                         housekeeping={"first_delay": 0})
        for chat in ("1", "2"):
            h.send("old", chat_id=chat)
        h.idle()
        h.clock.advance(2 * 86400)
        tick = threading.Thread(target=h.gw.housekeeping_tick)  # retires both, then prunes
        tick.start()
        assert paused.wait(10)
        beginning, go_turn = threading.Event(), threading.Event()
        store = h.gw.store
        real_begin = store.begin_turn

        def begin_turn(*args, **kwargs):
            beginning.set()
            assert go_turn.wait(10)
            return real_begin(*args, **kwargs)

        store.begin_turn = begin_turn
        chat = checked[0].rsplit(":", 1)[1]
        h.send("back", chat_id=chat)
        assert beginning.wait(10)  # the turn found the entry and is about to begin
        go_prune.set()
        tick.join(10)
        assert store.get(checked[0]) is None  # pruned meanwhile
        go_turn.set()
        h.idle()
        assert h.texts()[-1] == "echo: back"
        entry = store.get(checked[0])
        assert entry is not None and entry.active_turn_token is None

    def test_stats_record(self, make_harness):
        h = make_harness()
        h.send("hi")
        h.idle()
        stats = h.gw.stats()
        assert stats["state"] == "running"
        assert stats["live_sessions"] == 1
        assert stats["cache"]["size"] == 1
        assert stats["supervisor"]["suspensions"] == 0
        assert stats["outstanding"] == 0
