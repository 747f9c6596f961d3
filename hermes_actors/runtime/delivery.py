"""Delivery through the ledger (§7): record the obligation, claim it, send, mark the outcome.

``Delivery`` holds the adapters and the ledger calls; turn workers use it directly for
replies (so a session's replies leave in turn order), and ``NoticeActor``s use it for
acknowledgements and command answers, so an actor never blocks its mailbox on a send.

A platform's rate limit (a send answered with ``retry_after``, Telegram's 429) is waited out
here, inside the ledger's rules rather than beside them: the worker that sent it waits with
the row still claimed (``attempting``, this boot's: no sweep sends it meanwhile), so a
session's replies keep their order; then the refused try is a failed attempt (the ledger
counts it, and abandons the row after the third) and the row is claimed again, in one
transaction, and the parts not sent yet go out. A longer wait than :data:`MAX_RETRY_WAIT` is
not held in a worker: the row is left ``failed`` for the housekeeping sweep. Whenever a
failed row is left, its content is what is still owed (the parts already sent are dropped
from it), so a sweep or a later boot sends only the rest. A crash during the wait leaves an
``attempting`` row of a dead boot: redelivered once, prefixed. A refusal for good
(``SendResult.permanent``: a bot blocked by the user) abandons the row at once: no sweep
tries it again.

An adapter that can commit the outcome with the send itself does (``Outgoing.obligation_id``
in, ``SendResult.recorded`` out), and no outcome is recorded here: the durable outbox
appends a reply and marks its row ``delivered`` in one transaction, so it is exactly once
(and one commit cheaper). Every other platform is at least once: a crash between its send
and the outcome's commit leaves an ``attempting`` row, sent again once, prefixed.
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable, Iterable
from typing import NamedTuple

import pykka

from hermes_actors._green import brief_lock
from hermes_actors._green.actor import LightActor
from hermes_actors.adapters.base import (
    DeliveryAwareAdapter,
    Outgoing,
    SendResult,
    Typing,
    TypingAwareAdapter,
)
from hermes_actors.errors import FencedError, StoreUnavailableError
from hermes_actors.model.source import SessionSource
from hermes_actors.runtime.activity import ActivityTracker
from hermes_actors.runtime.crash import crashpoint
from hermes_actors.runtime.guard import is_greenlet_exit
from hermes_actors.store.ledger import MAX_ATTEMPTS

__all__ = ["RECOVERED_PREFIX", "Delivery", "NoticePool", "Owed"]

log = logging.getLogger("hermes_actors.delivery")

#: Rows a ledger sweep claims at once and settles before the next claim.
SWEEP_CHUNK = 32

#: Prefix of a reply delivered by recovery after an uncertain attempt (§7).
RECOVERED_PREFIX = "♻️ Recovered reply: "

#: The longest rate-limit wait (seconds) a sender holds before trying again; beyond it the
#: row stays ``failed`` for the next ledger sweep.
MAX_RETRY_WAIT = 30.0


class _NoTyping:
    """The indicator of a platform that shows none."""

    def stop(self) -> None:
        """Nothing to stop."""


_NO_TYPING = _NoTyping()


class Owed(NamedTuple):
    """A recorded obligation: its ledger id (``None`` with the ledger off, or when the claim
    was refused), whether this process already holds it (``attempting``), its kind and the
    inbound events it answers."""

    id: str | None
    claimed: bool
    kind: str = "reply"
    in_reply_to: tuple[str, ...] = ()


class Delivery:
    """Sends owed text through the matching adapter, bookkept in the delivery ledger.

    With a ``tracker`` (the gateway's), an attempt's outcome is committed without making
    the sender wait; the tracker counts it until it is durable.
    """

    def __init__(self, store, adapters: Iterable, *, ledger: bool = True,
                 tracker: ActivityTracker | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._store = store
        self._tracker = tracker
        self._adapters = {a.platform: a for a in adapters}
        #: Platforms whose adapter takes the whole :class:`Outgoing` record (checked once).
        self._aware = {p for p, a in self._adapters.items()
                       if isinstance(a, DeliveryAwareAdapter)}
        #: Platforms whose adapter shows "typing…" while a turn runs.
        self._typing = {p for p, a in self._adapters.items()
                        if isinstance(a, TypingAwareAdapter)}
        self._ledger = ledger
        #: Waits out a rate limit (the gateway's clock's ``sleep``: a fake clock's in tests).
        self._sleep = sleep
        #: Told of every text sent successfully (``Gateway.ask`` waits on it), or ``None``.
        self.on_sent: Callable[[Outgoing], None] | None = None

    @property
    def ledger_enabled(self) -> bool:
        """Whether obligations are recorded in the delivery ledger."""
        return self._ledger

    @property
    def adapters(self) -> dict:
        """Adapters by platform name."""
        return dict(self._adapters)

    def connected_platforms(self) -> list[str]:
        """Platforms whose adapter is connected now."""
        return sorted(p for p, a in self._adapters.items() if getattr(a, "connected", False))

    def can_send(self, platform: str) -> bool:
        """Whether an adapter for ``platform`` exists and is connected."""
        adapter = self._adapters.get(platform)
        return adapter is not None and bool(getattr(adapter, "connected", False))

    def typing(self, target: SessionSource) -> Typing:
        """Start the platform's "typing…" indicator in ``target``'s chat (a no-op indicator
        for platforms without one); never raises."""
        if target.platform not in self._typing or not self.can_send(target.platform):
            return _NO_TYPING
        try:
            return self._adapters[target.platform].start_typing(target)
        except Exception:  # noqa: BLE001 - an indicator is never worth a failed turn
            log.exception("adapter %s could not start typing", target.platform)
            return _NO_TYPING

    def record(self, session_key: str, target: SessionSource, content: str, kind: str,
               token: str, *, clear_turn: bool = False, claim: bool = True,
               consume: tuple[str, ...] = (), reason: str | None = None,
               reply: tuple[str, dict] | None = None,
               in_reply_to: tuple[str, ...] = ()) -> Owed:
        """Record the obligation; when an adapter can take it now, also claim it for this
        process in the same transaction (one commit less per reply; a crash before the send
        then redelivers it once, prefixed, which is the rule for an ``attempting`` row).

        ``clear_turn`` clears the session's turn marker (if it still holds ``token``) in the
        same transaction; ``claim=False`` only records (recovery leaves rows to the sweep);
        ``consume`` marks those inbox events consumed (``reason``) in that transaction too;
        ``reply=(session_id, message)`` persists the turn's final reply in it as well (the
        ledger must be on: without it a turn persists its reply itself, first).
        ``in_reply_to`` names the inbound events the text answers.
        """
        in_reply_to = tuple(in_reply_to)
        if not self._ledger:
            if reply is not None:
                raise ValueError("a reply is recorded with its obligation only in the ledger")
            if clear_turn:
                self._store.clear_turn_active(session_key, token)
            if consume:
                self._store.consume_events(list(consume), reason or "command")
            return Owed(None, claimed=True, kind=kind, in_reply_to=in_reply_to)
        claim = claim and self.can_send(target.platform)
        oid = self._store.ledger_record(
            session_key=session_key,
            platform=target.platform,
            chat_id=target.chat_id,
            thread_id=target.thread_id,
            content=content,
            kind=kind,
            token=token,
            clear_turn=clear_turn,
            claim=claim,
            consume=tuple(consume),
            consume_reason=reason or "command",
            reply=reply,
            in_reply_to=in_reply_to,
        )
        if oid is None:  # the claim was refused: someone else owns or finished it
            return Owed(None, claimed=False, kind=kind, in_reply_to=in_reply_to)
        return Owed(oid, claimed=claim, kind=kind, in_reply_to=in_reply_to)

    def attempt(self, owed: Owed | str | None, target: SessionSource, text: str) -> bool:
        """Claim the obligation (unless already claimed), send, and mark ``delivered`` or
        ``failed``. A bare obligation id is claimed first.

        Returns False without spending an attempt when no connected adapter serves the
        platform (the row stays ``pending`` for a later sweep: a claim taken at record time,
        while the adapter was up, is handed back) or another live process owns it.
        """
        if not isinstance(owed, Owed):
            owed = Owed(owed, claimed=owed is None and not self._ledger)
        if owed.id is None and self._ledger:
            return False  # refused at record time
        adapter = self._adapters.get(target.platform)
        if adapter is None or not getattr(adapter, "connected", False):
            log.info("delivery deferred platform=%s reason=not_connected", target.platform)
            if owed.claimed and owed.id is not None:  # claimed at record time, then dropped
                self._store.ledger_release(owed.id)  # a sweep sends it once it reconnects
            return False
        if not owed.claimed and not self._store.ledger_claim(owed.id):
            return False
        outgoing = Outgoing(target, text, owed.kind, owed.in_reply_to, owed.id)
        tries = 1
        while True:
            result = self._send(adapter, outgoing)
            wait = result.retry_after
            if (result.success or wait is None or wait > MAX_RETRY_WAIT
                    or tries >= MAX_ATTEMPTS):
                break
            # Rate-limited: wait with the row still claimed (a sweep leaves it alone), then
            # spend this attempt and claim the row again for the rest, in one commit.
            log.info("delivery rate-limited platform=%s retry_after=%.1f", target.platform, wait)
            self._sleep(max(0.0, wait))
            if owed.id is not None and not self._store.ledger_retry(
                    owed.id, error=result.error, content=result.unsent):
                return False  # abandoned: its attempts are used up
            tries += 1
            outgoing = outgoing._replace(text=result.unsent or outgoing.text)
        if owed.id is not None and not result.recorded:  # (the outbox commits its own)
            self._finish(owed.id, result)
        return result.success

    def _finish(self, obligation_id: str, result: SendResult,
                tracker: ActivityTracker | None = None) -> None:
        """Record the outcome of ``result``; with a tracker (``tracker``, else the
        gateway's), without waiting for the commit: counted as outstanding work until it is
        durable."""
        error, owed = result.error, result.unsent  # only the parts not sent are still owed
        if result.success:
            state, error = "delivered", None
        else:
            state = "abandoned" if result.permanent else "failed"
        tracker = tracker or self._tracker
        if tracker is None:
            self._store.ledger_finish(obligation_id, state, error=error, content=owed)
            return
        tracker.add()
        try:
            self._store.ledger_finish_later(obligation_id, state, error=error, content=owed,
                                            on_done=tracker.done)
        except BaseException:
            tracker.done()
            raise

    def attempt_many(self, items: Iterable[tuple[str, Outgoing]]) -> list[str]:
        """:meth:`attempt` for several recorded obligations ``(id, outgoing)``, in
        chunks of :data:`SWEEP_CHUNK`: one claim transaction per chunk, then each send
        followed by its outcome, committed without waiting (group commit batches them
        while the next send runs); the chunk ends once they are durable. A crash leaves the
        rows whose outcome was not committed yet ``attempting``: redelivered once, prefixed,
        like a crash inside :meth:`attempt`. Returns the ids delivered."""
        live = [(oid, self._adapters[out.target.platform], out) for oid, out in items
                if self.can_send(out.target.platform)]
        delivered: list[str] = []
        for start in range(0, len(live), SWEEP_CHUNK):
            chunk = live[start:start + SWEEP_CHUNK]
            claimed = self._store.ledger_claim_many([oid for oid, *_ in chunk])
            settling = ActivityTracker()
            try:
                for oid, adapter, outgoing in chunk:
                    if oid not in claimed:
                        continue
                    result = self._send(adapter, outgoing._replace(obligation_id=oid))
                    if not result.recorded:
                        self._finish(oid, result, settling)
                    if result.success:
                        delivered.append(oid)
            finally:
                settling.wait_idle()
        return delivered

    def _send(self, adapter, outgoing: Outgoing) -> SendResult:
        platform = outgoing.target.platform
        try:
            if platform in self._aware:
                result = adapter.deliver(outgoing)
            else:
                result = adapter.send(outgoing.target, outgoing.text)
            if not isinstance(result, SendResult):
                result = SendResult(bool(result.success), error=result.error,
                                    permanent=bool(getattr(result, "permanent", False)))
        except BaseException as exc:  # noqa: BLE001 - an adapter bug is a failed attempt
            # SystemExit too: escaping a notice actor, it would make pykka stop every actor
            if isinstance(exc, KeyboardInterrupt) or is_greenlet_exit(exc):
                raise
            log.exception("adapter %s raised while sending", platform)
            result = SendResult(False, error=f"{type(exc).__name__}: {exc}")
        crashpoint("after_send_before_delivered")
        if not result.success:
            log.warning("delivery failed platform=%s error=%s", platform, result.error)
        elif self.on_sent is not None:
            try:
                self.on_sent(outgoing)
            except Exception:  # noqa: BLE001 - a listener's failure is not the send's
                log.exception("the send listener failed")
        return result

    def send_owed(self, session_key: str, target: SessionSource, content: str, kind: str,
                  token: str, *, consume: tuple[str, ...] = (),
                  reason: str | None = None, in_reply_to: tuple[str, ...] = ()) -> bool:
        """Record then attempt: the path for notices (no turn marker sits between them)."""
        owed = self.record(session_key, target, content, kind, token, consume=consume,
                           reason=reason, in_reply_to=in_reply_to)
        return self.attempt(owed, target, content)


#: Asked of a notice actor: answered once the notices told it before are done.
_SETTLED = object()


class _NoticeActor(LightActor):
    def __init__(self, delivery: Delivery, finished: Callable[[str], None]) -> None:
        super().__init__()
        self._delivery = delivery
        self._finished = finished

    def on_receive(self, message):
        if message is _SETTLED:  # what was told before is recorded and sent
            return True
        session_key, target, text, token, consume, reason, in_reply_to, kind = message
        try:
            self._delivery.send_owed(session_key, target, text, kind, token,
                                     consume=consume, reason=reason, in_reply_to=in_reply_to)
        except (FencedError, StoreUnavailableError) as exc:
            # Expected, as for a turn: the shard went to another node (which answers the
            # event, still unconsumed) or the database is away (the gateway is replaced).
            log.warning("notice not sent session_key=%s error=%s", session_key, exc)
        except Exception:  # noqa: BLE001 - one failed notice must not stop the actor
            log.exception("notice delivery failed session_key=%s", session_key)
        finally:
            self._finished(session_key)


class NoticePool:
    """A few actors that deliver notices; one session's notices always use the same actor."""

    def __init__(self, delivery: Delivery, tracker: ActivityTracker, size: int = 4) -> None:
        self._tracker = tracker
        #: session key -> its notices queued or being sent (a handover waits for them)
        self._sending: dict[str, int] = {}
        self._lock = brief_lock()
        self._refs = [_NoticeActor.start(delivery, self._finished) for _ in range(size)]

    def sending(self, belongs: Callable[[str], bool]) -> int:
        """How many notices of the sessions ``belongs`` picks are queued or being sent."""
        with self._lock:
            counts = list(self._sending.items())
        return sum(n for key, n in counts if belongs(key))

    def _count(self, session_key: str, n: int) -> None:
        with self._lock:
            left = self._sending.get(session_key, 0) + n
            if left:
                self._sending[session_key] = left
            else:
                self._sending.pop(session_key, None)

    def _finished(self, session_key: str) -> None:
        self._count(session_key, -1)
        self._tracker.done()

    def send(self, session_key: str, target: SessionSource, text: str, token: str, *,
             consume: tuple[str, ...] = (), reason: str | None = None,
             in_reply_to: tuple[str, ...] = (), kind: str = "notice") -> None:
        """Queue a notice for delivery (never blocks on the send); ``consume`` inbox events
        are consumed in the transaction that records it; it answers ``in_reply_to``
        (finally, unless ``kind`` is ``ack``)."""
        ref = self._refs[zlib.crc32(session_key.encode()) % len(self._refs)]
        self._tracker.add()
        self._count(session_key, 1)
        try:
            ref.tell((session_key, target, text, token, consume, reason, in_reply_to, kind))
        except pykka.ActorDeadError:
            self._finished(session_key)
            log.warning("notice dropped after shutdown session_key=%s", session_key)

    def settle(self, session_key: str, timeout: float) -> bool:
        """Wait until the notices queued for ``session_key`` so far are recorded and sent
        (a delete, once the session's actor stopped, so none is recorded after it);
        ``False`` when that took longer than ``timeout`` seconds."""
        ref = self._refs[zlib.crc32(session_key.encode()) % len(self._refs)]
        try:
            return bool(ref.ask(_SETTLED, timeout=timeout))
        except pykka.ActorDeadError:
            return True
        except pykka.Timeout:
            return False

    def stop(self) -> None:
        """Stop the actors after they deliver what they hold."""
        for ref in self._refs:
            try:
                ref.stop(block=True, timeout=10)
            except (pykka.ActorDeadError, pykka.Timeout):
                pass
