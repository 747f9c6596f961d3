"""Turns through the Gateway: replies, failures, silence, shared sessions, statistics."""

from __future__ import annotations

import pytest

from hermes_actors import (
    Gateway,
    InMemoryAdapter,
    MessageEvent,
    SessionSource,
    TurnResult,
    load_config,
)
from hermes_actors.agents.scripted import ScriptedAgent
from hermes_actors.model.silence import SILENCE_NOTICE
from hermes_actors.runtime.turn import FAILED_NOTICE
from hermes_actors.store.store import SessionStore
from hermes_actors.testing import FakeClock, FakeMemoryProbe, node_values


@pytest.fixture
def harness_store(every_backend):
    """Every scenario here runs on each store backend."""
    return every_backend


class TestEcho:
    """A plain message gets one reply through the adapter, and both rows are persisted."""

    def test_reply_and_transcript(self, make_harness):
        h = make_harness()
        h.send("hello")
        h.idle()
        assert h.texts() == ["echo: hello"]
        entry = h.gw.store.get(h.key())
        rows = h.gw.store.load_transcript(entry.session_id)
        assert [(r["role"], r["content"]) for r in rows] == [
            ("user", "hello"), ("assistant", "echo: hello")]
        assert entry.active_turn_token is None
        assert h.gw.queue_depth(h.key()) == 0

    def test_ledger_row_delivered(self, make_harness):
        h = make_harness()
        h.send("hello")
        h.idle()
        rows = h.gw.store.ledger_rows()
        assert [(r["kind"], r["state"], r["content"]) for r in rows] == [
            ("reply", "delivered", "echo: hello")]

    def test_history_grows_across_turns(self, make_harness):
        h = make_harness()
        for text in ("one", "two", "three"):
            h.send(text)
            h.idle()
        assert [s.history_len for s in h.log] == [0, 2, 4]


class TestFailure:
    """A raising agent answers a notice, keeps the session usable and resume_pending set."""

    def test_notice_session_usable_resume_kept(self, make_harness):
        h = make_harness()
        h.send("hi")
        h.idle()
        assert h.gw.store.mark_resume_pending(h.key(), "restart_interrupted")
        h.send("fail")
        h.idle()
        assert h.texts()[-1] == FAILED_NOTICE.format("ScriptedFailure")
        assert h.gw.store.get(h.key()).resume_pending is True
        h.send("again")
        h.idle()
        assert h.texts()[-1].startswith("echo:")
        assert h.gw.store.get(h.key()).resume_pending is False

    def test_an_answered_turn_whose_cache_has_stopped_sends_nothing_more(self, make_harness):
        # a turn that outlives the shutdown's cache step: its reply went out, the checkin
        # finds no cache; the user hears no failure notice after the answer, and the
        # agent (made for this turn, never cached) is closed by the turn
        h = make_harness()
        h.hold("g")
        h.gw.services.cache.actor_ref.stop(block=True)
        h.gates.open("g")
        h.idle()
        assert h.texts() == ["held g"]
        assert [a.closes for a in h.agents] == [1]

    def test_an_agent_that_raises_system_exit_fails_only_its_turn(self, make_harness,
                                                                    monkeypatch):
        # a tool calling sys.exit(), argparse rejecting its input: the worker died silently
        # (threads: the session's turn never ended, every later message waited behind it;
        # gevent: the SystemExit reached the hub and ended the whole process)
        h = make_harness()
        real = ScriptedAgent.run_turn

        def run_turn(agent, request):
            if request.message == "quit":
                raise SystemExit(2)
            return real(agent, request)

        monkeypatch.setattr(ScriptedAgent, "run_turn", run_turn)
        h.send("quit")
        h.idle()
        assert h.texts() == [FAILED_NOTICE.format("SystemExit")]
        assert h.gw.store.get(h.key()).active_turn_token is None
        h.send("again")
        h.idle()
        assert h.texts()[-1] == "echo: again"


class _UsageAgent:
    """Answers every turn with ``the answer`` and the given ``usage`` counters."""

    def __init__(self, usage):
        self.usage = usage

    def run_turn(self, request):
        return TurnResult("the answer", "completed", self.usage)

    def interrupt(self, reason=None):
        pass

    def release_clients(self):
        pass

    def close(self):
        pass


class TestUsage:
    """An agent's token counters are bookkeeping: odd values never cost the user a reply."""

    @pytest.fixture
    def one_turn(self, tmp_path):
        """``one_turn(usage)``: a gateway whose agent reports ``usage`` answers "hi"; it
        returns the gateway (stopped after the test) and its adapter."""
        made = []

        def run(usage):
            adapter = InMemoryAdapter("telegram")
            gw = Gateway(tmp_path / "home", config=load_config({}, env={}),
                         adapters=[adapter], agent_factory=lambda context: _UsageAgent(usage),
                         clock=FakeClock(), memory_probe=FakeMemoryProbe())
            made.append(gw)
            gw.start()
            gw.submit(MessageEvent(source=SessionSource("telegram", chat_id="42"), text="hi"))
            assert gw.wait_idle(timeout=20)
            return gw, adapter

        yield run
        for gw in made:
            gw.stop(drain_timeout=5)

    @pytest.mark.parametrize("usage", [
        {"input_tokens": "many"}, {"prompt_tokens": "12k"}, {"output_tokens": [3]},
        {"input_tokens": 1e30}, ["not", "a", "dict"],
    ])
    def test_a_malformed_usage_still_delivers_the_reply(self, one_turn, usage):
        gw, adapter = one_turn(usage)
        assert adapter.texts() == ["the answer"]
        assert [r["state"] for r in gw.store.ledger_rows()] == ["delivered"]

    def test_a_failed_usage_write_still_delivers_the_recorded_reply(self, tmp_path):
        # the reply is recorded (claimed by this boot) before the usage is: a store failure
        # there must not turn the answered turn into a failure notice, the reply unsent
        from hermes_actors.errors import StoreError

        adapter = InMemoryAdapter("telegram")
        gw = Gateway(tmp_path / "home", config=load_config({}, env={}), adapters=[adapter],
                     agent_factory=lambda context: _UsageAgent({"input_tokens": 5}),
                     clock=FakeClock(), memory_probe=FakeMemoryProbe())
        gw.start()
        try:
            real_update, failures = gw.store.update_session, []

            def update_once(*args, **kwargs):
                if not failures:
                    failures.append(1)
                    raise StoreError("the database is gone for a moment")
                return real_update(*args, **kwargs)

            gw.store.update_session = update_once
            gw.submit(MessageEvent(source=SessionSource("telegram", chat_id="42"), text="hi"))
            assert gw.wait_idle(timeout=20)
            gw.housekeeping_tick()  # (a sweep would send a reply left owed: not needed)
            assert gw.wait_idle(timeout=20)
            assert failures and adapter.texts() == ["the answer"]
            assert gw.store.ledger_rows(("pending", "attempting", "failed")) == []
        finally:
            gw.stop(drain_timeout=5)

    def test_counters_are_recorded(self, one_turn):
        gw, _ = one_turn({"input_tokens": 10, "output_tokens": 3.0, "prompt_tokens": "7"})
        assert gw.store.get("agent:main:telegram:dm:42").last_prompt_tokens == 7


class TestSilence:
    """A silence marker is kept in the transcript; a human turn gets the notice instead."""

    def test_human_turn_gets_notice(self, make_harness):
        h = make_harness()
        h.send("silent")
        h.idle()
        assert h.texts() == [SILENCE_NOTICE]
        entry = h.gw.store.get(h.key())
        rows = h.gw.store.load_transcript(entry.session_id)
        assert rows[-1]["content"] == "NO_REPLY"

    def test_internal_turn_sends_nothing(self, make_harness):
        h = make_harness()
        h.send("hi")
        h.idle()
        h.wake("silent")
        h.idle()
        assert h.texts() == ["echo: hi"]


class TestSharedSessions:
    """In a shared group session each message is prefixed with its sender's name."""

    def test_sender_prefix(self, make_harness):
        h = make_harness(group_sessions_per_user=False)
        h.send("hello", chat_type="group", user_name="Alice")
        h.idle()
        assert h.seen() == ["[Alice] hello"]

    def test_a_nameless_sender_is_shown_by_the_redacted_id(self, make_harness):
        # privacy.redact_pii keeps a WhatsApp sender's phone number (its user id) from the
        # model: without a name, the prefix shows the id as the prompt does (user_<hash>)
        from hermes_actors.model.redact import redact_user_id

        h = make_harness(group_sessions_per_user=False, privacy={"redact_pii": True})
        h.send("hello", chat_type="group", user_id="+60123456789")
        h.idle()
        h.send("hi", chat_type="group", user_id="+60123456789", user_name="Siti")
        h.idle()
        assert h.seen() == [f"[{redact_user_id('+60123456789')}] hello", "[Siti] hi"]

    def test_without_redaction_the_raw_id_is_shown(self, make_harness):
        h = make_harness(group_sessions_per_user=False)
        h.send("hello", chat_type="group", user_id="+60123456789")
        h.idle()
        assert h.seen() == ["[+60123456789] hello"]

    def test_merged_followups_keep_each_sender(self, make_harness):
        # interrupt-mode follow-ups of several people collapse into one turn; each line
        # still names the person who wrote it (the first sender wrote only the first)
        h = make_harness(group_sessions_per_user=False)
        h.send("hold g", chat_type="group", user_name="Alice")
        assert h.gates.wait_until_waiting("g")
        h.send("is it done?", chat_type="group", user_name="Bob")
        h.send("please stop", chat_type="group", user_name="Carol", user_id="9")
        h.send("and me", chat_type="group", user_id="11")
        h.handled()
        h.gates.open("g")
        h.idle()
        assert h.seen() == ["[Alice] hold g", "[Bob] is it done?\n[Carol] please stop\n[11] and me"]

    def test_merged_followups_of_one_person_are_prefixed_per_line(self, make_harness):
        h = make_harness(group_sessions_per_user=False)
        h.send("hold g", chat_type="group", user_name="Alice")
        assert h.gates.wait_until_waiting("g")
        h.send("one", chat_type="group", user_name="Bob")
        h.send("two", chat_type="group", user_name="Bob")
        h.handled()
        h.gates.open("g")
        h.idle()
        assert h.seen()[-1] == "[Bob] one\n[Bob] two"

    def test_merged_followups_in_a_private_session_are_not_prefixed(self, make_harness):
        h = make_harness()
        h.hold("g")
        h.send("one")
        h.send("two")
        h.handled()
        h.gates.open("g")
        h.idle()
        assert h.seen()[-1] == "one\ntwo"


class TestStatus:
    """/status reports the session id, depth and turn state without running a turn."""

    def test_status_text(self, make_harness):
        h = make_harness()
        h.send("hi")
        h.idle()
        h.send("/status")
        h.idle()
        entry = h.gw.store.get(h.key())
        assert f"Session: {entry.session_id}" in h.texts()[-1]
        assert "Queue depth: 0" in h.texts()[-1]
        assert len(h.log) == 1


class TestUnreachablePlatform:
    """An event whose platform has no connected adapter stays queued, then runs."""

    def test_waits_for_adapter(self, make_harness):
        h = make_harness()
        h.adapter.connected = False
        h.send("later")
        assert h.gw.wait_idle(timeout=0.2) is False
        assert h.gw.queue_depth(h.key()) == 1
        h.adapter.connected = True
        h.gw.housekeeping_tick()
        h.idle()
        assert h.texts() == ["echo: later"]

    @staticmethod
    def _drop_after_record(h) -> None:
        """Disconnect the adapter right after the next obligation is recorded (and claimed:
        the adapter was up), before its send; reconnect and restore on the next call."""
        store = h.gw.store
        record = store.ledger_record

        def record_then_drop(**kw):
            oid = record(**kw)
            store.ledger_record = record
            h.adapter.connected = False
            return oid

        store.ledger_record = record_then_drop

    def test_a_reply_claimed_before_the_adapter_dropped_is_sent_after_reconnect(
            self, make_harness):
        h = make_harness()
        self._drop_after_record(h)
        h.send("hello")
        h.idle()
        assert h.texts() == []
        [row] = h.gw.store.ledger_rows()
        assert (row["state"], row["attempts"], row["owner_boot"]) == ("pending", 0, None)
        h.adapter.connected = True
        h.gw.housekeeping_tick()
        h.idle()
        assert h.texts() == ["echo: hello"]  # plainly: nothing had been sent

    def test_a_notice_claimed_before_the_adapter_dropped_is_sent_after_reconnect(
            self, make_harness):
        h = make_harness()
        self._drop_after_record(h)
        h.send("/status")
        h.idle()
        assert h.texts() == []
        h.adapter.connected = True
        h.gw.housekeeping_tick()
        h.idle()
        [text] = h.texts()
        assert text.startswith("Session: ") and "Queue depth: 0" in text  # plainly
        assert h.gw.store.ledger_counts() == {"delivered": 1}


class TestDrain:
    """stop() drains a running turn; past the deadline it interrupts and marks resume."""

    def test_deadline_marks_shutdown_timeout(self, make_harness):
        h = make_harness()
        h.hold("g", "wait")
        h.gw.stop(drain_timeout=0.05)
        assert "clean_shutdown" in node_values(h.gw.home, h.gw.config)
        store = SessionStore(h.gw.home / "sessions")
        entry = store.get(h.key())
        assert entry.resume_pending and entry.resume_reason == "shutdown_timeout"
        assert entry.active_turn_token is None
        store.close()

    def test_restarting_reason(self, make_harness):
        h = make_harness()
        h.hold("g", "wait")
        h.gw.stop(drain_timeout=0.05, restarting=True)
        store = SessionStore(h.gw.home / "sessions")
        assert store.get(h.key()).resume_reason == "restart_timeout"
        store.close()

    def test_finished_turn_is_not_marked(self, make_harness):
        h = make_harness()
        h.hold("g")
        h.gates.open("g")
        h.gw.stop(drain_timeout=10)
        store = SessionStore(h.gw.home / "sessions")
        assert store.get(h.key()).resume_pending is False
        store.close()
