"""One turn, run in a worker outside the session actor's mailbox (§7, §8, §9).

The order of durable steps is the recovery contract: mark the turn and persist the user
message (one transaction, which also consumes the inbox rows) → run the agent → persist the
reply, record the delivery obligation and clear the marker (one transaction; with the ledger
off the reply is persisted first, then the marker cleared) → send → mark delivered. A crash
between any two steps leaves a state recovery can judge from the marker, the transcript and
the ledger alone.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field
from typing import Any

import pykka

from hermes_actors._green import brief_lock
from hermes_actors.agents.base import TurnRequest, TurnResult, check_agent
from hermes_actors.errors import FencedError, StoreUnavailableError
from hermes_actors.model.context import assemble_session_context, build_session_context_prompt
from hermes_actors.model.entry import SessionEntry
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.keys import is_shared_multi_user_session
from hermes_actors.model.redact import redact_user_id, should_redact
from hermes_actors.model.silence import SILENCE_NOTICE, is_silence_marker
from hermes_actors.model.usage import token_usage
from hermes_actors.runtime.cache import Checkin, Checkout
from hermes_actors.runtime.crash import crashpoint
from hermes_actors.runtime.delegations import Delegation, format_completion
from hermes_actors.runtime.eviction import should_check_pressure
from hermes_actors.runtime.guard import call_optional, is_greenlet_exit
from hermes_actors.runtime.queueing import Queued
from hermes_actors.runtime.services import Services
from hermes_actors.store.turns import SessionExistsError, SessionGoneError, SessionRotatedError

__all__ = ["FAILED_NOTICE", "RunningTurn", "TurnOutcome", "run_turn"]

log = logging.getLogger("hermes_actors.turn")

#: The notice a user gets when the agent fails (§17.5).
FAILED_NOTICE = (
    "⚠️ The agent failed to answer ({}). Send your message again, or /new to start over."
)

#: How much of an agent's error message its log line shows.
ERROR_LOG_CHARS = 500
#: The password of a URL (``scheme://user:password@``), masked in that log line.
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/@\s:]*:)[^/@\s]+@", re.IGNORECASE)


def _describe_error(exc: BaseException) -> str:
    """``<type>: <message>`` for a log line: one line, at most :data:`ERROR_LOG_CHARS` of the
    message, a URL's password masked. The project's agents put no secret in their messages
    (the command agent names only its program and the stderr tail it logs anyway; the
    openai agent's key travels in a header), but a host's agent or a server's answer might
    echo a URL with its credentials."""
    text = _URL_PASSWORD.sub(r"\1***@", " ".join(str(exc).split()))
    if len(text) > ERROR_LOG_CHARS:
        text = text[:ERROR_LOG_CHARS - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """How a turn ended, reported back to the session actor."""

    #: ``completed``, ``interrupted``, ``failed``, ``partial``, or ``skipped`` (not run).
    status: str
    session_id: str | None = None
    #: The events a turn stopped by ``/stop`` or ``/new`` left unanswered (the command's
    #: answer names them).
    unanswered: tuple[str, ...] = ()


@dataclass(slots=True)
class RunningTurn:
    """The actor's handle on its running turn; the worker attaches the agent once it has it."""

    id: int
    item: Queued
    #: Monotonic clock reading when the turn started (for the agent timeout).
    started: float = 0.0
    #: Set (under ``lock``) once the turn was asked to stop; nothing waits on it.
    interrupted: bool = False
    #: The first interrupt's reason (the one the agent is given).
    reason: str | None = None
    #: Set by a ``/new`` (or ``/reset``) interrupt, even one after an earlier interrupt.
    reset: bool = False
    #: Set by a ``/stop`` interrupt, even one after an earlier interrupt.
    stopped: bool = False
    #: The events the turn answers once it began: its item's, and those the session
    #: still owed (an interrupted or crashed turn's), which it took up.
    answers: tuple[str, ...] = ()
    #: Set once ``begin_turn`` committed (the inbox rows are consumed from then on).
    began: bool = False
    #: Set once the turn's answer is recorded: interrupting it would change nothing.
    settled: bool = False
    agent: Any = None
    lock: Any = field(default_factory=brief_lock)
    #: Set once the turn's worker is done with it (its ``TurnDone`` told): a conversation's
    #: delete waits for it before it deletes what the turn wrote. (Looked up when a turn
    #: starts: gevent's event once ``threading`` is patched, whenever this was imported.)
    ended: threading.Event = field(default_factory=lambda: threading.Event())

    def interrupt(self, reason: str | None) -> None:
        """Ask the turn to stop; safe before the agent is attached."""
        with self.lock:
            if reason == "/new":  # (/reset's reason too)
                self.reset = True
            elif reason == "/stop":
                self.stopped = True
            if self.interrupted:
                return
            self.interrupted = True
            self.reason = reason
            agent = self.agent
        if agent is not None:
            _safe_interrupt(agent, reason)

    def attach(self, agent: Any) -> None:
        """Record the agent; interrupt it at once if the turn was already interrupted."""
        with self.lock:
            self.agent = agent
            already = self.interrupted
        if already:
            _safe_interrupt(agent, self.reason)


class _NotRun(Exception):
    """The turn was interrupted before its agent started."""


def _safe_interrupt(agent: Any, reason: str | None) -> None:
    call_optional("agent.interrupt", "-", agent, "interrupt", reason)


def _compose_message(item: Queued, shared: bool, redact_pii: bool = False) -> str:
    """The turn's user message: in a shared session each human message (each of a merged
    slot's) prefixed with its own sender, then the recovery note before it all."""
    event = item.event
    text = event.text
    if shared and not event.internal:
        text = "\n".join(f"[{_sender(part, redact_pii)}] {part.text}"
                          for part in item.messages if part.text)
    note = event.metadata.get("recovery_note")
    if note:
        text = f"{note}\n\n{text}" if text else note
    return text


def _sender(event: MessageEvent, redact_pii: bool) -> str:
    """The sender's name; without one, the id as the context prompt shows it (hashed when
    ``privacy.redact_pii`` applies to the platform: the model never sees a raw id)."""
    source = event.source
    if source.user_name:
        return source.user_name
    if source.user_id and should_redact(source.platform, redact_pii):
        return redact_user_id(source.user_id)
    return source.user_id or "unknown"


def run_turn(services: Services, session_key: str, turn: RunningTurn) -> TurnOutcome:
    """Run ``turn`` to the end; never raises (failures become notices and outcomes)."""
    event = turn.item.event
    try:
        return _run(services, session_key, turn, event)
    except FencedError as exc:
        # A cluster node lost the session's shard: its new owner answers the message (it
        # is still in the inbox, or the marker is judged there); nothing is sent from here.
        log.warning("turn abandoned: the shard is not this node's any more session_key=%s "
                    "error=%s", session_key, exc)
        return TurnOutcome("failed")
    except StoreUnavailableError as exc:
        # The database cannot be used (an outage of its server): nothing can be recorded or
        # answered through the ledger now. The message stays in the durable inbox and the
        # marker (if set) stays too: the gateway that replaces this one recovers both.
        log.warning("turn failed: the session database cannot be used session_key=%s "
                    "error=%s", session_key, exc)
        return TurnOutcome("failed")
    except Exception as exc:  # noqa: BLE001 - the actor must always hear back
        log.exception("turn failed outside the agent session_key=%s", session_key)
        try:
            if not turn.began and turn.item.event_ids:
                # Told it failed, the user resends: never replay it later on top of that.
                services.store.consume_events(list(turn.item.event_ids), "failed")
            services.delivery.send_owed(
                session_key, event.source, FAILED_NOTICE.format(type(exc).__name__),
                "notice", f"error:{event.event_id}",
                in_reply_to=turn.answers or turn.item.event_ids,
            )
        except Exception:  # noqa: BLE001
            log.exception("could not settle the failed turn session_key=%s", session_key)
        return TurnOutcome("failed")


def _run(services: Services, key: str, turn: RunningTurn, event: MessageEvent) -> TurnOutcome:
    store, config = services.store, services.config
    internal = event.internal
    # The activity bump of §6 step 4 rides on the turn's start (one commit less), and so does
    # the creation of a session at its first message. The actor's key is the source's key:
    # an existing, usable entry needs no §6 pass.
    entry = store.get(key)
    bound = event.metadata.get("session_id")
    first = entry is None and not (internal and bound)
    if not first:
        entry = _usable(store, event.source, entry)
    if not first and internal and bound and bound != entry.session_id:
        # A wake-up of a session /new closed: record it where it belongs, do not run it.
        store.append_message(bound, {"role": "system", "content": event.text})
        store.consume_events(list(turn.item.event_ids), "closed_session")
        return TurnOutcome("skipped", bound)
    shared = is_shared_multi_user_session(
        event.source,
        group_sessions_per_user=config.group_sessions_per_user,
        thread_sessions_per_user=config.thread_sessions_per_user,
    )
    message = _compose_message(turn.item, shared, config.privacy.redact_pii)
    started = _start(services, key, turn, event, entry, {"role": "user", "content": message})
    if isinstance(started, TurnOutcome):
        return started
    entry, token, checkout = started
    turn.answers = turn.item.event_ids
    if entry.owed_events:  # it took up the answers the session still owed
        marked = store.get(key)
        if marked is not None and marked.active_turn_token == token:
            turn.answers = marked.active_turn_events
    turn.began = True
    crashpoint("after_turn_marked")
    crashpoint("after_user_persisted")
    session_id = entry.session_id
    agent = None
    fresh = False  # an agent from the factory, not the cache's
    persisted = False
    emitted = [0]  # bytes the agent added to the transcript (tool output, …)

    def emitter(message_: dict[str, Any]) -> None:
        emitted[0] += _size(message_)
        store.append_message(session_id, message_, turn_token=token)

    error: BaseException | None = None
    unanswered: tuple[str, ...] = ()
    result = TurnResult(None, "failed")
    try:
        try:
            # From here every failure is a failed turn: answered, marker cleared, agent back.
            agent = checkout.get() if checkout is not None else None
            context = assemble_session_context(
                event.source, config, entry,
                ["local", *services.delivery.connected_platforms()],
                session_key=key, shared=shared,  # (the actor's key is the source's)
            )
            if agent is None:
                agent, fresh = check_agent(services.agent_factory(context)), True
            turn.attach(agent)
            request = TurnRequest(
                session_key=key,
                session_id=session_id,
                message=message,
                load_history=lambda: store.load_transcript(session_id, before_turn=token),
                context=context,
                system_prompt=services.system_prompt + "\n\n" + build_session_context_prompt(
                    context, redact_pii=config.privacy.redact_pii
                ),
                internal=internal,
                media_urls=event.media_urls,
                _emit=emitter,
                _delegate=lambda fn, label="task": _delegate(services, key, session_id, event,
                                                             fn, label),
                _interrupted=lambda: turn.interrupted,
            )
            if turn.interrupted:
                # Interrupted before the agent began (/stop, a follow-up, a drain): the user
                # message is in the transcript, the agent is not run. One after this check
                # (while typing starts) reaches the agent via request.interrupted() too.
                raise _NotRun
            # "typing…" while the agent works; stopped before the answer goes out
            typing = services.delivery.typing(event.source)
            try:
                result = agent.run_turn(request)
            finally:
                typing.stop()
            if not isinstance(result, TurnResult):
                raise TypeError(f"run_turn returned {type(result).__name__}, not TurnResult")
        except _NotRun:
            result = TurnResult(None, "interrupted")
        except BaseException as exc:  # noqa: BLE001 - an agent failure is a failed turn
            # SystemExit too (a tool's sys.exit(), argparse): escaping, it ended the worker
            # without a TurnDone (under gevent it reached the hub and ended the process)
            if isinstance(exc, KeyboardInterrupt) or is_greenlet_exit(exc):
                raise
            log.warning("agent failed session_key=%s error=%s", key, _describe_error(exc))
            error, result = exc, TurnResult(None, "failed")
        unanswered = _settle(services, key, session_id, token, turn, result, error)
        persisted = True
    finally:
        if agent is not None:
            # An agent whose turn was not fully persisted is never released by the cache.
            _check_in(services, key, session_id, agent, persisted=persisted, fresh=fresh)
    try:  # the answer is settled: what follows is bookkeeping, logged when it fails
        grown = len(message.encode()) + len((result.reply or "").encode()) + emitted[0]
        if should_check_pressure(grown):
            services.cache.check_pressure()
        if result.status == "completed" and error is None:
            store.clear_resume_pending(key)  # no write unless the flag is set
            services.on_turn_succeeded(key)
    except Exception:  # noqa: BLE001
        log.exception("post-turn bookkeeping failed session_key=%s", key)
    return TurnOutcome(result.status, session_id, unanswered)


def _size(message: dict[str, Any]) -> int:
    """About how many bytes a message adds to a transcript (its text, else its form)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return len(content.encode("utf-8", "replace"))
    return len(repr(message))


def _start(services: Services, key: str, turn: RunningTurn, event: MessageEvent,
           entry: SessionEntry | None, user_message: dict[str, str]
           ) -> tuple[SessionEntry, str, pykka.Future | None] | TurnOutcome:
    """Mark the turn and persist its user message: ``(entry, token, agent checkout)``, or a
    :class:`TurnOutcome` when the turn must not run. ``entry`` ``None``: the session's first
    message, and the session is created in the transaction that starts the turn."""
    store, internal, ids = services.store, event.internal, turn.item.event_ids
    if entry is None:
        # A new session id has no agent in the cache, so none is asked for.
        try:
            token, entry = store.begin_first_turn(
                key, event.source, user_message=user_message, event_ids=ids,
                internal=internal, touch_activity=not internal)
            return entry, token, None
        except SessionExistsError:
            if turn.reset:
                # /new (or /reset) interrupted this turn, then created the session: the
                # message it dropped must not start a turn in the new session; its answer
                # names the message.
                store.consume_events(list(ids), "dropped")
                return TurnOutcome("skipped", unanswered=ids)
            # Created meanwhile by another caller: the turn starts on that entry.
            entry = _usable(store, event.source, store.get(key))
    # Asked before the turn is marked, answered while that commits: one wait for both.
    checkout = _request_agent(services, key, entry.session_id)
    try:
        token = store.begin_turn(key, entry.session_id, user_message=user_message,
                                 event_ids=ids, internal=internal, touch_activity=not internal)
    except Exception as exc:
        _return_unused(services, key, entry.session_id, checkout)
        if isinstance(exc, SessionGoneError):
            # The prune dropped the (stale) entry after the turn read it: the message starts
            # a new session, as it would have a moment later.
            return _start(services, key, turn, event, None, user_message)
        if not isinstance(exc, SessionRotatedError):
            raise
        # /new or /reset won the race: the turn it interrupted never starts (its answer
        # names the message).
        store.consume_events(list(ids), "dropped")
        return TurnOutcome("skipped", entry.session_id, ids)
    return entry, token, checkout


def _usable(store: Any, source: Any, entry: SessionEntry | None) -> SessionEntry:
    """``entry``, or when there is none or it is suspended, the entry after a §6 pass."""
    if entry is None or entry.suspended:
        return store.get_or_create_session(source, touch_activity=False)
    return entry


def _request_agent(services: Services, key: str, session_id: str) -> pykka.Future:
    """Ask the cache for the session's agent; a refused request (the cache has stopped)
    becomes a future that raises, so it fails the turn where an agent failure does."""
    try:
        return services.cache.actor_ref.ask(Checkout(key, session_id), block=False)
    except Exception:  # noqa: BLE001 - re-raised by the future's get()
        failed: pykka.Future = pykka.ThreadingFuture()
        failed.set_exception()
        return failed


def _check_in(services: Services, key: str, session_id: str, agent: Any, *,
              persisted: bool | None, fresh: bool = False) -> None:
    """Give the agent back to the cache. Sent without waiting (the session's next checkout
    queues behind it in the cache's mailbox); counted until done, so ``wait_idle()`` covers
    its evictions. With the cache stopped (a turn that outlived the shutdown), an agent
    the cache never held (``fresh``) is closed here: nobody else would; one it held was
    closed by its ``close_all``."""
    tracker = services.tracker
    tracker.add()
    try:
        services.cache.actor_ref.tell(Checkin(key, session_id, agent, persisted, tracker.done))
    except pykka.ActorDeadError:
        tracker.done()
        log.warning("the agent cache has stopped: the agent is not checked in "
                    "session_key=%s", key)
        if fresh:
            call_optional("agent close", key, agent, "close")


def _return_unused(services: Services, key: str, session_id: str, checkout: Any) -> None:
    """Check the agent of a turn that never began back in (it was never used)."""
    try:
        agent = checkout.get()
        if agent is not None:
            _check_in(services, key, session_id, agent, persisted=None)
    except Exception:  # noqa: BLE001 - the caller reports why the turn did not begin
        log.exception("could not return an unused agent session_key=%s", key)


def _settle(services: Services, key: str, session_id: str, token: str, turn: RunningTurn,
            result: TurnResult, error: BaseException | None) -> tuple[str, ...]:
    """Persist the reply, record what is owed, clear the marker (``turn.settled`` from
    then on), send. Returns the events a turn stopped by ``/stop`` or ``/new`` left
    unanswered (the command's answer names them)."""
    store, delivery = services.store, services.delivery
    event = turn.item.event
    answers = turn.answers
    reply = result.reply if isinstance(result.reply, str) else None
    owed: tuple[str, str] | None = None
    persist: dict | None = None
    cut = turn.interrupted or result.status in ("interrupted", "partial")
    unanswered: tuple[str, ...] = ()
    if error is not None or result.status == "failed":
        name = type(error).__name__ if error is not None else "AgentFailed"
        owed = (FAILED_NOTICE.format(name), "notice")
    elif reply and reply.strip():
        persist = {"role": "assistant", "content": reply}
        if not is_silence_marker(reply):
            owed = (reply, "reply")
        elif not event.internal or answers != turn.item.event_ids:
            owed = (SILENCE_NOTICE, "notice")  # a person waits for an answer
    elif cut and turn.reason == "timeout":
        owed = (FAILED_NOTICE.format("TimeoutError"), "notice")
    # With the ledger on, the reply rides in the transaction that records what is owed for it
    # and clears the marker; otherwise it is persisted first (recovery adopts a persisted
    # reply whose marker is still set, §7).
    merged = persist is not None and owed is not None and delivery.ledger_enabled
    if persist is not None and not merged:
        store.append_message(session_id, persist, turn_token=token, is_reply=True)
        crashpoint("after_reply_persisted")
    row = None
    if owed is not None:
        # Recording what is owed and clearing the marker are one transaction: recovery never
        # finds a marker whose answer already sits in the ledger (no resume on top of it).
        row = delivery.record(key, event.source, owed[0], owed[1], token, clear_turn=True,
                              reply=(session_id, persist) if merged and persist else None,
                              in_reply_to=answers)
        if merged:
            crashpoint("after_reply_persisted")
        crashpoint("after_ledger_recorded")
    elif cut and (turn.stopped or turn.reset):
        store.clear_turn_active(key, token)
        unanswered = answers  # the /stop's or /new's answer names them
    else:
        # Cut short by a follow-up or a drain, the events stay owed: the session's next
        # turn answers them with its own.
        store.clear_turn_active(key, token, carry=cut)
    # Before the send, which can take long (a rate-limited adapter): a follow-up or /new
    # meanwhile has nothing left to interrupt (§8).
    turn.settled = True
    usage = token_usage(result.usage)  # (values that are not counts are left out)
    if not usage.empty:
        # Bookkeeping: the answer is recorded (and claimed for this boot) already, so a
        # failed counter write must not fail the turn (its reply would wait, claimed, for
        # the next start while the user is told the agent failed).
        try:
            store.update_session(
                key,
                last_prompt_tokens=usage.prompt_tokens,
                touch_activity=False,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
            )
        except (FencedError, StoreUnavailableError):
            raise  # not this gateway's to send any more (another node, a replacement)
        except Exception:  # noqa: BLE001 - logged; the answer still goes out
            log.exception("token usage not recorded session_key=%s", key)
    if owed is not None:
        delivery.attempt(row, event.source, owed[0])
    return unanswered


def _delegate(services: Services, key: str, session_id: str, event: MessageEvent, fn,
              label: str) -> str:
    source = event.source

    def report(delegation: Delegation, status: str, output: str) -> None:
        services.submit_internal(
            MessageEvent(
                source=source,
                text=format_completion(delegation, status, output),
                internal=True,
                metadata={
                    "delegation": {"id": delegation.id, "status": status, "output": output},
                    "session_id": delegation.session_id,
                },
            )
        )

    return services.delegations.start(key, session_id, fn, label, report)
