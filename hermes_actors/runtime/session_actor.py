"""``SessionActor``: one per live session key; owns the slot, the overflow and the turn (§8).

The mailbox is the only way in, so the order of arrival is the order of processing: FIFO
follows from the mailbox, not from locks. A turn runs in a worker (a thread, or a greenlet
under gevent) and reports back as a ``TurnDone`` message, so ``/stop``, ``/queue`` and
follow-ups are handled while it runs. The actor does decisions only; slow work (the agent,
transcript loads, sends) happens in workers and notice actors.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

import pykka

from hermes_actors._green import spawn
from hermes_actors._green.actor import LightActor
from hermes_actors.model.commands import help_text
from hermes_actors.model.events import MessageEvent, MessageType
from hermes_actors.runtime.queueing import Queued, SessionQueue
from hermes_actors.runtime.services import Services
from hermes_actors.runtime.turn import RunningTurn, TurnOutcome, run_turn

__all__ = [
    "Inbound",
    "InboundAnswer",
    "IdleCheck",
    "Kick",
    "SessionActor",
    "SessionStatistics",
    "StopAccepting",
    "InterruptTurn",
    "TurnDone",
    "GetStatistics",
    "DrainResult",
]

log = logging.getLogger("hermes_actors.session")

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


@dataclass(frozen=True)
class Inbound:
    """A submitted event for this session; answered with an :class:`InboundAnswer`."""

    event: MessageEvent
    #: The sender can hand a refusal back to its client (HTTP): an event the queue cannot
    #: take is then answered with the refusal text instead of a notice, and left unconsumed
    #: for the sender to withdraw.
    refusable: bool = False


class InboundAnswer(NamedTuple):
    """What became of an :class:`Inbound` event."""

    #: The refusal text (the queue-full notice) when a refusable event was not taken.
    refused: str | None
    #: ``queue_depth`` after the event was handled.
    queue_depth: int


@dataclass(frozen=True)
class TurnDone:
    """The worker of turn ``turn_id`` finished."""

    turn_id: int
    outcome: TurnOutcome


@dataclass(frozen=True)
class IdleCheck:
    """Housekeeping: stop if idle for ``idle_secs``; interrupt a turn older than
    ``turn_timeout`` (the agent timeout)."""

    idle_secs: float
    turn_timeout: float | None = None


@dataclass(frozen=True)
class Kick:
    """Try again to start queued work (an adapter may have reconnected)."""


@dataclass(frozen=True)
class StopAccepting:
    """Drain: start no new turn; answers whether a turn is still running."""


@dataclass(frozen=True)
class InterruptTurn:
    """Interrupt the running turn (drain deadline); answers whether one was running."""

    reason: str


@dataclass(frozen=True)
class DrainResult:
    """Answered with the status of the turn a drain interrupted (``"running"`` while it
    still runs), or ``None`` when the drain interrupted nothing here."""


@dataclass(frozen=True)
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


_turn_ids = itertools.count(1)


class SessionActor(LightActor):
    """See the module docstring."""

    def __init__(self, session_key: str, services: Services) -> None:
        super().__init__()
        self.session_key = session_key
        self._s = services
        self.queue = SessionQueue()
        self.running: RunningTurn | None = None
        self._accepting = True
        self._holding = False
        self._acked_interrupt = False
        self._turns = 0
        self._warned_unreachable = False
        self._drain_status: str | None = None
        #: The queue depth last added to ``services.queued``.
        self._reported_depth = 0
        self._last_activity = services.clock.monotonic()

    # -- mailbox --------------------------------------------------------------------------

    def on_receive(self, message: Any) -> Any:
        try:
            return self._dispatch(message)
        except Exception:  # noqa: BLE001 - an actor that dies loses its queue; log and go on
            log.exception("session actor error session_key=%s", self.session_key)
            return None
        finally:
            self._sync_busy()
            if isinstance(message, Inbound):
                self._s.tracker.done()

    def on_stop(self) -> None:
        self._release_busy()
        self._report_depth(0)
        if self.running is not None:
            self.running = None
            self._s.turns.done()

    def on_failure(self, exception_type, exception_value, traceback) -> None:
        self.on_stop()

    def _dispatch(self, message: Any) -> Any:
        if isinstance(message, Inbound):
            self._last_activity = self._s.clock.monotonic()
            refused = self._on_event(message.event, message.refusable)
            return InboundAnswer(refused, self.queue.depth)
        elif isinstance(message, TurnDone):
            self._on_turn_done(message)
        elif isinstance(message, IdleCheck):
            return self._on_idle_check(message)
        elif isinstance(message, Kick):
            self._maybe_start()
        elif isinstance(message, GetStatistics):
            return self.statistics()
        elif isinstance(message, StopAccepting):
            self._accepting = False
            return self.running is not None
        elif isinstance(message, InterruptTurn):
            if self.running is None:
                return False
            self._drain_status = "running"
            self.running.interrupt(message.reason)
            return True
        elif isinstance(message, DrainResult):
            return self._drain_status
        return None

    def statistics(self) -> SessionStatistics:
        """A snapshot record of this actor."""
        return SessionStatistics(
            session_key=self.session_key,
            queue_depth=self.queue.depth,
            running=self.running is not None,
            interrupting=bool(self.running and self.running.interrupted.is_set()),
            last_activity=self._last_activity,
            turns=self._turns,
        )

    # -- events ---------------------------------------------------------------------------

    def _on_event(self, event: MessageEvent, refusable: bool = False) -> str | None:
        """Handle one event; returns the refusal text when a refusable event is refused."""
        command = event.command
        refused = None
        if command is not None and command.name == "queue":
            refused = self._cmd_queue(event, command.args, refusable)
        elif command is not None:
            self._COMMANDS[command.name](self, event, command.args)
        elif event.internal:
            self.queue.enqueue_fifo(Queued.of(event, "internal"))
        elif self.running is None and not self.queue:
            self.queue.enqueue_fifo(Queued.of(event, "followup"))
        elif event.metadata.get("replayed"):
            self._enqueue_replayed(event)
        elif self._s.config.busy_input_mode == "interrupt" or (
            event.message_type == MessageType.PHOTO
        ):
            self._followup_interrupt(event)
        else:
            # Queue mode: FIFO like /queue, but still a follow-up (§17.43: /stop drops it).
            refused = self._enqueue_capped(Queued.of(event, "followup"), event, refusable)
        self._maybe_start()
        return refused

    def _enqueue_replayed(self, event: MessageEvent) -> None:
        # Replayed after a restart: it was already waiting before, so it queues behind the
        # running turn (merging like a follow-up in interrupt mode) and interrupts nothing.
        if self._s.config.busy_input_mode == "interrupt":
            self.queue.merge_followup(Queued.of(event, "followup"))
        else:
            self.queue.enqueue_fifo(Queued.of(event, "followup"))

    def _followup_interrupt(self, event: MessageEvent) -> None:
        self.queue.merge_followup(Queued.of(event, "followup"))
        if self.running is None or self._s.config.busy_input_mode != "interrupt":
            return
        if self.running.settled:
            return  # its answer is already out: this simply runs next, nothing to interrupt
        if not self._acked_interrupt:
            self._acked_interrupt = True
            self._notify(event, INTERRUPT_ACK)
        self.running.interrupt(event.text)

    def _enqueue_capped(self, item: Queued, event: MessageEvent,
                        refusable: bool = False) -> str | None:
        depth = self.queue.depth
        if depth >= self._s.config.queue_max:
            if refusable:
                return QUEUE_FULL.format(depth)  # the sender answers it and withdraws it
            self._notify(event, QUEUE_FULL.format(depth), consume="rejected")
            return None
        self.queue.enqueue_fifo(item)
        if event.metadata.get("replayed"):
            return None  # acknowledged before the restart already
        depth = self.queue.depth
        self._notify(event, QUEUED_ACK if depth <= 1 else f"{QUEUED_ACK} ({depth} queued)")
        return None

    # -- commands -------------------------------------------------------------------------

    def _cmd_queue(self, event: MessageEvent, prompt: str, refusable: bool = False
                   ) -> str | None:
        if not prompt and not event.media_urls:
            self._notify(event, QUEUE_USAGE, consume="command")
            return None
        item = Queued(event.with_text(prompt), "queued", (event.event_id,))
        if self.running is None and not self.queue:
            self.queue.enqueue_fifo(item)
            return None
        return self._enqueue_capped(item, event, refusable)

    def _cmd_stop(self, event: MessageEvent, _args: str) -> None:
        running = self.running is not None
        if running:
            self.running.interrupt("/stop")
        dropped = self.queue.discard_followup()
        if dropped is not None:
            self._consume(*dropped.event_ids, reason="dropped")
        stopped = self._s.delegations.cancel(self.session_key)
        self._notify(event, STOPPED if running or stopped else NOTHING_TO_STOP,
                     consume="command")

    def _cmd_new(self, event: MessageEvent, _args: str) -> None:
        cut = self.running is not None and not self.running.settled
        if self.running is not None:
            self.running.interrupt("/new")
        dropped = self.queue.clear_human()
        ids = [i for item in dropped for i in item.event_ids]
        if ids:
            self._consume(*ids, reason="dropped")
        self._s.delegations.cancel(self.session_key)
        store = self._s.store
        if store.reset_session(self.session_key) is None:
            store.get_or_create_session(event.source, force_new=True)
        self._track(self._s.cache.discard(self.session_key))
        self._notify(event, NEW_SESSION_CUT if cut else NEW_SESSION, consume="command")

    def _cmd_status(self, event: MessageEvent, _args: str) -> None:
        entry = self._s.store.get(self.session_key)
        lines = [f"Session: {entry.session_id if entry else '(none yet)'}"]
        lines.append(f"Queue depth: {self.queue.depth}")
        if self.running is None:
            lines.append("Turn: idle")
        else:
            ran = self._s.clock.monotonic() - self.running.started
            lines.append(f"Turn: running for {format_duration(ran)}")
        if entry is not None:
            if entry.resume_pending:
                lines.append(f"Resume pending: {entry.resume_reason or 'yes'}")
            if entry.suspended:
                lines.append("Suspended: the next message starts a new session")
        session_id = entry.session_id if entry is not None else None
        store, tracker = self._s.store, self._s.tracker

        def answer() -> None:
            # The transcript count is a store read: done here, not in the mailbox.
            try:
                count = store.message_count(session_id) if session_id else 0
                lines.insert(1, f"Messages: {count}")
            except Exception:  # noqa: BLE001 - the rest of the status is still worth sending
                log.exception("message count failed session_key=%s", self.session_key)
            finally:
                try:
                    self._notify(event, "\n".join(lines), consume="command")
                finally:
                    tracker.done()

        tracker.add()
        spawn(answer, "status")

    def _cmd_help(self, event: MessageEvent, _args: str) -> None:
        self._notify(event, help_text(), consume="command")

    #: Command name -> handler (``/queue`` is handled apart: it can be refused).
    _COMMANDS = {
        "new": _cmd_new,
        "reset": _cmd_new,
        "stop": _cmd_stop,
        "status": _cmd_status,
        "help": _cmd_help,
    }

    # -- turns ----------------------------------------------------------------------------

    def _maybe_start(self) -> None:
        if self.running is not None or not self._accepting or self._s.stopping.is_set():
            return
        item = self.queue.take_next()
        if item is None:
            return
        if not self._s.delivery.can_send(item.event.source.platform):
            self.queue.put_back(item)  # stays queued until an adapter can take it
            if not self._warned_unreachable:
                self._warned_unreachable = True
                log.warning("no connected adapter for platform=%s: session_key=%s keeps %d "
                            "event(s) queued", item.event.source.platform, self.session_key,
                            self.queue.depth)
            return
        self._warned_unreachable = False
        turn = RunningTurn(next(_turn_ids), item, started=self._s.clock.monotonic())
        self.running = turn
        self._s.turns.add()
        self._acked_interrupt = False
        ref = self.actor_ref

        def work() -> None:
            outcome = run_turn(self._s, self.session_key, turn)
            try:
                ref.tell(TurnDone(turn.id, outcome))
            except pykka.ActorDeadError:
                log.warning("turn finished after its actor stopped key=%s", self.session_key)

        spawn(work, f"turn-{turn.id}")

    def _on_turn_done(self, message: TurnDone) -> None:
        if self.running is None or self.running.id != message.turn_id:
            return
        turn, self.running = self.running, None
        self._s.turns.done()
        now = self._s.clock.monotonic()
        status = message.outcome.status
        if status != "skipped":
            self._s.turn_counters.finished(status, now - turn.started)
            log.debug("turn finished session_key=%s status=%s seconds=%.3f", self.session_key,
                      status, now - turn.started)
        if self._drain_status == "running":
            self._drain_status = status
        self._turns += 1
        self._last_activity = now
        self._maybe_start()

    def _on_idle_check(self, check: IdleCheck) -> bool:
        now = self._s.clock.monotonic()
        turn = self.running
        if turn is not None and check.turn_timeout is not None:
            if now - turn.started >= check.turn_timeout:
                log.warning("turn timed out session_key=%s after=%.0fs", self.session_key,
                            now - turn.started)
                turn.interrupt("timeout")
        if turn is not None or self.queue:
            return False
        if now - self._last_activity < check.idle_secs:
            return False
        if self._s.try_retire(self.session_key, self.actor_ref, self.actor_inbox.empty):
            self.stop()
            return True
        return False

    # -- helpers --------------------------------------------------------------------------

    def _notify(self, event: MessageEvent, text: str, consume: str | None = None) -> None:
        """Answer ``event`` with a notice; with ``consume`` the event's inbox row is consumed
        (with that reason) in the transaction that records the notice, so a crash can
        neither lose the answer of a consumed event nor replay an answered one."""
        self._s.notices.send(self.session_key, event.source, text, f"{event.event_id}:{text}",
                             consume=(event.event_id,) if consume else (), reason=consume,
                             in_reply_to=(event.event_id,))

    def _track(self, future: pykka.Future) -> None:
        """Count work handed to another actor (an agent's close) until it finishes, without
        waiting for it here: wait_idle() then covers it."""
        tracker = self._s.tracker
        tracker.add()

        def wait() -> None:
            try:
                future.get(timeout=120)
            except Exception:  # noqa: BLE001 - logged; the unit must be released regardless
                log.exception("handed-off work failed session_key=%s", self.session_key)
            finally:
                tracker.done()

        spawn(wait, "handoff")

    def _consume(self, *event_ids: str, reason: str) -> None:
        ids = [i for i in event_ids if i]
        if ids:
            self._s.store.consume_events(ids, reason)

    def _report_depth(self, depth: int) -> None:
        if depth != self._reported_depth:
            self._s.queued.add(depth - self._reported_depth)
            self._reported_depth = depth

    def _sync_busy(self) -> None:
        self._report_depth(self.queue.depth)
        busy = self.running is not None or bool(self.queue)
        if busy and not self._holding:
            self._s.tracker.add()
            self._holding = True
        elif not busy and self._holding:
            self._release_busy()

    def _release_busy(self) -> None:
        if self._holding:
            self._holding = False
            self._s.tracker.done()


def format_duration(seconds: float) -> str:
    """``12s``, ``3m 05s``, ``2h 04m``: how long a turn has run, for ``/status``."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"
