"""Every accepted message ends with exactly one final answer that names its event id
(issue 36): through interrupts, merges, /stop, /new, a drain deadline, a crash and the
stuck-loop guard; acknowledgements name it but are not final; ``Gateway.ask`` waits for it."""

from __future__ import annotations

from collections import Counter

import pytest

from hermes_actors import Gateway, InMemoryAdapter, MessageEvent, SessionSource, load_config
from hermes_actors.runtime.session_core import (
    INTERRUPT_ACK,
    NEW_SESSION_CUT,
    QUEUED_ACK,
    STOPPED,
)
from hermes_actors.runtime.supervisor import SUSPENDED_NOTICE
from hermes_actors.store import SessionStore
from hermes_actors.testing import FakeClock, Gates, ScriptedAgent

SOURCE = SessionSource("telegram", chat_id="42", user_id="7")


def finals(adapter: InMemoryAdapter) -> Counter:
    """How many final answers name each event id."""
    return Counter(e for m in adapter.sent if m.final for e in m.in_reply_to)


def answer_of(adapter: InMemoryAdapter, event_id: str):
    [answer] = [m for m in adapter.sent if m.final and event_id in m.in_reply_to]
    return answer


def _running(h) -> str:
    """Start a turn that waits on gate ``g``; its event id once it runs."""
    event_id = h.send("wait g")
    assert h.gates.wait_until_waiting("g")
    return event_id


class TestLiveAnswers:
    """Answers on the live path name the events they answer; acks are not final."""

    def test_a_reply_names_its_event(self, make_harness):
        h = make_harness()
        first = h.send("hello")
        h.idle()
        [sent] = h.adapter.sent
        assert (sent.text, sent.kind, sent.in_reply_to, sent.final) == (
            "echo: hello", "reply", (first,), True)

    def test_an_interrupted_turn_is_answered_by_the_turn_that_superseded_it(self, make_harness):
        h = make_harness()
        first = _running(h)
        second = h.send("two")
        third = h.send("three")  # merged with "two" into the next turn
        h.idle()
        ack = [m for m in h.adapter.sent if m.text == INTERRUPT_ACK]
        assert ack and not ack[0].final and ack[0].kind == "ack"
        assert ack[0].in_reply_to == (second,)
        reply = answer_of(h.adapter, first)
        assert reply.text == "echo: two\nthree" and reply.kind == "reply"
        assert set(reply.in_reply_to) == {first, second, third}
        assert finals(h.adapter) == {first: 1, second: 1, third: 1}

    def test_queue_acks_are_not_final(self, make_harness):
        h = make_harness(busy_input_mode="queue")
        first = _running(h)
        queued = h.send("/queue later")
        h.handled()
        h.gates.open("g")
        h.idle()
        ack = next(m for m in h.adapter.sent if m.text.startswith(QUEUED_ACK))
        assert (ack.kind, ack.final, ack.in_reply_to) == ("ack", False, (queued,))
        assert answer_of(h.adapter, queued).text == "echo: later"
        assert finals(h.adapter) == {first: 1, queued: 1}

    def test_stop_names_the_message_it_cancelled(self, make_harness):
        h = make_harness()
        first = _running(h)
        follow = h.send("follow")
        stop = h.send("/stop")
        h.idle()
        notice = answer_of(h.adapter, stop)
        assert notice.text == STOPPED and notice.kind == "notice"
        # the turn it stopped and the follow-up it dropped end with the same answer
        assert finals(h.adapter) == {first: 1, follow: 1, stop: 1}

    def test_new_names_the_messages_it_cleared(self, make_harness):
        h = make_harness(busy_input_mode="queue")
        first = _running(h)
        queued = h.send("/queue later")
        new = h.send("/new")
        h.idle()
        notice = answer_of(h.adapter, new)
        assert notice.text == NEW_SESSION_CUT
        assert finals(h.adapter) == {first: 1, queued: 1, new: 1}

    def test_ask_returns_the_final_answer(self, make_harness):
        h = make_harness()
        event = MessageEvent(source=SOURCE, text="hi")
        answer = h.gw.ask(event, timeout=10)
        assert (answer.text, answer.kind, answer.in_reply_to, answer.final) == (
            "echo: hi", "reply", (event.event_id,), True)

    def test_ask_skips_acks_and_times_out_without_an_answer(self, make_harness):
        h = make_harness(busy_input_mode="queue")
        _running(h)
        with pytest.raises(TimeoutError):
            h.gw.ask(MessageEvent(source=SOURCE, text="/queue later"), timeout=0.3)
        assert any(m.text.startswith(QUEUED_ACK) for m in h.adapter.sent)  # ...was sent
        h.gates.open("g")
        h.idle()


def _boot(home, clock, gates, **config):
    adapter = InMemoryAdapter("telegram")
    gw = Gateway(home, config=load_config(config, env={}),
                 agent_factory=lambda _ctx: ScriptedAgent(gates=gates), adapters=[adapter],
                 clock=clock)
    gw.start()
    return gw, adapter


def _crashed_mid_turn(home, clock, cut: MessageEvent, *waiting: MessageEvent,
                     reply: str | None = None, restarts: int = 0) -> None:
    """The durable state a kill -9 leaves: ``cut``'s turn marked (its event consumed),
    its ``reply`` persisted or not, ``waiting`` messages still in the inbox, the session's
    stuck-loop count at ``restarts``."""
    store = SessionStore(home / "sessions", clock=clock, mirror_interval=None)
    entry = store.get_or_create_session(SOURCE)
    for event in (cut, *waiting):
        store.accept_event(entry.session_key, event)
    token = store.begin_turn(entry.session_key, entry.session_id,
                             user_message={"role": "user", "content": cut.text},
                             event_ids=[cut.event_id])
    if reply is not None:
        store.append_message(entry.session_id, {"role": "assistant", "content": reply},
                             turn_token=token, is_reply=True)
    if restarts:
        store.write_restart_counts({entry.session_key: restarts})
    store.close()


class TestAcrossRestarts:
    """The answer of a turn cut by a drain deadline or a crash names its event."""

    def test_drain_deadline(self, tmp_path):
        home, clock, gates = tmp_path / "home", FakeClock(), Gates()
        gw, _ = _boot(home, clock, gates)
        try:
            event_id = gw.submit(MessageEvent(source=SOURCE, text="wait g"))
            assert gates.wait_until_waiting("g")
        finally:
            gw.stop(drain_timeout=0.2)
        gw, adapter = _boot(home, clock, gates)
        try:
            assert gw.wait_idle(20)
            answer = answer_of(adapter, event_id)
            assert answer.text == "resumed: wait g" and answer.kind == "reply"
            assert gw.store.get("agent:main:telegram:dm:42").owed_events == ()
        finally:
            gw.stop(drain_timeout=5)

    @pytest.mark.parametrize("mode", ["interrupt", "queue"])
    def test_crash_mid_turn_with_a_message_waiting(self, tmp_path, mode):
        # a follow-up waits in the inbox: the note rides on its turn
        home, clock = tmp_path / "home", FakeClock()
        cut = MessageEvent(source=SOURCE, text="long task")
        waiting = MessageEvent(source=SOURCE, text="and then")
        _crashed_mid_turn(home, clock, cut, waiting)
        gw, adapter = _boot(home, clock, Gates(), busy_input_mode=mode)
        try:
            assert gw.wait_idle(20)
            answer = answer_of(adapter, cut.event_id)
            assert answer.text == "resumed: long task\necho: and then"
            assert set(answer.in_reply_to) == {cut.event_id, waiting.event_id}
            assert finals(adapter) == {cut.event_id: 1, waiting.event_id: 1}
        finally:
            gw.stop(drain_timeout=5)

    def test_a_recovered_reply_names_its_event(self, tmp_path):
        home, clock = tmp_path / "home", FakeClock()
        event = MessageEvent(source=SOURCE, text="q")
        _crashed_mid_turn(home, clock, event, reply="the answer")
        gw, adapter = _boot(home, clock, Gates())
        try:
            assert gw.wait_idle(20)
            answer = answer_of(adapter, event.event_id)
            assert answer.kind == "recovered" and answer.text.endswith("the answer")
        finally:
            gw.stop(drain_timeout=5)

    def test_suspension_answers_what_the_session_owed(self, tmp_path):
        home, clock = tmp_path / "home", FakeClock()
        event = MessageEvent(source=SOURCE, text="loops forever")
        _crashed_mid_turn(home, clock, event, restarts=2)  # this is its third restart
        gw, adapter = _boot(home, clock, Gates())
        try:
            assert gw.wait_idle(20)
            answer = answer_of(adapter, event.event_id)
            assert answer.text == SUSPENDED_NOTICE.format(3) and answer.kind == "notice"
            assert finals(adapter) == {event.event_id: 1}
        finally:
            gw.stop(drain_timeout=5)
