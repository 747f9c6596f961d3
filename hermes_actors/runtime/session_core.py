"""The session's decisions as a pure state machine: a message in, effects out (§8).

:class:`SessionCore` holds one session's queue (:class:`~hermes_actors.runtime.queueing.
SessionQueue`), its running turn and its flags, and :meth:`SessionCore.handle` decides what a
message does to them and which effects follow: start a turn, notify the chat, consume inbox
events, interrupt the turn, cancel delegations, reset the session, answer ``/status``,
refuse a message, retire the actor. It does no I/O, starts no thread and reads no clock: the
:class:`Context` passed with each message carries the time and the few questions it asks of
the world (can this platform be sent to, does the session have delegations, has the running
turn already recorded its answer). The :class:`~hermes_actors.runtime.session_actor.
SessionActor` feeds it its mailbox, one message at a time (so FIFO follows from the
mailbox), and carries the effects out, slow ones in workers that report back with
messages (``TurnDone``, ``ResetDone``). So every rule of §8 is tested here without actors
or threads.

Commands are the rows of :mod:`hermes_actors.model.commands`; a command without a handler
here fails loudly at import, never by replaying its inbox row forever.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from hermes_actors._green import brief_lock
from hermes_actors.model.commands import REGISTRY, help_text
from hermes_actors.model.events import MessageEvent, MessageType
from hermes_actors.runtime.queueing import Queued, SessionQueue

__all__ = [
    "INTERRUPT_ACK", "NEW_SESSION", "NEW_SESSION_CUT", "NOTHING_TO_STOP", "QUEUED_ACK",
    "QUEUE_FULL", "QUEUE_USAGE", "RESET_FAILED", "STOPPED",
    "AdmitTicket", "AnswerStatus", "CancelDelegations", "Consume", "Context", "DrainResult", "Effect",
    "Forget", "GetStatistics", "IdleCheck", "Inbound", "InboundAnswer", "Interrupt", "InterruptTurn",
    "Kick", "Notify", "Reaction", "Refuse", "ResetDone", "ResetSession", "Retire",
    "SessionCore", "SessionStatistics", "StartTurn", "StopAccepting", "TurnDone",
    "TurnFinished", "Warn", "settled_event_ids",
]

INTERRUPT_ACK = "⚡ Interrupting the current turn."
QUEUED_ACK = "Queued for the next turn."
QUEUE_USAGE = "Usage: /queue <prompt>"
QUEUE_FULL = (
    "Queue full ({} waiting): this message was not queued. Wait for the current turn, "
    "or send /stop."
)
STOPPED = "Stopped"
NOTHING_TO_STOP = "No active task to stop"
NEW_SESSION = "✨ Started a new session."
#: ``/new`` or ``/reset`` that cut a running turn says so.
NEW_SESSION_CUT = "✨ Started a new session. The running turn was stopped."
#: The answer when the store could not start the new session (the old one goes on).
RESET_FAILED = "⚠️ Could not start a new session ({}). Send /new again."


# -- messages (what the actor's mailbox receives) -----------------------------------------------


class AdmitTicket:
    """The one decision on a refusable event, shared by the session actor and the sender
    (``Gateway.admit``) that waits for it, so a refusal is never lost between them.

    The actor may refuse the event only while the sender still waits (:meth:`refuse`); a
    sender that stops waiting (its timeout: it then answers its client that the event is
    accepted) calls :meth:`abandon`, after which the actor cannot refuse it any more and
    answers it with a final notice instead, consuming it. Whichever comes second sees the
    first: ``abandon`` returns the refusal the actor already made, which the sender must
    then act on (withdraw the event, hand the refusal to its client).
    """

    __slots__ = ("_lock", "_state", "_text")

    def __init__(self) -> None:
        self._lock = brief_lock()  # (two statements: never blocks or yields)
        self._state = "waiting"
        self._text: str | None = None

    def refuse(self, text: str) -> bool:
        """The actor's side: refuse the event with ``text``, if the sender still waits.
        ``False``: the sender gave up; the event must be answered and consumed instead."""
        with self._lock:
            if self._state == "abandoned":
                return False
            self._state, self._text = "refused", text
            return True

    def abandon(self) -> str | None:
        """The sender's side after its wait ended without an answer: from now on the event
        cannot be refused. Returns the refusal text when the actor refused it already."""
        with self._lock:
            if self._state == "refused":
                return self._text
            self._state = "abandoned"
            return None


@dataclass(frozen=True, slots=True)
class Inbound:
    """A submitted event for this session; answered with an :class:`InboundAnswer`."""

    event: MessageEvent
    #: The sender can hand a refusal back to its client (HTTP): an event the queue cannot
    #: take is then answered with the refusal text instead of a notice, and left unconsumed
    #: for the sender to withdraw.
    refusable: bool = False
    #: The decision shared with a refusable event's sender; without one (``None``) the
    #: sender waits for the answer whatever it takes.
    ticket: AdmitTicket | None = None


class InboundAnswer(NamedTuple):
    """What became of an :class:`Inbound` event."""

    #: The refusal text (the queue-full notice) when a refusable event was not taken.
    refused: str | None
    #: ``queue_depth`` after the event was handled.
    queue_depth: int


@dataclass(frozen=True, slots=True)
class TurnDone:
    """The worker of turn ``turn_id`` finished with ``status`` (``completed``,
    ``interrupted``, ``failed``, ``partial``, or ``skipped``: not run)."""

    turn_id: int
    status: str
    #: The events a turn stopped by ``/stop`` or ``/new`` left unanswered: the command's
    #: answer names them (any other interrupted turn leaves them owed in the store, to the
    #: session's next turn).
    unanswered: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ResetDone:
    """The worker of a ``/new`` (or ``/reset``) finished: ``error`` names what failed."""

    event: MessageEvent
    cut: bool
    error: str | None = None
    #: The events the answer names besides the command: the human messages it dropped and
    #: those the old session still owed an answer.
    answers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IdleCheck:
    """Housekeeping: stop if idle for ``idle_secs``; interrupt a turn older than
    ``turn_timeout`` (the agent timeout)."""

    idle_secs: float
    turn_timeout: float | None = None


@dataclass(frozen=True, slots=True)
class Kick:
    """Try again to start queued work (an adapter may have reconnected)."""


@dataclass(frozen=True, slots=True)
class StopAccepting:
    """Drain: start no new turn; answers whether a turn is still running."""


@dataclass(frozen=True, slots=True)
class InterruptTurn:
    """Interrupt the running turn (drain deadline); answers whether one was running."""

    reason: str


@dataclass(frozen=True, slots=True)
class Forget:
    """The conversation is being deleted (``Gateway.delete_session``): start nothing more,
    drop what is queued (it is deleted with the conversation, unanswered), stop the running
    turn as ``/stop`` does and the session's delegations; answers whether a turn runs."""


@dataclass(frozen=True, slots=True)
class DrainResult:
    """Answered with the status of the turn a drain interrupted (``"running"`` while it
    still runs), or ``None`` when the drain interrupted nothing here."""


@dataclass(frozen=True, slots=True)
class GetStatistics:
    """Answered with a :class:`SessionStatistics`."""


class SessionStatistics(NamedTuple):
    """A snapshot of one session actor."""

    #: The routing key.
    session_key: str
    #: ``queue_depth`` of §8.
    queue_depth: int
    #: Whether a turn runs now.
    running: bool
    #: Whether the running turn was asked to stop.
    interrupting: bool
    #: Monotonic clock reading of the last message or turn end.
    last_activity: float
    #: Turns finished by this actor incarnation.
    turns: int
    #: Whether a ``/new``'s reset is under way (its worker has not reported back).
    resetting: bool = False


# -- effects (what the actor carries out) -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Notify:
    """Answer ``event`` with ``text``; with ``consume``, its inbox row is consumed (with
    that reason) in the transaction that records the notice."""

    event: MessageEvent
    text: str
    consume: str | None = None
    #: More events this text answers (finally): messages a command dropped or cut short.
    answers: tuple[str, ...] = ()
    #: An acknowledgement (``Queued for the next turn.``): the event's answer comes later.
    ack: bool = False


@dataclass(frozen=True, slots=True)
class Consume:
    """Mark inbox events consumed."""

    event_ids: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class StartTurn:
    """Run ``item`` as turn ``turn_id`` in a worker (it reports back with ``TurnDone``)."""

    turn_id: int
    item: Queued


@dataclass(frozen=True, slots=True)
class Interrupt:
    """Ask the running turn to stop."""

    reason: str | None


@dataclass(frozen=True, slots=True)
class CancelDelegations:
    """End the session's background delegations (they report back as interrupted)."""


@dataclass(frozen=True, slots=True)
class ResetSession:
    """``/new``/``/reset``: in a worker, reset the session in the store and discard its
    agent, then report ``ResetDone``."""

    event: MessageEvent
    cut: bool
    #: The human messages the command dropped from the queue (its answer names them).
    dropped: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AnswerStatus:
    """``/status``: in a worker, read the session's entry and message count and answer."""

    event: MessageEvent
    queue_depth: int
    #: Seconds the running turn has run, or ``None`` when none runs.
    running_for: float | None


@dataclass(frozen=True, slots=True)
class Refuse:
    """The sender answers its client with ``text`` and withdraws the event."""

    event: MessageEvent
    text: str


@dataclass(frozen=True, slots=True)
class Retire:
    """Stop this actor if nothing arrived meanwhile (the router decides)."""


@dataclass(frozen=True, slots=True)
class Warn:
    """Log a warning."""

    text: str


@dataclass(frozen=True, slots=True)
class TurnFinished:
    """A turn ended with ``status`` after ``seconds`` (metrics and the turn's log line)."""

    status: str
    seconds: float


Effect = (Notify | Consume | StartTurn | Interrupt | CancelDelegations | ResetSession
          | AnswerStatus | Refuse | Retire | Warn | TurnFinished)


class Reaction(NamedTuple):
    """What handling one message produced."""

    effects: list[Effect]
    #: The answer to an ask (``None`` for tells).
    answer: Any = None


class Context(NamedTuple):
    """What the core may know of the world when it handles a message.

    (A named tuple, where the messages and effects are frozen slotted dataclasses: the actor
    builds one for every message it handles, and a named tuple is built in about a third of
    a frozen dataclass's time.)
    """

    #: Monotonic clock reading now.
    now: float
    #: The gateway is stopping: no new turn starts.
    stopping: bool = False
    #: Whether an adapter can take a send to this platform now.
    can_send: Callable[[str], bool] = lambda platform: True
    #: Whether the session has background delegations running.
    has_delegations: Callable[[], bool] = lambda: False
    #: Whether the running turn has recorded its answer (interrupting it changes nothing).
    turn_settled: bool = False


@dataclass
class _Running:
    id: int
    started: float
    interrupting: bool = False


def settled_event_ids(effects: list[Effect]) -> set[str]:
    """The inbox events these effects consume (now, or when their worker reports back)."""
    ids: set[str] = set()
    for effect in effects:
        if isinstance(effect, Notify) and effect.consume:
            ids.add(effect.event.event_id)
        elif isinstance(effect, Consume):
            ids.update(effect.event_ids)
        elif isinstance(effect, (ResetSession, AnswerStatus, Refuse)):
            ids.add(effect.event.event_id)
        elif isinstance(effect, StartTurn):
            ids.update(effect.item.event_ids)
    return ids


_turn_ids = itertools.count(1)


@dataclass
class SessionCore:
    """One session's queue, running turn and flags, and the rules of §8 over them."""

    session_key: str
    busy_input_mode: str
    queue_max: int
    last_activity: float
    queue: SessionQueue = field(default_factory=SessionQueue)
    running: _Running | None = None
    accepting: bool = True
    #: Resets in flight: no turn starts until they are done (the next turn must run in the
    #: new session).
    resetting: int = 0
    turns: int = 0
    acked_interrupt: bool = False
    drain_status: str | None = None
    warned_unreachable: bool = False
    #: Command answers held until the running turn they stopped has ended, so they can
    #: name the events it left unanswered (``/stop``, a ``/new`` that cut a turn).
    closing: list[Notify] = field(default_factory=list)
    #: Events a cut turn left unanswered, for the answer of the ``/new`` still under way.
    unanswered: tuple[str, ...] = ()
    #: The conversation is being deleted (:class:`Forget`): nothing it owes is answered.
    forgotten: bool = False

    @property
    def busy(self) -> bool:
        """Whether anything is running, queued or being reset (``wait_idle`` waits)."""
        return self.running is not None or bool(self.queue) or self.resetting > 0

    def handle(self, message: Any, ctx: Context) -> Reaction:
        """Decide what ``message`` does; return the effects and the answer (for asks)."""
        effects: list[Effect] = []
        answer: Any = None
        if isinstance(message, Inbound):
            self.last_activity = ctx.now
            refused = self._on_event(message.event, message.refusable, ctx, effects,
                                     message.ticket)
            answer = InboundAnswer(refused, self.queue.depth)
        elif isinstance(message, TurnDone):
            self._on_turn_done(message, ctx, effects)
        elif isinstance(message, ResetDone):
            self._on_reset_done(message, ctx, effects)
        elif isinstance(message, IdleCheck):
            self._on_idle_check(message, ctx, effects)
        elif isinstance(message, Kick):
            self._maybe_start(ctx, effects)
        elif isinstance(message, GetStatistics):
            answer = self.statistics()
        elif isinstance(message, StopAccepting):
            self.accepting = False
            answer = self.running is not None
        elif isinstance(message, InterruptTurn):
            answer = self.running is not None
            if self.running is not None:
                self.drain_status = "running"
                self._interrupt(message.reason, effects)
        elif isinstance(message, DrainResult):
            answer = self.drain_status
        elif isinstance(message, Forget):
            self.forgotten = True
            self.accepting = False
            self.queue = SessionQueue()
            self.closing = []
            answer = self.running is not None
            if self.running is not None:
                self._interrupt("/stop", effects)
            effects.append(CancelDelegations())
        return Reaction(effects, answer)

    def holds(self, event_id: str) -> bool:
        """Whether ``event_id`` waits here: queued, or a command whose answer is held."""
        return any(event_id in item.event_ids for item in self.queue.items()) or any(
            notice.event.event_id == event_id for notice in self.closing)

    def statistics(self) -> SessionStatistics:
        """A snapshot record."""
        return SessionStatistics(
            session_key=self.session_key,
            queue_depth=self.queue.depth,
            running=self.running is not None,
            interrupting=bool(self.running and self.running.interrupting),
            last_activity=self.last_activity,
            turns=self.turns,
            resetting=self.resetting > 0,
        )

    # -- events ---------------------------------------------------------------------------

    def _on_event(self, event: MessageEvent, refusable: bool, ctx: Context,
                  effects: list[Effect], ticket: AdmitTicket | None = None) -> str | None:
        command = event.command
        refused = None
        if command is not None and command.name == "queue":
            refused = self._cmd_queue(event, command.args, refusable, effects, ticket)
        elif command is not None:
            _COMMANDS[command.name](self, event, ctx, effects)
        elif event.internal:
            self.queue.enqueue_fifo(Queued.of(event, "internal"))
        elif self.running is None and not self.queue:
            self.queue.enqueue_fifo(Queued.of(event, "followup"))
        elif event.metadata.get("replayed") or (
                self.busy_input_mode == "interrupt" and event.metadata.get("held")):
            # Replayed after a restart, or held by the restore gate while the start
            # recovered: it was already waiting, so it queues behind the running turn
            # (merging like a follow-up in interrupt mode) and interrupts nothing.
            if self.busy_input_mode == "interrupt":
                self.queue.merge_followup(Queued.of(event, "followup"))
            else:
                self.queue.enqueue_fifo(Queued.of(event, "followup"))
        elif self.busy_input_mode == "interrupt" or event.message_type == MessageType.PHOTO:
            self._followup_interrupt(event, ctx, effects)
        else:
            # Queue mode: FIFO like /queue, but still a follow-up (§17.43: /stop drops it).
            refused = self._enqueue_capped(Queued.of(event, "followup"), event, refusable,
                                           effects, ticket)
        self._maybe_start(ctx, effects)
        return refused

    def _followup_interrupt(self, event: MessageEvent, ctx: Context,
                            effects: list[Effect]) -> None:
        self.queue.merge_followup(Queued.of(event, "followup"))
        if self.running is None or self.busy_input_mode != "interrupt":
            return
        if ctx.turn_settled:
            return  # its answer is already out: this simply runs next, nothing to interrupt
        if not self.acked_interrupt:
            self.acked_interrupt = True
            effects.append(Notify(event, INTERRUPT_ACK, ack=True))
        self._interrupt(event.text, effects)

    def _enqueue_capped(self, item: Queued, event: MessageEvent, refusable: bool,
                        effects: list[Effect], ticket: AdmitTicket | None = None
                        ) -> str | None:
        depth = self.queue.depth
        if depth >= self.queue_max:
            text = QUEUE_FULL.format(depth)
            # decided once: a sender that gave up waiting has answered its client already,
            # so the event is answered here (a final notice) and consumed, never left over
            if refusable and (ticket is None or ticket.refuse(text)):
                effects.append(Refuse(event, text))  # the sender answers and withdraws it
                return text
            effects.append(Notify(event, text, "rejected"))
            return None
        self.queue.enqueue_fifo(item)
        if event.metadata.get("replayed"):
            return None  # acknowledged before the restart already
        depth = self.queue.depth
        effects.append(Notify(event, QUEUED_ACK if depth <= 1 else f"{QUEUED_ACK} ({depth} queued)",
                              ack=True))
        return None

    def _interrupt(self, reason: str | None, effects: list[Effect]) -> None:
        if self.running is not None:
            self.running.interrupting = True
        effects.append(Interrupt(reason))

    # -- commands -------------------------------------------------------------------------

    def _cmd_queue(self, event: MessageEvent, prompt: str, refusable: bool,
                   effects: list[Effect], ticket: AdmitTicket | None = None) -> str | None:
        if not prompt and not event.media_urls:
            effects.append(Notify(event, QUEUE_USAGE, "command"))
            return None
        item = Queued(event.with_text(prompt), "queued", (event.event_id,))
        if self.running is None and not self.queue:
            self.queue.enqueue_fifo(item)
            return None
        return self._enqueue_capped(item, event, refusable, effects, ticket)

    def _cmd_stop(self, event: MessageEvent, ctx: Context, effects: list[Effect]) -> None:
        running = self.running is not None
        if running:
            self._interrupt("/stop", effects)
        dropped = self.queue.discard_followup()
        answers: tuple[str, ...] = ()
        if dropped is not None:
            effects.append(Consume(dropped.event_ids, "dropped"))
            answers = dropped.event_ids
        delegations = ctx.has_delegations()
        if delegations:
            effects.append(CancelDelegations())
        notice = Notify(event, STOPPED if running or delegations else NOTHING_TO_STOP,
                        "command", answers)
        if running and not ctx.turn_settled:
            self.closing.append(notice)  # sent once the turn ended, naming what it left
        else:
            effects.append(notice)

    def _cmd_new(self, event: MessageEvent, ctx: Context, effects: list[Effect]) -> None:
        cut = self.running is not None and not ctx.turn_settled
        if self.running is not None:
            self._interrupt("/new", effects)
        ids = tuple(i for item in self.queue.clear_human() for i in item.event_ids)
        if ids:
            effects.append(Consume(ids, "dropped"))
        effects.append(CancelDelegations())
        self.resetting += 1
        effects.append(ResetSession(event, cut, ids))

    def _cmd_status(self, event: MessageEvent, ctx: Context, effects: list[Effect]) -> None:
        running_for = ctx.now - self.running.started if self.running is not None else None
        effects.append(AnswerStatus(event, self.queue.depth, running_for))

    def _cmd_help(self, event: MessageEvent, ctx: Context, effects: list[Effect]) -> None:
        effects.append(Notify(event, help_text(), "command"))

    # -- turns ----------------------------------------------------------------------------

    def _maybe_start(self, ctx: Context, effects: list[Effect]) -> None:
        if (self.running is not None or not self.accepting or ctx.stopping
                or self.resetting):
            return
        item = self.queue.take_next()
        if item is None:
            return
        platform = item.event.source.platform
        if not ctx.can_send(platform):
            self.queue.put_back(item)  # stays queued until an adapter can take it
            if not self.warned_unreachable:
                self.warned_unreachable = True
                effects.append(Warn(f"no connected adapter for platform={platform}: "
                                    f"session_key={self.session_key} keeps "
                                    f"{self.queue.depth} event(s) queued"))
            return
        self.warned_unreachable = False
        self.running = _Running(next(_turn_ids), ctx.now)
        self.acked_interrupt = False
        effects.append(StartTurn(self.running.id, item))

    def _on_turn_done(self, message: TurnDone, ctx: Context, effects: list[Effect]) -> None:
        if self.running is None or self.running.id != message.turn_id:
            return
        started, self.running = self.running.started, None
        if not self.forgotten:
            self._release_closing(message.unanswered, effects)
        if message.status != "skipped":
            effects.append(TurnFinished(message.status, ctx.now - started))
        if self.drain_status == "running":
            self.drain_status = message.status
        self.turns += 1
        self.last_activity = ctx.now
        self._maybe_start(ctx, effects)

    def _release_closing(self, unanswered: tuple[str, ...], effects: list[Effect]) -> None:
        """The running turn ended: send the answers held for it, the first naming the
        events it left unanswered (or keep those for the ``/new`` still under way)."""
        if self.closing:
            first, *rest = self.closing
            self.closing = []
            effects.append(replace(first, answers=first.answers + unanswered))
            effects.extend(rest)
        elif unanswered and self.resetting:
            self.unanswered += unanswered
        elif unanswered:  # pragma: no cover - a stopped turn always has its command's answer
            effects.append(Warn(f"events left unanswered session_key={self.session_key}: "
                                f"{' '.join(unanswered)}"))

    def _on_reset_done(self, message: ResetDone, ctx: Context, effects: list[Effect]) -> None:
        self.resetting -= 1
        if message.error is not None:
            text = RESET_FAILED.format(message.error)
        else:
            text = NEW_SESSION_CUT if message.cut else NEW_SESSION
        answers = tuple(dict.fromkeys(message.answers + self.unanswered))
        self.unanswered = ()
        notice = Notify(message.event, text, "command", answers)
        if message.cut and self.running is not None:
            self.closing.append(notice)  # the cut turn has not ended yet
        else:
            effects.append(notice)
        self._maybe_start(ctx, effects)

    def _on_idle_check(self, check: IdleCheck, ctx: Context, effects: list[Effect]) -> None:
        turn = self.running
        if turn is not None and check.turn_timeout is not None:
            if ctx.now - turn.started >= check.turn_timeout:
                effects.append(Warn(f"turn timed out session_key={self.session_key} "
                                    f"after={ctx.now - turn.started:.0f}s"))
                self._interrupt("timeout", effects)
        if self.busy or ctx.now - self.last_activity < check.idle_secs:
            return
        effects.append(Retire())


#: Command name -> its handler (``/queue`` is handled apart: it can be refused).
_COMMANDS: dict[str, Callable[[SessionCore, MessageEvent, Context, list[Effect]], None]] = {
    "new": SessionCore._cmd_new,
    "reset": SessionCore._cmd_new,
    "stop": SessionCore._cmd_stop,
    "status": SessionCore._cmd_status,
    "help": SessionCore._cmd_help,
}
_missing = {row.name for row in REGISTRY} - set(_COMMANDS) - {"queue"}
if _missing:  # pragma: no cover - a registry row without a handler is a programming error
    raise RuntimeError(f"commands without a handler in the session core: {sorted(_missing)}")
