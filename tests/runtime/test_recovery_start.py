"""Startup recovery in-process: markers settled in one transaction, owed replies delivered.

The crash itself is simulated by leaving a durable state behind (a turn marker, a persisted
reply, no ``.clean_shutdown``); real SIGKILLs are in ``tests/reliability``.
"""

from __future__ import annotations

import pytest

from hermes_actors import EchoAgent, Gateway, InMemoryAdapter, SessionSource, load_config
from hermes_actors.model.silence import SILENCE_NOTICE
from hermes_actors.runtime.delivery import RECOVERED_PREFIX
from hermes_actors.store import SessionStore
from hermes_actors.store.transcript import reply_after_marker
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


class _CountingAgent(EchoAgent):
    """An echo agent that records every message it is asked to answer."""

    def __init__(self, runs: list[str]) -> None:
        super().__init__()
        self._runs = runs

    def run_turn(self, request):
        self._runs.append(request.message)
        return super().run_turn(request)


def _start_counting(home, clock, runs):
    """A started gateway on ``home`` whose agent records what it runs in ``runs``; returns
    it, its adapter and its start's report."""
    adapter = InMemoryAdapter("telegram")
    gw = Gateway(home, config=load_config({}, env={}),
                 agent_factory=lambda _ctx: _CountingAgent(runs), adapters=[adapter],
                 clock=clock)
    return gw, adapter, gw.start()


def _foreign_reply_home(home, clock, reply: str | None, *, internal: bool = False,
                        reply_age: float = 0.0, degraded: bool = False) -> str:
    """A session mid-turn whose transcript rows were written without the gateway's turn
    tags (an agent writing its own rows, a store migrated from the reference gateway): the
    user message, then, when given, the reply ``reply_age`` seconds before the marker."""
    if degraded:
        home.mkdir(parents=True, exist_ok=True)
        (home / "state.db").write_bytes(b"this is not a SQLite database\x00" * 200)
    store = SessionStore(home / "sessions", clock=clock, mirror_interval=None)
    assert store.degraded == degraded
    entry = store.get_or_create_session(SessionSource("telegram", chat_id="9", user_id="7"))
    store.append_message(entry.session_id, {"role": "user", "content": "question"})
    if reply is not None and reply_age:
        store.append_message(entry.session_id, {"role": "assistant", "content": reply,
                                                "timestamp": clock.time() - reply_age})
    clock.advance(5)
    store.mark_turn_active(entry.session_key, internal=internal)
    if reply is not None and not reply_age:
        clock.advance(2)
        store.append_message(entry.session_id, {"role": "assistant", "content": reply})
    store.close()
    return entry.session_key


class TestReplyInTheTranscript:
    """A marked turn whose reply is already the transcript's last message (written by no turn
    of the gateway, after the marker) is delivered once as recovered, never re-run; a silence
    marker is owed nothing on an internal turn and the silence notice on a human one; a reply
    older than the marker belongs to an earlier turn and the turn resumes instead."""

    @pytest.mark.parametrize("degraded", [False, True])
    def test_delivered_once_as_recovered_and_not_rerun(self, tmp_path, degraded):
        clock, runs = FakeClock(), []
        home = tmp_path / "home"
        key = _foreign_reply_home(home, clock, "the answer", degraded=degraded)
        gw, adapter, report = _start_counting(home, clock, runs)
        try:
            assert gw.wait_idle(10)
            assert report.recovered_replies == 1 and report.resumed == []
            assert adapter.texts("9") == [RECOVERED_PREFIX + "the answer"]
            assert runs == []
            entry = gw.store.get(key)
            assert entry.active_turn_token is None and not entry.resume_pending
            [row] = gw.store.ledger_rows()
            assert (row["kind"], row["state"]) == ("recovered", "delivered")
        finally:
            gw.stop(drain_timeout=5)
        # a second (clean) start owes nothing more
        gw, adapter, report = _start_counting(home, clock, runs)
        try:
            assert gw.wait_idle(10) and adapter.sent == [] and runs == []
        finally:
            gw.stop(drain_timeout=5)

    def test_silence_on_a_human_turn_becomes_the_notice(self, tmp_path):
        clock, runs = FakeClock(), []
        _foreign_reply_home(tmp_path / "home", clock, "NO_REPLY")
        gw, adapter, report = _start_counting(tmp_path / "home", clock, runs)
        try:
            assert gw.wait_idle(10)
            assert adapter.texts("9") == [SILENCE_NOTICE] and runs == []
            assert report.resumed == []
        finally:
            gw.stop(drain_timeout=5)

    def test_silence_on_an_internal_turn_is_owed_nothing(self, tmp_path):
        clock, runs = FakeClock(), []
        key = _foreign_reply_home(tmp_path / "home", clock, "[SILENT]", internal=True)
        gw, adapter, report = _start_counting(tmp_path / "home", clock, runs)
        try:
            assert gw.wait_idle(10)
            assert adapter.sent == [] and runs == [] and report.resumed == []
            assert gw.store.get(key).active_turn_token is None
            assert gw.store.ledger_rows() == []
        finally:
            gw.stop(drain_timeout=5)

    def test_an_earlier_turns_reply_is_not_adopted(self, tmp_path):
        clock, runs = FakeClock(), []
        key = _foreign_reply_home(tmp_path / "home", clock, "old answer", reply_age=1.0)
        gw, adapter, report = _start_counting(tmp_path / "home", clock, runs)
        try:
            assert gw.wait_idle(10)
            assert report.recovered_replies == 0 and report.resumed == [key]
            assert len(runs) == 1 and "interrupted by a gateway restart" in runs[0]
            assert not any(t.startswith(RECOVERED_PREFIX) for t in adapter.texts("9"))
        finally:
            gw.stop(drain_timeout=5)

    @pytest.mark.parametrize("last", [
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "calling", "tool_calls": [{"name": "x"}]},
        {"role": "assistant", "content": "   "},
    ])
    def test_a_tool_step_or_blank_text_is_no_reply(self, last):
        assert reply_after_marker({**last, "timestamp": 10.0, "turn_token": None}, "t",
                                  5.0) is None

    def test_another_turns_row_is_no_reply(self):
        row = {"role": "assistant", "content": "x", "timestamp": 10.0}
        assert reply_after_marker({**row, "turn_token": "t"}, "t", 5.0) == "x"
        assert reply_after_marker({**row, "turn_token": "other"}, "t", 5.0) is None
        assert reply_after_marker({**row, "turn_token": None}, "t", None) is None


class TestStuckLoopCountAcrossAGracefulStop:
    """A session flagged to resume whose turn has not run again (its platform was offline
    at the start) keeps its stuck-loop count across a graceful stop, as across a crash."""

    def test_a_waiting_session_keeps_its_count(self, tmp_path):
        from hermes_actors import MessageEvent
        from hermes_actors.testing import Gates, ScriptedAgent

        home, gates = tmp_path / "home", Gates()
        key = "agent:main:telegram:dm:1"

        def boot(connected: bool = True):
            adapter = InMemoryAdapter("telegram")
            adapter.connected = connected
            gw = Gateway(home, config=load_config({}, env={}),
                         agent_factory=lambda _ctx: ScriptedAgent(gates=gates),
                         adapters=[adapter], clock=FakeClock())
            return gw, gw.start()

        def counted(gw) -> int:
            return gw.stats()["supervisor"]["counted_sessions"]

        gw, _ = boot()
        gw.submit(MessageEvent(source=SessionSource("telegram", chat_id="1"), text="wait g"))
        assert gates.wait_until_waiting("g")
        gw.stop(drain_timeout=0.2)  # the drain deadline: counted once, flagged to resume
        gw, report = boot(connected=False)  # not auto-continued: the platform is offline
        try:
            assert report.resumed == [] and gw.store.get(key).resume_pending
            assert counted(gw) == 1
        finally:
            gw.stop(drain_timeout=1)  # nothing runs: a graceful stop
        gw, _ = boot(connected=False)
        try:
            assert gw.store.get(key).resume_pending
            assert counted(gw) == 1
        finally:
            gates.open_all()
            gw.stop(drain_timeout=1)


class TestMessagesDuringRecovery:
    """A message submitted while the start recovers is held by the restore gate; a resumed
    session's note rides on it (§17.21: no empty auto-continue event then)."""

    @pytest.fixture
    def paused_recovery(self, monkeypatch):
        """``(reached, go)``: the start's recovery sets ``reached`` just before it picks the
        sessions to resume, then waits for ``go`` (messages submitted meanwhile are held)."""
        import threading

        from hermes_actors.runtime.supervisor import SupervisorActor

        reached, go = threading.Event(), threading.Event()
        candidates = SupervisorActor._auto_continue_candidates

        def paused(self):
            reached.set()
            assert go.wait(10)
            return candidates(self)

        monkeypatch.setattr(SupervisorActor, "_auto_continue_candidates", paused)
        yield reached, go
        go.set()

    @pytest.mark.parametrize("mode", ["interrupt", "queue"])
    def test_a_held_message_carries_the_note(self, tmp_path, paused_recovery, mode):
        import threading

        from hermes_actors import MessageEvent

        clock, home, runs = FakeClock(), tmp_path / "home", []
        key = _crashed_home(home, clock)["2"]  # mid-turn, no reply: resumed
        reached, go = paused_recovery
        gw = Gateway(home, config=load_config({"busy_input_mode": mode}, env={}),
                     agent_factory=lambda _ctx: _CountingAgent(runs),
                     adapters=[InMemoryAdapter("telegram")], clock=clock)
        reports: list = []
        starter = threading.Thread(target=lambda: reports.append(gw.start()))
        starter.start()
        try:
            assert reached.wait(10)
            gw.submit(MessageEvent(source=SessionSource("telegram", chat_id="2", user_id="7"),
                                   text="hello"))
            go.set()
            starter.join(10)
            assert reports[0].resumed == [key]
            assert gw.wait_idle(10)
            assert len(runs) == 1, runs
            assert runs[0].endswith("hello") and "System note" in runs[0]
        finally:
            go.set()
            gw.stop(drain_timeout=5)

    def test_held_messages_queue_behind_the_one_carrying_the_note(self, tmp_path,
                                                                   paused_recovery):
        # interrupt mode: two messages come while the start recovers; both were held (queued,
        # §7 step 5), so the second waits for the first, which carries the resume note,
        # instead of cutting it: the interrupted task is continued and both are answered
        import threading

        from hermes_actors import MessageEvent
        from hermes_actors.testing import Gates, ScriptedAgent

        clock, home, gates = FakeClock(), tmp_path / "home", Gates()
        key = _crashed_home(home, clock)["2"]  # mid-turn, no reply: resumed
        reached, go = paused_recovery
        adapter = InMemoryAdapter("telegram")
        gw = Gateway(home, config=load_config({}, env={}),
                     agent_factory=lambda _ctx: ScriptedAgent(gates=gates),
                     adapters=[adapter], clock=clock)
        reports: list = []
        starter = threading.Thread(target=lambda: reports.append(gw.start()))
        starter.start()
        try:
            assert reached.wait(10)
            source = SessionSource("telegram", chat_id="2", user_id="7")
            gw.submit(MessageEvent(source=source, text="hold g"))
            gw.submit(MessageEvent(source=source, text="again"))
            go.set()
            starter.join(10)
            assert reports[0].resumed == [key]
            gw.session_statistics(key)  # both held messages reached the actor
            gates.open("g")
            assert gw.wait_idle(10)
            assert adapter.texts("2") == ["resumed: q2\nheld g", "echo: again"]
            assert not gw.store.get(key).resume_pending
        finally:
            go.set()
            gates.open_all()
            gw.stop(drain_timeout=5)


def test_a_new_waiting_in_the_inbox_is_not_preceded_by_a_resumed_turn(tmp_path):
    # the user sent /new just before the crash: at the start the old task is not continued
    # first (a turn that the /new then cuts); the /new simply starts a new session
    from hermes_actors import MessageEvent
    from hermes_actors.runtime.session_core import NEW_SESSION

    clock, home, runs = FakeClock(), tmp_path / "home", []
    key = _crashed_home(home, clock)["2"]  # mid-turn, no reply: resumable
    store = SessionStore(home / "sessions", clock=clock, mirror_interval=None)
    old = store.get(key).session_id
    store.accept_event(key, MessageEvent(source=SessionSource("telegram", chat_id="2",
                                                              user_id="7"), text="/new"))
    store.close()
    gw, adapter, report = _start_counting(home, clock, runs)
    try:
        assert gw.wait_idle(10)
        assert report.resumed == []
        assert adapter.texts("2") == [NEW_SESSION]
        assert runs == []
        entry = gw.store.get(key)
        assert entry.prev_session_id == old and not entry.resume_pending
        assert [m["content"] for m in gw.store.load_transcript(old)] == ["q2"]
    finally:
        gw.stop(drain_timeout=5)


def test_an_earlier_turns_owed_reply_does_not_cancel_the_resume_of_a_later_one(tmp_path):
    # turn 1's reply failed to send (it waits in the ledger for a sweep); turn 2 was
    # mid-turn at the crash. The restart redelivers reply 1 AND resumes turn 2: the
    # redelivered reply answers turn 1, not the message of turn 2
    clock, home, runs = FakeClock(), tmp_path / "home", []
    store = SessionStore(home / "sessions", clock=clock, mirror_interval=None)
    entry = store.get_or_create_session(SessionSource("telegram", chat_id="3", user_id="7"))
    key, sid = entry.session_key, entry.session_id
    first = store.begin_turn(key, sid, user_message={"role": "user", "content": "one"})
    oid = store.ledger_record(session_key=key, platform="telegram", chat_id="3",
                              thread_id=None, content="echo: one", kind="reply", token=first,
                              clear_turn=True, claim=True,
                              reply=(sid, {"role": "assistant", "content": "echo: one"}))
    assert store.ledger_finish(oid, "failed", error="network") == "failed"
    clock.advance(1)
    store.begin_turn(key, sid, user_message={"role": "user", "content": "two"})
    store.close()  # ... and the process dies mid-turn
    gw, adapter, report = _start_counting(home, clock, runs)
    try:
        assert gw.wait_idle(10)
        assert report.redelivered == 1
        assert report.resumed == [key]
        assert adapter.texts("3")[0] == RECOVERED_PREFIX + "echo: one"
        assert len(runs) == 1 and "System note" in runs[0]  # turn 2 is continued
    finally:
        gw.stop(drain_timeout=5)


def test_an_earlier_owed_reply_does_not_cancel_the_resume_after_a_drain_deadline(tmp_path):
    # the same after a graceful stop: reply 1 failed to send, turn 2 was cut at the drain
    # deadline (flagged to resume); the next start sends reply 1 and still continues turn 2
    from hermes_actors import MessageEvent
    from hermes_actors.testing import Gates, ScriptedAgent

    home, gates, log, clock = tmp_path / "home", Gates(), [], FakeClock()
    source = SessionSource("telegram", chat_id="4", user_id="7")
    key = "agent:main:telegram:dm:4"

    def boot():
        adapter = InMemoryAdapter("telegram")
        gw = Gateway(home, config=load_config({}, env={}),
                     agent_factory=lambda _ctx: ScriptedAgent(gates=gates, log=log),
                     adapters=[adapter], clock=clock)
        return gw, adapter, gw.start()

    gw, adapter, _ = boot()
    try:
        adapter.fail_sends = True
        gw.submit(MessageEvent(source=source, text="one"))
        assert gw.wait_idle(10)
        adapter.fail_sends = False
        clock.advance(1)
        gw.submit(MessageEvent(source=source, text="wait g"))
        assert gates.wait_until_waiting("g")
    finally:
        gw.stop(drain_timeout=0.2)
    assert gw.stopped_cleanly
    gw, adapter, report = boot()
    try:
        assert gw.wait_idle(10)
        assert report.redelivered == 1 and report.resumed == [key]
        assert adapter.texts("4")[0] == RECOVERED_PREFIX + "echo: one"
        assert any(seen.message.startswith("[System note:") for seen in log)
    finally:
        gates.open_all()
        gw.stop(drain_timeout=5)


class TestAFailedStart:
    """A start that fails stops what it started: the gateway is not running, takes no
    message, leaves no actor behind, and gives the home back."""

    @pytest.mark.parametrize("where", ["recover", "pending_inbox"])
    def test_nothing_is_left_running(self, tmp_path, monkeypatch, where):
        import pykka

        from hermes_actors import MessageEvent
        from hermes_actors.errors import HermesActorsError
        from hermes_actors.runtime.homelock import HomeLock
        from hermes_actors.runtime.supervisor import SupervisorActor

        def boom(*_args):
            raise RuntimeError("the start broke")

        target = SupervisorActor if where == "recover" else SessionStore
        monkeypatch.setattr(target, where, boom)
        before = len(pykka.ActorRegistry.get_all())
        gw = Gateway(tmp_path / "home", config=load_config({}, env={}),
                     adapters=[InMemoryAdapter("telegram")], clock=FakeClock())
        with pytest.raises(RuntimeError):
            gw.start()
        assert not gw.running
        with pytest.raises(HermesActorsError):
            gw.submit(MessageEvent(source=SessionSource("telegram", chat_id="1"), text="hi"))
        assert len(pykka.ActorRegistry.get_all()) == before
        HomeLock(tmp_path / "home").acquire().release()  # the home is free again
        gw.stop()  # (nothing to do)

    def test_stats_of_a_stopped_gateway(self, tmp_path):
        gw = Gateway(tmp_path / "home", config=load_config({}, env={}),
                     adapters=[InMemoryAdapter("telegram")], clock=FakeClock())
        gw.start()
        gw.stop(drain_timeout=1)
        stats = gw.stats()
        assert stats["state"] == "stopped" and "cache" not in stats
