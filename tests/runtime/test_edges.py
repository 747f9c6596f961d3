"""Edge cases of stop, recovery and failure paths (each once a real bug)."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import pytest

from hermes_actors import (
    Gateway,
    InMemoryAdapter,
    MessageEvent,
    SessionSource,
    TurnResult,
    load_config,
)
from hermes_actors.errors import ConfigError, StoreError, StoreUnavailableError
from hermes_actors.model.context import build_session_context
from hermes_actors.model.entry import SessionEntry
from hermes_actors.runtime import turn as turn_module
from hermes_actors.runtime.recovery_rules import judge_marker, plan_startup_dispatch
from hermes_actors.runtime.session_actor import INTERRUPT_ACK, NEW_SESSION_CUT, STOPPED
from hermes_actors.runtime.turn import FAILED_NOTICE
from hermes_actors.store.node import NodeRecords
from hermes_actors.store.store import SessionStore
from hermes_actors.store.turns import SessionRotatedError
from hermes_actors.testing import FakeClock, Gates, ScriptedAgent, node_values, wait_until

SRC = SessionSource("telegram", chat_id="42", user_id="7")
KEY = "agent:main:telegram:dm:42"


def gateway(home, factory=None, clock=None, **config):
    adapter = InMemoryAdapter("telegram")
    gw = Gateway(home, config=load_config(config, env={}), adapters=[adapter],
                 agent_factory=factory or (lambda ctx: ScriptedAgent()), clock=clock)
    gw.start()
    return gw, adapter


def submit(gw, text, internal=False):
    return gw.submit(MessageEvent(source=SRC, text=text, internal=internal))


class TestSubmitRacingStop:
    """A submit already accepted when stop() begins is answered, now or after restart."""

    def test_in_flight_submit_is_not_lost(self, tmp_path):
        gw, adapter = gateway(tmp_path)
        entered, go = threading.Event(), threading.Event()
        real_accept = gw.store.accept_event

        def slow_accept(key, event):
            entered.set()
            assert go.wait(10)
            return real_accept(key, event)

        gw.store.accept_event = slow_accept
        sender = threading.Thread(target=submit, args=(gw, "hello"))
        sender.start()
        assert entered.wait(10)
        stopper = threading.Thread(target=gw.stop, kwargs={"drain_timeout": 5})
        stopper.start()
        assert gw.stopping.wait(10)
        go.set()
        sender.join(10)
        stopper.join(30)
        first = adapter.texts()
        again, adapter2 = gateway(tmp_path)
        assert again.wait_idle(10)
        assert first + adapter2.texts() == ["echo: hello"]
        again.stop()


class TestLedgerEarlierBoot:
    """An attempting row of an earlier boot of this node (a crash mid-send, in this very
    process's pid or not) is redelivered, prefixed, by the next boot."""

    def test_attempting_row_of_an_earlier_boot(self, tmp_path):
        gw, _ = gateway(tmp_path)
        gw.stop()
        store = SessionStore(tmp_path / "sessions")
        oid = store.ledger_record(session_key=KEY, platform="telegram", chat_id="42",
                                  thread_id=None, content="owed", kind="reply", token="t1")
        assert store.ledger_claim(oid)  # this boot sends... and "crashes"
        earlier = store.ledger_owner
        store.close()
        again, adapter = gateway(tmp_path)
        assert again.store.ledger_owner[0] == earlier[0]  # the same node, another boot
        assert again.store.ledger_owner[1] != earlier[1]
        assert adapter.texts() == ["♻️ Recovered reply: owed"]
        again.stop()


class _Stubborn:
    """Finishes its answer even when interrupted (some agents do)."""

    def __init__(self, release: threading.Event, started: threading.Event) -> None:
        self.release, self.started = release, started

    def run_turn(self, request):
        self.started.set()
        self.release.wait(10)
        return TurnResult("done anyway")

    def interrupt(self, reason=None):
        self.release.set()

    def release_clients(self):
        pass

    def close(self):
        pass


class TestDrainOutcome:
    """A turn that completes after the drain interrupted it is not resumed next start."""

    def test_completed_after_interrupt_is_not_marked(self, tmp_path):
        release, started = threading.Event(), threading.Event()
        gw, adapter = gateway(tmp_path, factory=lambda ctx: _Stubborn(release, started))
        submit(gw, "work")
        assert started.wait(10)
        gw.stop(drain_timeout=0.01)
        assert adapter.texts() == ["done anyway"]
        store = SessionStore(tmp_path / "sessions")
        assert store.get(KEY).resume_pending is False
        store.close()


class TestDurableWakeups:
    """An internal wake-up queued at stop is replayed and run after the restart."""

    def test_queued_wakeup_survives_stop(self, tmp_path):
        gates = Gates()
        gw, _ = gateway(tmp_path, factory=lambda ctx: ScriptedAgent(gates=gates))
        submit(gw, "hold g")
        assert gates.wait_until_waiting("g")
        submit(gw, "[delegation task completed] result", internal=True)
        assert gw.queue_depth(KEY) == 1
        stopper = threading.Thread(target=gw.stop, kwargs={"drain_timeout": 5})
        stopper.start()
        gates.open("g")
        stopper.join(30)
        log: list = []
        again, adapter = gateway(tmp_path, factory=lambda ctx: ScriptedAgent(log=log))
        assert again.wait_idle(10)
        assert [(s.message, s.internal) for s in log] == [
            ("[delegation task completed] result", True)]
        again.stop()


class TestFailureBeforeTurn:
    """A turn that fails before it began is answered with the notice and not replayed."""

    def test_factory_failure_consumes_event(self, tmp_path):
        def broken(ctx):
            raise RuntimeError("no model")

        gw, adapter = gateway(tmp_path, factory=broken)
        submit(gw, "hello")
        assert gw.wait_idle(10)
        assert adapter.texts()[0].startswith("⚠️ The agent failed to answer (RuntimeError)")
        assert gw.store.pending_inbox() == []
        gw.stop()


class TestFailureLogLine:
    """An agent's failure is logged with its message: one line, bounded, passwords masked."""

    def test_the_message_is_logged(self, tmp_path, caplog):
        def broken(ctx):
            raise RuntimeError("cannot reach https://bot:s3cret@llm.example/v1\n  retry later")

        gw, adapter = gateway(tmp_path, factory=broken)
        with caplog.at_level("WARNING", logger="hermes_actors.turn"):
            submit(gw, "hello")
            assert gw.wait_idle(10)
        gw.stop()
        assert [r.getMessage() for r in caplog.records if r.name == "hermes_actors.turn"] == [
            f"agent failed session_key={KEY} error=RuntimeError: cannot reach "
            "https://bot:***@llm.example/v1 retry later"]

    @pytest.mark.parametrize(("message", "shown"), [
        ("", "KeyError"),
        ("x" * 1000, "KeyError: '" + "x" * 496 + "..."),
    ])
    def test_an_empty_or_long_message(self, message, shown):
        assert turn_module._describe_error(KeyError(message) if message else KeyError()) == shown


class TestRecoveryRules:
    """Notes ride only on turn-making messages; finalized boundaries are never reopened."""

    def entry(self, **kw):
        started = datetime.fromtimestamp(1_700_000_000 - 10, tz=timezone.utc)
        return SessionEntry(KEY, "20231114_221310_abcdef12", origin=SRC,
                            active_turn_token="t", active_turn_started_at=started, **kw)

    def test_note_skips_commands(self):
        marked = datetime.fromtimestamp(1_700_000_000, tz=timezone.utc)
        resumable = SessionEntry(KEY, "20231114_221310_abcdef12", origin=SRC,
                                 resume_pending=True, resume_reason="restart_interrupted",
                                 last_resume_marked_at=marked)
        status = MessageEvent(source=SRC, text="/status")
        hello = MessageEvent(source=SRC, text="hello")
        events, resumed = plan_startup_dispatch([resumable], [(KEY, status), (KEY, hello)])
        assert resumed == [KEY]
        assert "recovery_note" not in events[0][1].metadata
        assert "recovery_note" in events[1][1].metadata

    def test_note_rides_on_a_queue_with_only_media(self):
        # "/queue" with a photo and no prompt text is a turn of its own (§8): the note rides
        # on it, and no empty wake-up runs before it as a second turn (§17.21)
        marked = datetime.fromtimestamp(1_700_000_000, tz=timezone.utc)
        resumable = SessionEntry(KEY, "20231114_221310_abcdef12", origin=SRC,
                                 resume_pending=True, resume_reason="restart_interrupted",
                                 last_resume_marked_at=marked)
        photo = MessageEvent(source=SRC, text="/queue", media_urls=("https://x/p.jpg",))
        events, resumed = plan_startup_dispatch([resumable], [(KEY, photo)])
        assert resumed == [KEY]
        assert len(events) == 1 and not events[0][1].internal
        assert events[0][1].metadata["recovery_note"]

    @pytest.mark.parametrize("word", ["/new", "/reset"])
    def test_a_waiting_new_is_not_preceded_by_a_resume(self, word):
        # the user cut the conversation before the restart: the interrupted task is not
        # continued first (no wake-up in the old session, no note in the new one, §6)
        marked = datetime.fromtimestamp(1_700_000_000, tz=timezone.utc)
        resumable = SessionEntry(KEY, "20231114_221310_abcdef12", origin=SRC,
                                 resume_pending=True, resume_reason="restart_interrupted",
                                 last_resume_marked_at=marked)
        new = MessageEvent(source=SRC, text=word)
        hello = MessageEvent(source=SRC, text="hello")
        events, resumed = plan_startup_dispatch([resumable], [(KEY, new)], [(KEY, hello)])
        assert resumed == []
        assert [e.text for _, e in events] == [word, "hello"]
        assert all("recovery_note" not in e.metadata for _, e in events)

    def test_a_new_after_a_waiting_message_lets_the_note_ride_on_it(self):
        marked = datetime.fromtimestamp(1_700_000_000, tz=timezone.utc)
        resumable = SessionEntry(KEY, "20231114_221310_abcdef12", origin=SRC,
                                 resume_pending=True, resume_reason="restart_interrupted",
                                 last_resume_marked_at=marked)
        hello, new = MessageEvent(source=SRC, text="hello"), MessageEvent(source=SRC, text="/new")
        events, resumed = plan_startup_dispatch([resumable], [(KEY, hello), (KEY, new)])
        assert resumed == [KEY]
        assert [e.text for _, e in events] == ["hello", "/new"]
        assert "recovery_note" in events[0][1].metadata

    def test_only_command_waiting_gets_a_wakeup(self):
        marked = datetime.fromtimestamp(1_700_000_000, tz=timezone.utc)
        resumable = SessionEntry(KEY, "20231114_221310_abcdef12", origin=SRC,
                                 resume_pending=True, resume_reason="restart_interrupted",
                                 last_resume_marked_at=marked)
        events, _ = plan_startup_dispatch([resumable],
                                          [(KEY, MessageEvent(source=SRC, text="/status"))])
        assert events[0][1].internal and events[0][1].metadata["recovery_note"]

    def test_finalized_and_suspended_expire(self):
        now = 1_700_000_000.0
        assert judge_marker(self.entry(expiry_finalized=True), None, now, 3600).action == "expire"
        assert judge_marker(self.entry(suspended=True), None, now, 3600).action == "expire"
        assert judge_marker(self.entry(suspended=True), "hi", now, 3600).action == "deliver"


class TestStaleResumeRefreshed:
    """A fresh crash on a session with an old resume flag refreshes the mark and resumes."""

    def test_refresh(self, tmp_path):
        clock = FakeClock()
        store = SessionStore(tmp_path / "sessions", clock=clock)
        store.get_or_create_session(SRC)
        store.mark_resume_pending(KEY, "shutdown_timeout")
        clock.advance(7200)
        store.mark_turn_active(KEY)
        store.close()
        gw, adapter = gateway(tmp_path, clock=clock)
        assert gw.wait_idle(10)
        assert adapter.texts() and adapter.texts()[0].startswith("resumed:")
        gw.stop()


class TestBookkeepingFailures:
    """A full disk for restart counters neither fails an answered turn nor the stop."""

    def test_enospc_on_counters(self, tmp_path, monkeypatch):
        gw, adapter = gateway(tmp_path, agent={"auto_continue_freshness": 0})
        gw.stop()
        store = SessionStore(tmp_path / "sessions")
        store.write_restart_counts({KEY: 1})
        store.close()

        def full(self, counts):
            raise StoreError("cannot write the node state: No space left on device")

        monkeypatch.setattr(NodeRecords, "write_restart_counts", full)
        again, adapter = gateway(tmp_path)
        submit(again, "hello")  # its success would reset the count: the write fails
        assert again.wait_idle(10)
        assert adapter.texts() == ["echo: hello"]
        again.stop()
        assert "clean_shutdown" in node_values(tmp_path)


class TestEffectFailures:
    """An effect that fails is logged; the effects after it are still carried out."""

    def test_new_whose_drop_fails_still_resets(self, make_harness):
        h = make_harness()
        store, real_consume, failed = h.gw.store, h.gw.store.consume_events, threading.Event()

        def consume(ids, reason):
            if reason == "dropped" and not failed.is_set():
                failed.set()
                raise StoreUnavailableError("transient")
            return real_consume(ids, reason)

        store.consume_events = consume
        h.hold("g")
        old = store.get(h.key()).session_id
        follow = h.send("follow")
        h.send("/new")
        assert failed.wait(10)
        h.handled()
        h.gates.open("g")
        h.send("after")
        assert h.gw.wait_idle(timeout=10), "the failed drop left the session busy"
        assert store.get(h.key()).session_id != old
        assert h.texts() == [INTERRUPT_ACK, NEW_SESSION_CUT, "echo: after"]
        # The dropped follow-up's row stays unconsumed: it replays at the next start.
        assert [e.event_id for _, e in store.pending_inbox()] == [follow]


class TestSessionRotated:
    """begin_turn refuses a session id the key no longer routes to (compare-and-swap)."""

    def test_cas(self, tmp_path):
        store = SessionStore(tmp_path / "sessions")
        old = store.get_or_create_session(SRC).session_id
        store.reset_session(KEY)
        with pytest.raises(SessionRotatedError):
            store.begin_turn(KEY, old, user_message={"role": "user", "content": "x"})
        store.close()


class TestFirstMessage:
    """A session's first message creates the session in the turn's start transaction."""

    def test_a_session_created_meanwhile_runs_the_turn_on_it(self, tmp_path):
        gw, adapter = gateway(tmp_path)
        real_first = gw.store.begin_first_turn
        other = []

        def created_just_before(key, source, **kwargs):
            gw.store.begin_first_turn = real_first
            other.append(gw.store.get_or_create_session(source))  # e.g. an embedding host
            return real_first(key, source, **kwargs)

        gw.store.begin_first_turn = created_just_before
        submit(gw, "hello")
        assert gw.wait_idle(10)
        assert adapter.texts() == ["echo: hello"], "the first message was dropped"
        entry = gw.store.get(KEY)
        assert other and entry.session_id == other[0].session_id
        assert [m["content"] for m in gw.store.load_transcript(entry.session_id)] == [
            "hello", "echo: hello"]
        assert gw.store.pending_inbox() == []
        gw.stop()

    def test_new_racing_a_first_message_drops_it_from_the_new_session(self, tmp_path):
        gw, adapter = gateway(tmp_path)
        real_first = gw.store.begin_first_turn
        entered, go = threading.Event(), threading.Event()

        def held(key, source, **kwargs):
            entered.set()
            assert go.wait(10)
            return real_first(key, source, **kwargs)

        gw.store.begin_first_turn = held
        first = submit(gw, "hello before new")
        assert entered.wait(10)
        new = submit(gw, "/new")  # interrupts the starting turn, then creates the session
        # the actor has taken /new before the turn goes on
        wait_until(lambda: gw.session_statistics(KEY).interrupting,
                   message="/new interrupting the starting turn")
        go.set()
        assert gw.wait_idle(10)
        entry = gw.store.get(KEY)
        assert gw.store.load_transcript(entry.session_id) == [], "the dropped message leaked"
        assert adapter.texts() == [NEW_SESSION_CUT]  # it cut the starting turn
        # ...and, sent once that turn had ended, it is the final answer of both messages
        assert set(adapter.sent[0].in_reply_to) == {new, first} and adapter.sent[0].final
        assert gw.store.pending_inbox() == []
        submit(gw, "after")
        assert gw.wait_idle(10)
        assert adapter.texts() == [NEW_SESSION_CUT, "echo: after"]
        gw.stop()

    def test_stop_then_new_during_the_first_turns_start_drops_it(self, make_harness):
        # /stop interrupts first, so /new's interrupt is the second: it must still count.
        h = make_harness()
        store = h.gw.store
        reset, real_create, real_first = (threading.Event(), store.get_or_create_session,
                                          store.begin_first_turn)

        def create(source, force_new=False, **kwargs):
            entry = real_create(source, force_new=force_new, **kwargs)
            if force_new:
                reset.set()
            return entry

        def first_after_the_reset(*args, **kwargs):
            assert reset.wait(10)
            return real_first(*args, **kwargs)

        store.get_or_create_session, store.begin_first_turn = create, first_after_the_reset
        h.send("m1")
        h.send("/stop")
        h.send("/new")
        h.idle()
        transcript = store.load_transcript(store.get(h.key()).session_id)
        assert [m["content"] for m in transcript if m["role"] == "user"] == [], (
            "the message /new dropped started in the new session")
        assert h.texts() == [STOPPED, NEW_SESSION_CUT]
        assert h.seen() == [] and store.pending_inbox() == []

    def test_a_failure_after_the_turn_began_is_a_failed_turn(self, tmp_path, monkeypatch):
        made = []
        gw, adapter = gateway(tmp_path, factory=lambda ctx: made.append(ScriptedAgent())
                              or made[-1])
        submit(gw, "one")
        assert gw.wait_idle(10)
        real = turn_module.assemble_session_context

        def failing_once(*args, **kwargs):
            monkeypatch.setattr(turn_module, "assemble_session_context", real)
            raise RuntimeError("context broke")

        monkeypatch.setattr(turn_module, "assemble_session_context", failing_once)
        submit(gw, "two")
        assert gw.wait_idle(10)
        entry = gw.store.get(KEY)
        assert not entry.has_active_turn, "the marker outlived the failed turn"
        assert adapter.texts() == ["echo: one", FAILED_NOTICE.format("RuntimeError")]
        submit(gw, "three")
        assert gw.wait_idle(10)
        assert adapter.texts()[-1] == "echo: three"
        assert len(made) == 1, "the agent of the failed turn was never checked back in"
        gw.stop()

    def test_created_with_its_first_turn(self, tmp_path):
        gw, adapter = gateway(tmp_path)
        submit(gw, "hello")
        assert gw.wait_idle(10)
        entry = gw.store.get(KEY)
        assert entry.origin.chat_id == "42" and entry.created_at is not None
        assert not entry.has_active_turn
        assert [m["content"] for m in gw.store.load_transcript(entry.session_id)] == [
            "hello", "echo: hello"]
        gw.stop()


class TestTurnThatNeverBegan:
    """The agent checked out for a turn whose start failed goes back to the cache."""

    def test_the_cached_agent_serves_the_next_turn(self, tmp_path):
        made = []
        gw, adapter = gateway(tmp_path, factory=lambda ctx: made.append(ScriptedAgent())
                              or made[-1])
        submit(gw, "one")
        assert gw.wait_idle(10)
        real_begin = gw.store.begin_turn

        def failing_once(*args, **kwargs):
            gw.store.begin_turn = real_begin
            raise StoreError("the database is gone for a moment")

        gw.store.begin_turn = failing_once
        submit(gw, "two")
        assert gw.wait_idle(10)
        submit(gw, "three")
        assert gw.wait_idle(10)
        assert adapter.texts() == ["echo: one", FAILED_NOTICE.format("StoreError"),
                                   "echo: three"]
        assert len(made) == 1, "the agent was kept checked out: the next turn built another"
        gw.stop()


class _ExitOnClose(ScriptedAgent):
    def close(self):
        raise SystemExit("agent wants out")


class TestAgentBaseException:
    """A SystemExit from agent cleanup does not stop the cache or any other actor."""

    def test_gateway_survives(self, tmp_path):
        gw, adapter = gateway(tmp_path, factory=lambda ctx: _ExitOnClose())
        submit(gw, "one")
        submit(gw, "/new")
        assert gw.wait_idle(10)
        submit(gw, "two")
        assert gw.wait_idle(10)
        assert adapter.texts()[-1] == "echo: two"
        gw.stop()


class TestTurnContext:
    """The context a turn gives its agent is ``build_session_context``'s for the message's
    source (the turn reuses its actor's key and the shared flag it computed)."""

    @pytest.mark.parametrize("source", [
        SRC,
        SessionSource("telegram", chat_id="-100", chat_type="group", user_id="9"),
        SessionSource("telegram", chat_id="-100", chat_type="group", user_id="9",
                      thread_id="5"),
    ], ids=["dm", "group", "thread"])
    @pytest.mark.parametrize("per_user", [True, False])
    def test_the_agent_sees_its_sources_context(self, tmp_path, source, per_user):
        seen = []

        class Recording(ScriptedAgent):
            def run_turn(self, request):
                seen.append(request.context)
                return super().run_turn(request)

        gw, _adapter = gateway(tmp_path, factory=lambda ctx: Recording(),
                               group_sessions_per_user=per_user)
        gw.submit(MessageEvent(source=source, text="hello"))
        assert gw.wait_idle(10)
        entry = gw.store.get(gw.store.session_key_for(source))
        expected = build_session_context(source, gw.config, entry,
                                         connected_platforms=["local", "telegram"])
        gw.stop()
        assert seen == [expected]


class TestConfigArgument:
    """``Gateway(config=...)`` takes a GatewayConfig (or None): a mapping or a path, given
    where ``load_config(...)`` was meant, is refused at once with a message that says so."""

    @pytest.mark.parametrize("config", [{"busy_input_mode": "queue"}, "config.yaml", 5])
    def test_not_a_gateway_config(self, tmp_path, config):
        home = tmp_path / "home"
        with pytest.raises(ConfigError, match=r"load_config"):
            Gateway(home, config=config, agent_factory=lambda ctx: ScriptedAgent())
        assert not home.exists()  # nothing was taken or written


class TestSecondStop:
    """A ``stop()`` called while another thread's stop drains returns only once the gateway
    is stopped (the home free, the marker written): a host that stops from a signal handler
    and from ``with``'s exit must not go on while turns still run."""

    def test_second_stop_waits_for_the_first(self, tmp_path):
        gates = Gates()
        gw, adapter = gateway(tmp_path, factory=lambda ctx: ScriptedAgent(gates=gates))
        submit(gw, "hold g")
        assert gates.wait_until_waiting("g")
        first = threading.Thread(target=gw.stop, kwargs={"drain_timeout": 30})
        first.start()
        assert gw.stopping.wait(10)
        # the held turn ends a little later (were it earlier, the test would just pass)
        opener = threading.Timer(0.5, gates.open, args=("g",))
        opener.start()
        gw.stop()
        assert gw.stats()["state"] == "stopped" and gw.stopped_cleanly
        assert adapter.texts() == ["held g"]
        first.join(30)
        opener.join(10)


class TestEventWithoutMetadata:
    """A message built with ``metadata=None`` is answered like any other."""

    def test_it_is_answered(self, tmp_path):
        gw, adapter = gateway(tmp_path)
        gw.submit(MessageEvent(source=SRC, text="hello", metadata=None))
        assert gw.wait_idle(10)
        gw.stop()
        assert adapter.texts() == ["echo: hello"]


_STOP_FROM_A_SIGNAL_HANDLER = """
import os, signal, sys, threading
from hermes_actors import Gateway, InMemoryAdapter, MessageEvent, SessionSource, load_config
from hermes_actors.testing import Gates, ScriptedAgent

gates = Gates()
adapter = InMemoryAdapter("telegram")
gw = Gateway(sys.argv[1], config=load_config({}, env={}), adapters=[adapter],
             agent_factory=lambda ctx: ScriptedAgent(gates=gates))
handled = threading.Event()

def on_signal(signum, frame):  # a host's handler: stop the gateway
    gw.stop()
    handled.set()

signal.signal(signal.SIGUSR1, on_signal)
gw.start()
gw.submit(MessageEvent(source=SessionSource("telegram", chat_id="42", user_id="7"),
                       text="hold g"))
assert gates.wait_until_waiting("g")

def host():  # the signal comes while with's exit (the main thread) drains
    assert gw.stopping.wait(10)
    os.kill(os.getpid(), signal.SIGUSR1)
    assert handled.wait(20)
    gates.open("g")

threading.Thread(target=host, daemon=True).start()
gw.stop(drain_timeout=30)
print("stopped", gw.stopped_cleanly, adapter.texts())
"""


class TestStopFromASignalHandler:
    """A host's signal handler that calls ``stop()`` while the same thread is inside
    ``stop()`` (``with``'s exit draining) returns at once: waiting for that stop there would
    wait for itself, and the process would hang for ever."""

    def test_a_stop_reentered_by_a_signal_handler_does_not_hang(self, tmp_path):
        import subprocess
        import sys

        try:
            proc = subprocess.run([sys.executable, "-c", _STOP_FROM_A_SIGNAL_HANDLER,
                                   str(tmp_path / "home")],
                                  capture_output=True, text=True, timeout=30, check=False)
        except subprocess.TimeoutExpired:
            pytest.fail("the stop re-entered from the signal handler hung")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "stopped True ['held g']"
