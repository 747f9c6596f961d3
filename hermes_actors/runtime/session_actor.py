"""``SessionActor``: one per live session key; carries out its :class:`SessionCore`'s effects.

The mailbox is the only way in, so the order of arrival is the order of processing: FIFO
follows from the mailbox, not from locks. Every message goes to the pure
:class:`~hermes_actors.runtime.session_core.SessionCore`, which decides; this actor only does
what the decision says. A turn runs in a worker (a thread, or a greenlet under gevent) and
reports back as a ``TurnDone`` message, so ``/stop``, ``/queue`` and follow-ups are handled
while it runs; a ``/new`` resets the session in a worker too (``ResetDone``), and ``/status``
reads the store in one. Notices go through the notice actors, so nothing slow ever runs in
this mailbox. After each inbound event the actor checks that the event ended queued or
consumed (a command word without a handler, say): one that did not is consumed as
``unhandled`` with an error, instead of replaying forever.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pykka

from hermes_actors._green import spawn
from hermes_actors._green.actor import LightActor
from hermes_actors.model.events import MessageEvent
from hermes_actors.runtime.services import Services
from hermes_actors.runtime.session_core import (
    INTERRUPT_ACK,
    NEW_SESSION,
    NEW_SESSION_CUT,
    NOTHING_TO_STOP,
    QUEUE_FULL,
    QUEUE_USAGE,
    QUEUED_ACK,
    STOPPED,
    AdmitTicket,
    AnswerStatus,
    CancelDelegations,
    Consume,
    Context,
    DrainResult,
    Forget,
    GetStatistics,
    IdleCheck,
    Inbound,
    InboundAnswer,
    Interrupt,
    InterruptTurn,
    Kick,
    Notify,
    Refuse,
    ResetDone,
    ResetSession,
    Retire,
    SessionCore,
    SessionStatistics,
    StartTurn,
    StopAccepting,
    TurnDone,
    TurnFinished,
    Warn,
    settled_event_ids,
)
from hermes_actors.runtime.turn import RunningTurn, run_turn
from hermes_actors.store.fencing import bound_to_tenure
from hermes_actors.store.lifecycle import merge_ids

__all__ = [
    "INTERRUPT_ACK", "NEW_SESSION", "NEW_SESSION_CUT", "NOTHING_TO_STOP", "QUEUED_ACK",
    "QUEUE_FULL", "QUEUE_USAGE", "STOPPED",
    "AdmitTicket", "DrainResult", "Forget", "GetStatistics", "IdleCheck", "Inbound", "InboundAnswer",
    "InterruptTurn", "Kick", "SessionActor", "SessionStatistics", "StopAccepting",
    "TurnDone", "format_duration",
]

log = logging.getLogger("hermes_actors.session")


class SessionActor(LightActor):
    """See the module docstring."""

    def __init__(self, session_key: str, services: Services,
                 tenure: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.session_key = session_key
        self._s = services
        #: A cluster node's ``(shard, epoch)`` this actor was started under: its writes and
        #: its workers' are that tenure's only (``store/fencing``); ``None`` off a cluster.
        self.tenure = tenure
        self.core = SessionCore(session_key, services.config.busy_input_mode,
                                services.config.queue_max, services.clock.monotonic())
        #: The running turn's handle (its worker, its agent), or ``None``.
        self._turn: RunningTurn | None = None
        #: Set as each worker of ``/new`` or ``/status`` ends (a delete waits for them).
        self._working: list[threading.Event] = []
        self._holding = False
        #: The queue depth last added to ``services.queued``.
        self._reported_depth = 0

    @property
    def queue(self) -> Any:
        """The session's queue (the core's)."""
        return self.core.queue

    # -- mailbox --------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        try:
            if self.tenure is None:
                return self._dispatch(message)
            with bound_to_tenure(self.tenure):
                return self._dispatch(message)
        except Exception:  # noqa: BLE001 - an actor that dies loses its queue; log and go on
            log.exception("session actor error session_key=%s", self.session_key)
            return None
        finally:
            # An inbound event holds a unit of the tracker from its dispatch until here
            self._sync_busy(isinstance(message, Inbound))

    def on_stop(self) -> None:
        self._release_busy()
        self._report_depth(0)
        if self._turn is not None:
            self._turn = None
            self._s.turns.done()

    def on_failure(self, exception_type, exception_value, traceback) -> None:
        self.on_stop()

    def _context(self) -> Context:
        services, turn = self._s, self._turn
        return Context(
            now=services.clock.monotonic(),
            stopping=services.stopping.is_set(),
            can_send=services.delivery.can_send,
            has_delegations=lambda: services.delegations.stoppable(self.session_key) > 0,
            turn_settled=turn is not None and turn.settled,
        )

    def _dispatch(self, message: Any) -> Any:
        if isinstance(message, TurnDone):
            self._turn_done(message)
        reaction = self.core.handle(message, self._context())
        effects = reaction.effects
        if isinstance(message, Inbound):
            self._check_handled(message.event, effects)
        retired = None
        for effect in effects:
            if isinstance(effect, Retire):
                retired = self._retire()
                continue
            # The core has already decided past every effect (a /new counts its reset in
            # flight before its worker runs), so a failed one must not skip the rest. A
            # failed Consume leaves its rows unconsumed: they replay at the next start.
            try:
                self._carry_out(effect)
            except Exception:  # noqa: BLE001 - logged; the other effects still run
                log.exception("effect %s failed session_key=%s", type(effect).__name__,
                              self.session_key)
        if type(message) is ResetDone:  # its answer is with the notices now
            self._s.resets.done()
        if isinstance(message, IdleCheck):
            return bool(retired)
        if type(message) is Forget:  # what the delete waits for before it deletes
            waits = [ended for ended in self._working if not ended.is_set()]
            if self._turn is not None:
                waits.append(self._turn.ended)
            return AllSet(waits) if waits else None
        return reaction.answer

    def _check_handled(self, event: MessageEvent, effects: list) -> None:
        """Every accepted event ends queued or consumed; one that did not would replay at
        every start."""
        if event.event_id in settled_event_ids(effects) or self.core.holds(event.event_id):
            return
        log.error("event %s was neither queued nor answered (session_key=%s); consuming it "
                  "as unhandled", event.event_id, self.session_key)
        effects.append(Consume((event.event_id,), "unhandled"))

    def statistics(self) -> SessionStatistics:
        """A snapshot record of this actor."""
        return self.core.statistics()

    # -- effects --------------------------------------------------------------------------

    def _carry_out(self, effect: Any) -> None:
        handler = _EFFECT_HANDLERS.get(type(effect))
        if handler is None:  # pragma: no cover - every effect type has a handler below
            raise TypeError(f"unknown effect {effect!r}")
        handler(self, effect)

    def _on_notify(self, effect: Notify) -> None:
        self._notify(effect.event, effect.text, effect.consume, effect.answers, effect.ack)

    def _on_consume(self, effect: Consume) -> None:
        self._s.store.consume_events(list(effect.event_ids), effect.reason)

    def _on_interrupt(self, effect: Interrupt) -> None:
        if self._turn is not None:
            self._turn.interrupt(effect.reason)

    def _on_cancel_delegations(self, effect: CancelDelegations) -> None:
        self._s.delegations.cancel(self.session_key)

    def _on_reset_session(self, effect: ResetSession) -> None:
        self._s.resets.add()  # until this actor handled its ResetDone
        self._in_worker(lambda: self._reset(effect), "reset")

    def _on_answer_status(self, effect: AnswerStatus) -> None:
        self._in_worker(lambda: self._answer_status(effect), "status")

    def _on_refuse(self, effect: Refuse) -> None:
        pass  # the sender answers its client and withdraws the event

    def _on_warn(self, effect: Warn) -> None:
        log.warning("%s", effect.text)

    def _on_turn_finished(self, effect: TurnFinished) -> None:
        self._s.turn_counters.finished(effect.status, effect.seconds)
        if log.isEnabledFor(logging.DEBUG):  # (one frame less than debug() when off)
            log.debug("turn finished session_key=%s status=%s seconds=%.3f",
                      self.session_key, effect.status, effect.seconds)

    def _start_turn(self, start: StartTurn) -> None:
        turn = RunningTurn(start.turn_id, start.item, started=self._s.clock.monotonic())
        self._turn = turn
        self._s.turns.add()
        ref = self.actor_ref
        services, key, tenure = self._s, self.session_key, self.tenure

        def work() -> None:
            try:
                with bound_to_tenure(tenure):
                    outcome = run_turn(services, key, turn)
                try:
                    ref.tell(TurnDone(turn.id, outcome.status, outcome.unanswered))
                except pykka.ActorDeadError:
                    log.warning("turn finished after its actor stopped key=%s", key)
            finally:
                turn.ended.set()

        spawn(work, f"turn-{turn.id}")

    def _turn_done(self, message: TurnDone) -> None:
        if self._turn is not None and self._turn.id == message.turn_id:
            self._turn = None
            self._s.turns.done()

    def _retire(self) -> bool:
        if self._s.try_retire(self.session_key, self.actor_ref, self.actor_inbox.empty):
            self.stop()
            return True
        return False

    def _in_worker(self, work: Any, name: str) -> None:
        """Run slow ``work`` off the mailbox, counted as outstanding until it ends."""
        tracker = self._s.tracker
        tracker.add()
        tenure = self.tenure
        ended = threading.Event()
        self._working = [e for e in self._working if not e.is_set()] + [ended]

        def run() -> None:
            try:
                with bound_to_tenure(tenure):
                    work()
            except Exception:  # noqa: BLE001 - logged; the unit is released regardless
                log.exception("%s failed session_key=%s", name, self.session_key)
            finally:
                ended.set()
                tracker.done()

        spawn(run, name)

    def _reset(self, effect: ResetSession) -> None:
        """The worker of ``/new``: reset in the store, discard the agent, report back."""
        store, error = self._s.store, None
        answers = effect.dropped
        try:
            old = store.get(self.session_key)
            if old is not None:  # what the old session still owed is answered by the /new
                answers = merge_ids(answers, old.owed_events)
            if store.reset_session(self.session_key) is None:
                store.get_or_create_session(effect.event.source, force_new=True)
            tracker = self._s.tracker
            tracker.add()  # until the cache's errands closed the agent
            try:
                self._s.cache.discard(self.session_key, on_done=tracker.done)
            except Exception:
                tracker.done()
                raise
        except Exception as exc:  # noqa: BLE001 - the user is told; the old session goes on
            log.exception("reset failed session_key=%s", self.session_key)
            error = type(exc).__name__
        try:
            self.actor_ref.tell(ResetDone(effect.event, effect.cut, error, answers))
        except pykka.ActorDeadError:
            self._s.resets.done()
            log.warning("reset finished after its actor stopped key=%s", self.session_key)

    def _answer_status(self, effect: AnswerStatus) -> None:
        """The worker of ``/status``: the entry and the transcript count are store reads."""
        store = self._s.store
        entry = store.get(self.session_key)
        lines = [f"Session: {entry.session_id if entry else '(none yet)'}"]
        try:
            count = store.message_count(entry.session_id) if entry is not None else 0
            lines.append(f"Messages: {count}")
        except Exception:  # noqa: BLE001 - the rest of the status is still worth sending
            log.exception("message count failed session_key=%s", self.session_key)
        lines.append(f"Queue depth: {effect.queue_depth}")
        if effect.running_for is None:
            lines.append("Turn: idle")
        else:
            lines.append(f"Turn: running for {format_duration(effect.running_for)}")
        if entry is not None:
            if entry.resume_pending:
                lines.append(f"Resume pending: {entry.resume_reason or 'yes'}")
            if entry.suspended:
                lines.append("Suspended: the next message starts a new session")
        self._notify(effect.event, "\n".join(lines), "command")

    # -- helpers --------------------------------------------------------------------------

    def _notify(self, event: MessageEvent, text: str, consume: str | None = None,
                answers: tuple[str, ...] = (), ack: bool = False) -> None:
        """Answer ``event`` (and ``answers``) with a notice, or acknowledge it (``ack``);
        with ``consume`` the event's inbox row is consumed (with that reason) in the
        transaction that records the notice, so a crash can neither lose the answer of a
        consumed event nor replay an answered one."""
        self._s.notices.send(self.session_key, event.source, text, f"{event.event_id}:{text}",
                             consume=(event.event_id,) if consume else (), reason=consume,
                             in_reply_to=(event.event_id, *answers),
                             kind="ack" if ack else "notice")

    def _report_depth(self, depth: int) -> None:
        if depth != self._reported_depth:
            self._s.queued.add(depth - self._reported_depth)
            self._reported_depth = depth

    def _sync_busy(self, inbound: bool) -> None:
        """Report the queue's depth; hold a unit of the tracker while busy. ``inbound``:
        the message was an event, whose unit is released here, or kept as the busy one
        when the actor becomes busy with it (never a moment at zero either way)."""
        depth = self.core.queue.depth
        if depth != self._reported_depth:
            self._report_depth(depth)
        busy = self.core.busy
        if busy and not self._holding:
            if inbound:
                inbound = False
            else:
                self._s.tracker.add()
            self._holding = True
        elif not busy and self._holding:
            self._release_busy()
        if inbound:
            self._s.tracker.done()

    def _release_busy(self) -> None:
        if self._holding:
            self._holding = False
            self._s.tracker.done()


#: What the actor does for each effect record of the core (``Retire`` is handled by
#: ``_dispatch`` itself): one lookup by type instead of a chain of ``isinstance`` tests.
_EFFECT_HANDLERS: dict[type, Any] = {
    Notify: SessionActor._on_notify,
    Consume: SessionActor._on_consume,
    StartTurn: SessionActor._start_turn,
    Interrupt: SessionActor._on_interrupt,
    CancelDelegations: SessionActor._on_cancel_delegations,
    ResetSession: SessionActor._on_reset_session,
    AnswerStatus: SessionActor._on_answer_status,
    Refuse: SessionActor._on_refuse,
    Warn: SessionActor._on_warn,
    TurnFinished: SessionActor._on_turn_finished,
}


def format_duration(seconds: float) -> str:
    """``12s``, ``3m 05s``, ``2h 04m``: how long a turn has run, for ``/status``."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


class AllSet:
    """Waits for several events (a deleted session's turn and workers), like one."""

    def __init__(self, events: list[threading.Event]) -> None:
        self._events = events

    def wait(self, timeout: float | None = None) -> bool:
        """Whether every event is set, within ``timeout`` seconds in all."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for event in self._events:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not event.wait(left):
                return False
        return True
