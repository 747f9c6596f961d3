"""The session core (§8) as a pure state machine: messages in, effects out, no actors.

Each test feeds a :class:`SessionCore` messages with a :class:`Context` it builds itself
(time, connectivity, delegations) and checks the effects it returns.
"""

from __future__ import annotations

import logging

import pytest

from hermes_actors import MessageEvent, SessionSource
from hermes_actors.runtime import session_core
from hermes_actors.runtime.session_core import (
    INTERRUPT_ACK,
    NEW_SESSION,
    NEW_SESSION_CUT,
    NOTHING_TO_STOP,
    QUEUE_FULL,
    QUEUED_ACK,
    RESET_FAILED,
    STOPPED,
    AdmitTicket,
    AnswerStatus,
    CancelDelegations,
    Consume,
    Context,
    IdleCheck,
    Inbound,
    Interrupt,
    InterruptTurn,
    Notify,
    Refuse,
    ResetDone,
    ResetSession,
    Retire,
    SessionCore,
    StartTurn,
    StopAccepting,
    TurnDone,
    TurnFinished,
    Warn,
    settled_event_ids,
)

SRC = SessionSource("telegram", chat_id="42", user_id="7")


def event(text: str, **kw) -> MessageEvent:
    return MessageEvent(source=SRC, text=text, **kw)


def core(mode: str = "interrupt", cap: int = 3) -> SessionCore:
    return SessionCore("agent:main:telegram:dm:42", mode, cap, last_activity=0.0)


def ctx(now: float = 0.0, **kw) -> Context:
    return Context(now=now, **kw)


def kinds(effects) -> list[str]:
    return [type(e).__name__ for e in effects]


def started(c: SessionCore, text: str = "first") -> StartTurn:
    [start] = c.handle(Inbound(event(text)), ctx()).effects
    assert isinstance(start, StartTurn)
    return start


class TestTurns:
    """A message to an idle session starts a turn; its end starts the next."""

    def test_first_message_starts_a_turn(self):
        c = core()
        e = event("hi")
        [start] = c.handle(Inbound(e), ctx()).effects
        assert isinstance(start, StartTurn) and start.item.event_ids == (e.event_id,)
        assert c.running is not None and c.queue.depth == 0

    def test_turn_done_reports_and_starts_the_next(self):
        c = core("queue")
        first = started(c)
        c.handle(Inbound(event("second")), ctx())
        reaction = c.handle(TurnDone(first.turn_id, "completed"), ctx(now=2.5))
        assert reaction.effects[0] == TurnFinished("completed", 2.5)
        assert isinstance(reaction.effects[1], StartTurn)
        assert reaction.effects[1].item.event.text == "second" and c.turns == 1

    def test_a_stale_turn_done_is_ignored(self):
        c = core()
        first = started(c)
        assert c.handle(TurnDone(first.turn_id + 1000, "completed"), ctx()).effects == []
        assert c.running is not None

    def test_a_skipped_turn_is_not_counted_as_finished(self):
        c = core()
        first = started(c)
        assert c.handle(TurnDone(first.turn_id, "skipped"), ctx()).effects == []

    def test_an_unreachable_platform_keeps_the_event_and_warns_once(self):
        c = core()
        offline = ctx(can_send=lambda platform: False)
        effects = c.handle(Inbound(event("a")), offline).effects
        assert kinds(effects) == ["Warn"] and c.queue.depth == 1
        assert c.handle(Inbound(event("b")), offline).effects == []  # merged, no 2nd warning
        [start] = c.handle(session_core.Kick(), ctx()).effects
        assert start.item.event.text == "a\nb"

    def test_a_stopping_gateway_starts_nothing(self):
        c = core()
        assert c.handle(Inbound(event("a")), ctx(stopping=True)).effects == []
        assert c.queue.depth == 1


class TestFollowUps:
    """Interrupt mode merges and interrupts (one ack a turn); queue mode queues, capped."""

    def test_interrupt_mode(self):
        c = core("interrupt")
        started(c)
        e1, e2 = event("one"), event("two")
        effects = c.handle(Inbound(e1), ctx()).effects
        assert effects == [Notify(e1, INTERRUPT_ACK, ack=True), Interrupt("one")]
        assert c.handle(Inbound(e2), ctx()).effects == [Interrupt("two")]
        assert c.queue.pending_slot.event.text == "one\ntwo"
        assert c.statistics().interrupting

    def test_a_settled_turn_is_not_interrupted(self):
        c = core("interrupt")
        started(c)
        assert c.handle(Inbound(event("late")), ctx(turn_settled=True)).effects == []
        assert c.queue.depth == 1

    def test_queue_mode_acknowledges_and_caps(self):
        c = core("queue", cap=2)
        started(c)
        acks = [c.handle(Inbound(event(f"q{n}")), ctx()).effects for n in range(2)]
        assert [a[0].text for a in acks] == [QUEUED_ACK, f"{QUEUED_ACK} (2 queued)"]
        full = event("too many")
        reaction = c.handle(Inbound(full), ctx())
        assert reaction.effects == [Notify(full, QUEUE_FULL.format(2), "rejected")]
        assert reaction.answer.refused is None and reaction.answer.queue_depth == 2

    def test_a_refusable_message_is_refused_instead(self):
        c = core("queue", cap=1)
        started(c)
        c.handle(Inbound(event("q")), ctx())
        full = event("more")
        reaction = c.handle(Inbound(full, refusable=True), ctx())
        assert reaction.effects == [Refuse(full, QUEUE_FULL.format(1))]
        assert reaction.answer.refused == QUEUE_FULL.format(1)

    def test_a_sender_that_gave_up_gets_no_refusal(self):
        # admit() timed out and answered its client: the event is answered and consumed
        c = core("queue", cap=1)
        started(c)
        c.handle(Inbound(event("q")), ctx())
        full, ticket = event("more"), AdmitTicket()
        assert ticket.abandon() is None
        reaction = c.handle(Inbound(full, refusable=True, ticket=ticket), ctx())
        assert reaction.effects == [Notify(full, QUEUE_FULL.format(1), "rejected")]
        assert reaction.answer.refused is None

    def test_a_refusal_made_before_the_sender_gave_up_stands(self):
        c = core("queue", cap=1)
        started(c)
        c.handle(Inbound(event("q")), ctx())
        full, ticket = event("more"), AdmitTicket()
        reaction = c.handle(Inbound(full, refusable=True, ticket=ticket), ctx())
        assert reaction.effects == [Refuse(full, QUEUE_FULL.format(1))]
        assert ticket.abandon() == QUEUE_FULL.format(1)  # the late reader acts on it

    def test_replayed_events_queue_without_interrupting(self):
        c = core("interrupt")
        started(c)
        replayed = event("old", metadata={"replayed": True})
        assert c.handle(Inbound(replayed), ctx()).effects == []
        assert c.queue.depth == 1


class TestCommands:
    """/stop, /new, /reset, /status and /help decide their effects here."""

    def test_stop(self):
        c = core("interrupt")
        started(c)
        follow = event("follow")
        c.handle(Inbound(follow), ctx())
        stop = event("/stop")
        effects = c.handle(Inbound(stop), ctx(has_delegations=lambda: True)).effects
        assert effects == [Interrupt("/stop"), Consume((follow.event_id,), "dropped"),
                           CancelDelegations()]
        # the answer waits for the stopped turn, then names what it dropped and cut
        assert c.holds(stop.event_id)
        effects = c.handle(TurnDone(c.running.id, "interrupted", ("e-cut",)), ctx()).effects
        assert effects[0] == Notify(stop, STOPPED, "command", (follow.event_id, "e-cut"))

    def test_stop_of_a_settled_turn_answers_at_once(self):
        c = core("interrupt")
        started(c)
        stop = event("/stop")
        effects = c.handle(Inbound(stop), ctx(turn_settled=True)).effects
        assert effects == [Interrupt("/stop"), Notify(stop, STOPPED, "command")]
        assert not c.closing

    def test_stop_with_nothing_to_stop(self):
        c = core()
        stop = event("/stop")
        assert c.handle(Inbound(stop), ctx()).effects == [
            Notify(stop, NOTHING_TO_STOP, "command")]

    @pytest.mark.parametrize("word", ["/new", "/reset"])
    def test_new_waits_for_the_reset_before_the_next_turn(self, word):
        c = core("queue")
        started(c)
        queued = event("/queue later")
        c.handle(Inbound(queued), ctx())
        wake = event("wake", internal=True)
        c.handle(Inbound(wake), ctx())
        new = event(word)
        effects = c.handle(Inbound(new), ctx()).effects
        assert effects == [Interrupt("/new"), Consume((queued.event_id,), "dropped"),
                           CancelDelegations(), ResetSession(new, cut=True,
                                                             dropped=(queued.event_id,))]
        first_turn = c.running.id
        assert c.handle(TurnDone(first_turn, "interrupted", ("e-cut",)),
                        ctx()).effects[1:] == []
        assert c.busy and c.running is None  # the wake-up waits for the new session
        effects = c.handle(ResetDone(new, cut=True, answers=(queued.event_id,)), ctx()).effects
        assert effects[0] == Notify(new, NEW_SESSION_CUT, "command",
                                    (queued.event_id, "e-cut"))
        assert isinstance(effects[1], StartTurn) and effects[1].item.event is wake

    def test_new_answer_waits_for_the_turn_it_cut(self):
        """A /new whose reset is done before the cut turn ended answers once it has, naming
        what the turn left unanswered."""
        c = core()
        started(c)
        new = event("/new")
        c.handle(Inbound(new), ctx())
        assert c.handle(ResetDone(new, cut=True), ctx()).effects == []
        effects = c.handle(TurnDone(c.running.id, "interrupted", ("e-cut",)), ctx()).effects
        assert effects[0] == Notify(new, NEW_SESSION_CUT, "command", ("e-cut",))

    def test_two_resets_in_flight_hold_turns_until_both_are_done(self):
        c = core()
        first, second = event("/new"), event("/new")
        c.handle(Inbound(first), ctx())
        c.handle(Inbound(second), ctx())
        c.handle(Inbound(event("after")), ctx())
        assert kinds(c.handle(ResetDone(first, cut=False), ctx()).effects) == ["Notify"]
        effects = c.handle(ResetDone(second, cut=False), ctx()).effects
        assert effects[0] == Notify(second, NEW_SESSION, "command")
        assert effects[1].item.event.text == "after"

    def test_a_failed_reset_is_answered(self):
        c = core()
        new = event("/new")
        c.handle(Inbound(new), ctx())
        effects = c.handle(ResetDone(new, cut=False, error="StoreError"), ctx()).effects
        assert effects == [Notify(new, RESET_FAILED.format("StoreError"), "command")]

    def test_status_carries_what_only_the_core_knows(self):
        c = core("queue")
        started(c)
        c.handle(Inbound(event("waiting")), ctx())
        status = event("/status")
        [answer] = c.handle(Inbound(status), ctx(now=75.0)).effects
        assert answer == AnswerStatus(status, queue_depth=1, running_for=75.0)

    def test_help(self):
        c = core()
        help_event = event("/help")
        [notice] = c.handle(Inbound(help_event), ctx()).effects
        assert notice.consume == "command" and notice.text.startswith("/new")


class TestDrainAndIdle:
    """A drain stops new turns and interrupts at its deadline; idle actors retire."""

    def test_drain(self):
        c = core()
        first = started(c)
        assert c.handle(StopAccepting(), ctx()).answer is True
        c.handle(Inbound(event("late", internal=True)), ctx())
        reaction = c.handle(InterruptTurn("shutdown_timeout"), ctx())
        assert reaction.answer is True and reaction.effects == [Interrupt("shutdown_timeout")]
        assert c.handle(session_core.DrainResult(), ctx()).answer == "running"
        assert kinds(c.handle(TurnDone(first.turn_id, "interrupted"), ctx()).effects) == [
            "TurnFinished"]  # no new turn while draining
        assert c.handle(session_core.DrainResult(), ctx()).answer == "interrupted"

    def test_idle_check(self):
        c = core()
        assert c.handle(IdleCheck(10.0), ctx(now=5.0)).effects == []
        assert c.handle(IdleCheck(10.0), ctx(now=11.0)).effects == [Retire()]
        first = started(c)
        assert c.handle(IdleCheck(10.0, turn_timeout=30.0), ctx(now=20.0)).effects == []
        effects = c.handle(IdleCheck(10.0, turn_timeout=30.0), ctx(now=31.0)).effects
        assert kinds(effects) == ["Warn", "Interrupt"] and isinstance(effects[0], Warn)
        assert first.turn_id == c.running.id  # not retired while it runs


class TestEveryEventIsHandled:
    """Every effect that answers or runs an event names it; the actor consumes any event
    that ends neither queued nor answered."""

    def test_settled_ids(self):
        e = event("x")
        assert settled_event_ids([Notify(e, "t", "command")]) == {e.event_id}
        assert settled_event_ids([Notify(e, "ack")]) == set()
        assert settled_event_ids([Consume(("a", "b"), "dropped")]) == {"a", "b"}
        assert settled_event_ids([ResetSession(e, False), Refuse(e, "full")]) == {e.event_id}

    def test_a_command_nobody_answers_is_consumed_as_unhandled(self, make_harness,
                                                               monkeypatch, caplog):
        monkeypatch.setitem(session_core._COMMANDS, "help", lambda core, e, ctx, fx: None)
        h = make_harness()
        with caplog.at_level(logging.ERROR, logger="hermes_actors.session"):
            h.send("/help")
            h.idle()
        assert h.gw.store.pending_inbox() == []
        assert any("neither queued nor answered" in r.getMessage() for r in caplog.records)

    def test_the_actor_carries_out_every_effect_the_core_can_decide(self):
        # An effect type without a handler would fail the message it came from at run time.
        import typing

        from hermes_actors.runtime.session_actor import _EFFECT_HANDLERS

        assert set(_EFFECT_HANDLERS) | {Retire} == set(typing.get_args(session_core.Effect))
