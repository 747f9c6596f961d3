"""The store methods the actor runtime calls around a turn: inbox, turn start, reply, ledger.

Each method is one backend transaction, and each works in degraded mode too (the inbox and
ledger are then in memory, see :mod:`~hermes_actors.store.backends.files.backend`). A turn's reply, its
obligation and the clearing of its marker can be one transaction (``ledger_record(reply=...)``);
recovery still handles a reply persisted without its obligation (the ledger off, or a
database written by another tool), see :mod:`~hermes_actors.runtime.recovery_rules`.

This is a mixin of :class:`~hermes_actors.store.store.SessionStore`; it relies on the store's
``_apply``, ``_commit``, ``_create_op``, ``_key_lock``, ``_backend``, ``_entries`` and clock
helpers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, NamedTuple

from hermes_actors.errors import StoreError
from hermes_actors.model.entry import SessionEntry, validate_session_id, validate_session_key
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.ids import new_id
from hermes_actors.model.jsontext import to_json
from hermes_actors.model.source import SessionSource
from hermes_actors.model.timeutil import epoch
from hermes_actors.store import ledger, lifecycle
from hermes_actors.store.ops import (
    AcceptEvent,
    AppendMessage,
    ConsumeEvents,
    LedgerClaim,
    LedgerFinish,
    LedgerPrune,
    LedgerRecord,
    PruneInbox,
    WithdrawEvent,
)
from hermes_actors.store.outbox import OutboxStoreMethods
from hermes_actors.store.transcript import normalize_message

__all__ = ["MarkerSettlement", "RuntimeStoreMethods", "SessionExistsError", "SessionRotatedError"]


class MarkerSettlement(NamedTuple):
    """How recovery settles one durable turn marker (see ``settle_markers``)."""

    session_key: str
    #: The marker's token: only a marker still holding it is settled.
    token: str
    #: Mark the session resume-pending with this reason (``None``: clear only).
    resume_reason: str | None = None
    #: ``(target SessionSource, content, kind)`` owed to the chat, or ``None``.
    owed: tuple[Any, str, str] | None = None


class SessionRotatedError(StoreError):
    """The session key routes to another session id than the one a turn started in."""


class SessionExistsError(StoreError):
    """A session's first turn found that its key has an entry after all."""


log = logging.getLogger(__name__)

_DAY = 86400.0


def _payload(event: MessageEvent) -> str:
    try:
        return to_json(event.to_dict())
    except (TypeError, ValueError) as exc:
        raise ValueError(f"event {event.event_id} cannot be stored: {exc}") from None


class RuntimeStoreMethods(OutboxStoreMethods):
    """Durable inbox, turn start, turn reply lookup and the delivery ledger (§7, §8)."""

    # -- durable inbox ----------------------------------------------------------------------

    def accept_event(self, session_key: str, event: MessageEvent) -> str:
        """Persist an accepted inbound event before it is acknowledged (idempotent by id).

        Returns the event's own id, or, when an earlier event holds its
        ``MessageEvent.ingress_key`` (a retried or redelivered message), that event's id:
        then nothing was stored. The check and the insert are one transaction.
        """
        validate_session_key(session_key)
        return self._apply(
            [
                AcceptEvent(
                    event_id=event.event_id,
                    session_key=session_key,
                    payload=_payload(event),
                    internal=event.internal,
                    received_at=epoch(event.received_at),
                    ingress_key=event.ingress_key,
                )
            ]
        )[0]

    def withdraw_event(self, event_id: str) -> bool:
        """Delete an unconsumed inbox event, leaving nothing of it (a message refused after
        it was made durable); False when it is unknown or already consumed."""
        return bool(self._apply([WithdrawEvent(event_id)])[0])

    def consume_events(self, event_ids: Iterable[str], reason: str) -> None:
        """Mark inbox events consumed (``turn``, ``command``, ``dropped``...); the first
        reason sticks."""
        ids = tuple(event_ids)
        if ids:
            self._apply([ConsumeEvents(ids, str(reason), self._ts())])

    def pending_inbox(self) -> list[tuple[str, MessageEvent]]:
        """Unconsumed events as ``(session_key, event)`` in their original arrival order.

        An event that no longer parses (e.g. its plugin platform is gone) is skipped with a
        warning and stays in the inbox.
        """
        out = []
        for key, payload in self._backend.pending_inbox():
            try:
                out.append((key, MessageEvent.from_dict(payload)))
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("inbox event for %s cannot be replayed: %s", key, exc)
        return out

    def inbox_prune(self, max_age_days: float = 7) -> int:
        """Delete inbox rows consumed more than ``max_age_days`` ago; returns the count."""
        return self._apply([PruneInbox(self._ts() - max_age_days * _DAY)])[0] or 0

    # -- turns ------------------------------------------------------------------------------

    def begin_turn(
        self,
        session_key: str,
        session_id: str,
        *,
        user_message: dict[str, Any] | None = None,
        event_ids: Iterable[str] = (),
        internal: bool = False,
        touch_activity: bool = False,
    ) -> str:
        """Start a turn in ONE transaction: set the durable turn marker (new token), append
        ``user_message`` tagged with the token, consume ``event_ids`` (reason ``turn``), and
        with ``touch_activity`` bump ``updated_at`` (a human turn is user activity).

        Returns the token. Raises :class:`StoreError` for an unknown key,
        :class:`SessionRotatedError` when the key no longer routes to ``session_id`` (compare-
        and-swap: a turn never marks a session it did not start in), and ``ValueError`` for a
        malformed message (nothing is written then).
        """
        validate_session_id(session_id)
        ids = tuple(event_ids)
        msg = None if user_message is None else normalize_message(user_message, self._ts())
        with self._key_lock(session_key):
            entry = self._entries.get(session_key)
            if entry is None:
                raise StoreError(f"no session with key {session_key!r}")
            if entry.session_id != session_id:
                raise SessionRotatedError(
                    f"session {session_key!r} moved to {entry.session_id} (a /new or /reset) "
                    f"before the turn on {session_id} began"
                )
            token, ops, marked = self._turn_start(entry, msg, ids, internal, touch_activity)
            self._commit(ops, put=[marked])
        return token

    def begin_first_turn(
        self,
        session_key: str,
        source: SessionSource,
        *,
        user_message: dict[str, Any] | None = None,
        event_ids: Iterable[str] = (),
        internal: bool = False,
        touch_activity: bool = False,
    ) -> tuple[str, SessionEntry]:
        """:meth:`begin_turn` for a key that has no entry yet (a session's first message):
        the session is created from ``source`` (§6 ``create``: a fresh entry and its
        ``sessions`` row) in the same transaction that starts its first turn, one commit
        instead of two.

        Returns the token and the created entry as it was before the turn's marker. Raises
        :class:`SessionExistsError` when the key has an entry by then (nothing is written:
        the caller starts over on that entry) and ``ValueError`` for a malformed message.
        """
        validate_session_key(session_key)
        ids = tuple(event_ids)
        msg = None if user_message is None else normalize_message(user_message, self._ts())
        with self._key_lock(session_key):
            if self._entries.get(session_key) is not None:
                raise SessionExistsError(f"session {session_key!r} was created meanwhile")
            now = self._now()
            fresh = lifecycle.fresh_entry(session_key, source, now)
            token, ops, marked = self._turn_start(fresh, msg, ids, internal, touch_activity, now)
            self._commit([self._create_op(fresh), *ops], put=[marked])
        return token, fresh

    def _turn_start(self, entry: SessionEntry, msg: dict[str, Any] | None, ids: tuple[str, ...],
                    internal: bool, touch_activity: bool, now: datetime | None = None
                    ) -> tuple[str, list[Any], SessionEntry]:
        """A new turn token, the ops that start the turn, and ``entry`` with the marker."""
        token = new_id()
        now = now or self._now()
        marked = entry.evolve(
            active_turn_token=token,
            active_turn_started_at=now,
            active_turn_internal=bool(internal),
            updated_at=now if touch_activity else entry.updated_at,
        )
        ops: list[Any] = []
        if msg is not None:
            ops.append(AppendMessage(entry.session_id, msg, turn_token=token))
        if ids:
            ops.append(ConsumeEvents(ids, "turn", self._ts()))
        return token, ops, marked

    def turn_reply(self, session_id: str, token: str) -> dict[str, Any] | None:
        """The persisted final reply (``is_reply``) of turn ``token``, for crash recovery."""
        return self._backend.turn_reply(validate_session_id(session_id), token)

    def turn_replies(self, turns: Iterable[tuple[str, str] | tuple[str, str, float | None]]
                     ) -> dict[tuple[str, str], str]:
        """``(session_id, token) -> content`` of the persisted reply of each turn that has
        one, in one read (recovery judges 1,000 markers without 1,000 round trips).

        An item may carry a third element, the marker's start (epoch seconds): then a reply
        the transcript ends with that no turn of the gateway recorded (an agent writing its
        own rows, a migrated store) counts too when it is not older than that start.
        """
        triples = [(validate_session_id(t[0]), t[1], t[2] if len(t) > 2 else None)
                   for t in turns]
        return self._backend.turn_replies(triples) if triples else {}

    def settle_markers(self, settlements: Iterable[MarkerSettlement], *,
                       ledger_on: bool = True) -> int:
        """Settle recovered turn markers in ONE transaction: each marker still holding its
        token is cleared, marked ``resume_pending`` with the given reason (not on a suspended
        entry), and its owed answer recorded ``pending`` in the ledger (with ``ledger_on``).
        Returns how many markers were cleared."""
        now = self._now()
        ops: list[Any] = []
        put = []
        with self._all_keys():
            for item in settlements:
                if item.owed is not None and ledger_on:
                    target, content, kind = item.owed
                    oid = ledger.obligation_id(item.session_key, item.token, content)
                    ops.append(self._ledger_record_op(oid, item.session_key, target.platform,
                                                      target.chat_id, target.thread_id,
                                                      content, kind))
                entry = self._entries.get(item.session_key)
                if entry is None or entry.active_turn_token != item.token:
                    continue
                new = lifecycle.clear_turn_marker(entry)
                if item.resume_reason is not None and not entry.suspended:
                    new = new.evolve(resume_pending=True, resume_reason=item.resume_reason,
                                     last_resume_marked_at=now)
                put.append(new)
            if ops or put:
                self._commit(ops, put=put)
        return len(put)

    # -- delivery ledger --------------------------------------------------------------------

    def ledger_record(
        self,
        *,
        session_key: str,
        platform: str,
        chat_id: str | None,
        thread_id: str | None,
        content: str,
        kind: str,
        token: str | None,
        clear_turn: bool = False,
        claim_for: tuple[int, float] | None = None,
        consume: tuple[str, ...] = (),
        consume_reason: str = "command",
        reply: tuple[str, dict[str, Any]] | None = None,
        in_reply_to: tuple[str, ...] = (),
    ) -> str | None:
        """Record an obligation as ``pending``; returns its id (same inputs → same id, one row).

        With ``clear_turn=True`` the session's turn marker is cleared in the same transaction
        when it still holds ``token``: a turn whose answer is owed is settled, and recovery
        never sees a marker whose obligation already sits in the ledger. With
        ``claim_for=(owner_pid, owner_started_at)`` the row is also claimed (``attempting``)
        in that transaction, for a sender about to send it; ``None`` is returned when the
        claim is refused (the row exists and is final or owned by another live process).
        ``consume`` marks those inbox events consumed (``consume_reason``) in the same
        transaction (a command's answer and its consumption are one durable step).
        ``reply=(session_id, message)`` appends the turn's final reply (tagged with ``token``,
        ``is_reply``) to the transcript in that transaction too: the reply and what is owed
        for it become durable together (one commit less per turn). ``in_reply_to`` names the
        inbound events the obligation answers (kept on the row and on its outbox copy).
        """
        if kind not in ledger.KINDS:
            raise ValueError(f"ledger kind must be one of {', '.join(ledger.KINDS)}; got {kind!r}")
        if not isinstance(content, str):
            raise ValueError("ledger content must be a string")
        oid = ledger.obligation_id(session_key, token, content)
        ops: list[Any] = []
        if reply is not None:
            msg = normalize_message(reply[1], self._ts())
            ops.append(AppendMessage(validate_session_id(reply[0]), msg, turn_token=token,
                                     is_reply=True))
        claim_at = len(ops) + 1
        ops.append(self._ledger_record_op(oid, session_key, platform, chat_id, thread_id,
                                          content, kind, in_reply_to))
        if claim_for is not None:
            ops.append(LedgerClaim(oid, int(claim_for[0]), float(claim_for[1]), self._ts()))
        if consume:
            ops.append(ConsumeEvents(tuple(consume), consume_reason, self._ts()))
        if clear_turn and token is not None:
            with self._key_lock(session_key):
                entry = self._entries.get(session_key)
                put = []
                if entry is not None and entry.active_turn_token == token:
                    put = [lifecycle.clear_turn_marker(entry)]
                results = self._commit(ops, put=put)
        else:
            results = self._apply(ops)
        if claim_for is not None and not results[claim_at]:
            return None
        return oid

    def _ledger_record_op(self, oid, session_key, platform, chat_id, thread_id, content, kind,
                          in_reply_to: tuple[str, ...] = ()):
        return LedgerRecord(
            obligation_id=oid,
            session_key=session_key,
            platform=str(platform),
            chat_id=None if chat_id is None else str(chat_id),
            thread_id=None if thread_id is None else str(thread_id),
            content=content,
            kind=kind,
            at=self._ts(),
            in_reply_to=" ".join(in_reply_to) or None,
        )

    def ledger_claim(self, obligation_id: str, *, owner_pid: int, owner_started_at: float) -> bool:
        """Move a ``pending``/``failed`` row (or one whose owner died) to ``attempting`` for
        this owner; ``False`` for final rows, unknown ids and rows a live process owns."""
        return bool(
            self._apply(
                [LedgerClaim(obligation_id, int(owner_pid), float(owner_started_at), self._ts())]
            )[0]
        )

    def ledger_finish(
        self, obligation_id: str, state: str, *, error: str | None = None
    ) -> str | None:
        """End an attempt as ``delivered`` or ``failed`` (``abandoned`` after 3 attempts or
        24 h); returns the stored state, or ``None`` for an unknown id."""
        if state not in ("delivered", "failed"):
            raise ValueError(f"an attempt ends 'delivered' or 'failed', not {state!r}")
        return self._apply([LedgerFinish(obligation_id, state, error, self._ts())])[0]

    def ledger_finish_later(self, obligation_id: str, state: str, *, error: str | None = None,
                            on_done: Callable[[], None]) -> None:
        """:meth:`ledger_finish` without waiting for the commit; ``on_done()`` once durable
        (or failed, logged). A crash before that commit leaves the row ``attempting``:
        redelivered once with the recovered prefix, as for a crash right after the send."""
        if state not in ("delivered", "failed"):
            raise ValueError(f"an attempt ends 'delivered' or 'failed', not {state!r}")
        self._apply_later([LedgerFinish(obligation_id, state, error, self._ts())], on_done)

    def ledger_claim_many(self, obligation_ids: Iterable[str], *, owner_pid: int,
                          owner_started_at: float) -> set[str]:
        """:meth:`ledger_claim` for several rows in one transaction; the ids granted."""
        ids = list(obligation_ids)
        at = self._ts()
        ops = [LedgerClaim(oid, int(owner_pid), float(owner_started_at), at) for oid in ids]
        granted = self._apply(ops) if ops else []
        return {oid for oid, ok in zip(ids, granted, strict=True) if ok}

    def ledger_finish_many(self, outcomes: Iterable[tuple[str, bool, str | None]]) -> None:
        """End several attempts in one transaction: ``(obligation_id, delivered, error)``."""
        at = self._ts()
        ops = [LedgerFinish(oid, "delivered" if ok else "failed", None if ok else error, at)
               for oid, ok, error in outcomes]
        if ops:
            self._apply(ops)

    def ledger_rows(
        self, states: Iterable[str] | str | None = None, *, session_key: str | None = None
    ) -> list[dict[str, Any]]:
        """Ledger rows (every §7 column) oldest first, filtered by state(s) and key."""
        if isinstance(states, str):
            states = (states,)
        wanted = None if states is None else tuple(states)
        return self._backend.ledger_rows(wanted, session_key)

    def ledger_prune(self, max_age_days: float = 7) -> int:
        """Delete ``delivered``/``abandoned`` rows untouched for ``max_age_days``; the count."""
        return self._apply([LedgerPrune(self._ts() - max_age_days * _DAY)])[0] or 0
