"""``DeliveryLedger``: the delivery ledger's records (§7): what is owed, who is sending it,
how it ended. The rules (ids, claims, outcomes) are :mod:`hermes_actors.store.ledger`'s.

A sender is a gateway boot: the store's node id and the boot id it drew when it opened.
A reply can be persisted, recorded and claimed in one transaction (``ledger_record(reply=...,
claim=True)``), so a crash after it redelivers the reply once, prefixed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from hermes_actors.model.entry import validate_session_id
from hermes_actors.store import ledger, lifecycle
from hermes_actors.store.core import StoreCore
from hermes_actors.store.ops import (
    AppendMessage,
    ConsumeEvents,
    LedgerClaim,
    LedgerFinish,
    LedgerPrune,
    LedgerRecord,
    LedgerRelease,
    LedgerReopen,
    Op,
)
from hermes_actors.store.transcript import normalize_message

__all__ = ["DeliveryLedger", "Owner", "ledger_record_op"]

#: A sender: ``(node id, boot id)``.
Owner = tuple[str, str]

_DAY = 86400.0


def ledger_record_op(oid: str, session_key: str, platform: str, chat_id: str | None,
                     thread_id: str | None, content: str, kind: str, at: float,
                     in_reply_to: tuple[str, ...] = ()) -> LedgerRecord:
    """The operation recording an obligation ``pending``."""
    return LedgerRecord(
        obligation_id=oid,
        session_key=session_key,
        platform=str(platform),
        chat_id=None if chat_id is None else str(chat_id),
        thread_id=None if thread_id is None else str(thread_id),
        content=content,
        kind=kind,
        at=at,
        in_reply_to=" ".join(in_reply_to) or None,
    )


class DeliveryLedger:
    """The ledger methods of the store (its facade delegates here); ``owner`` is the
    store's own sender identity."""

    def __init__(self, core: StoreCore, owner: Owner) -> None:
        self._core = core
        #: ``(node id, boot id)`` of the gateway boot this store serves.
        self.owner = owner

    def ledger_record(
        self, *, session_key: str, platform: str, chat_id: str | None,
        thread_id: str | None, content: str, kind: str, token: str | None,
        clear_turn: bool = False, claim: bool = False, consume: tuple[str, ...] = (),
        consume_reason: str = "command", reply: tuple[str, dict[str, Any]] | None = None,
        in_reply_to: tuple[str, ...] = (),
    ) -> str | None:
        """Record an obligation as ``pending``; returns its id (same inputs → same id, one
        row).

        With ``clear_turn=True`` the session's turn marker is cleared in the same transaction
        when it still holds ``token``: a turn whose answer is owed is settled, and recovery
        never sees a marker whose obligation already sits in the ledger. With ``claim`` the
        row is also claimed (``attempting``) for this store's sender in that transaction;
        ``None`` is returned when the claim is refused (the row exists and is final or this
        sender is attempting it already). ``consume`` marks those inbox events consumed
        (``consume_reason``) in the same transaction (a command's answer and its consumption
        are one durable step). ``reply=(session_id, message)`` appends the turn's final reply
        (tagged with ``token``, ``is_reply``) to the transcript in that transaction too.
        ``in_reply_to`` names the inbound events the obligation answers.
        """
        if kind not in ledger.KINDS:
            raise ValueError(f"ledger kind must be one of {', '.join(ledger.KINDS)}; got {kind!r}")
        if not isinstance(content, str):
            raise ValueError("ledger content must be a string")
        core = self._core
        oid = ledger.obligation_id(session_key, token, content)
        ops: list[Op] = []
        if reply is not None:
            msg = normalize_message(reply[1], core.ts())
            ops.append(AppendMessage(validate_session_id(reply[0]), msg, turn_token=token,
                                     is_reply=True))
        claim_at = len(ops) + 1
        ops.append(ledger_record_op(oid, session_key, platform, chat_id, thread_id, content,
                                    kind, core.ts(), tuple(in_reply_to)))
        if claim:
            ops.append(LedgerClaim(oid, *self.owner, core.ts()))
        if consume:
            ops.append(ConsumeEvents(tuple(consume), consume_reason, core.ts()))
        clear = clear_turn and token is not None
        answered = tuple(in_reply_to) if kind in ledger.FINAL_KINDS else ()
        if clear or (answered and _owes(core.entries.get(session_key), answered)):
            with core.key_lock(session_key):
                entry = core.entries.get(session_key)
                put = []
                if entry is not None:
                    new = entry
                    if clear and entry.active_turn_token == token:
                        new = lifecycle.clear_turn_marker(entry)
                    # a final answer settles the events it names that were still owed
                    new = lifecycle.settle_owed(new, answered) or new
                    if new is not entry:
                        put = [new]
                results = core.commit(ops, put=put)
        else:
            results = core.apply(ops)
        if claim and not results[claim_at]:
            return None
        return oid

    def ledger_claim(self, obligation_id: str, *, owner: Owner | None = None) -> bool:
        """Move a ``pending``/``failed`` row (or one another boot was attempting) to
        ``attempting`` for ``owner`` (default: this store's sender); ``False`` for final
        rows, unknown ids and rows this owner is attempting already."""
        node, boot = owner or self.owner
        return bool(self._core.apply([LedgerClaim(obligation_id, node, boot,
                                                  self._core.ts())])[0])

    def ledger_claim_many(self, obligation_ids: Iterable[str], *,
                          owner: Owner | None = None) -> set[str]:
        """:meth:`ledger_claim` for several rows in one transaction; the ids granted."""
        node, boot = owner or self.owner
        ids = list(obligation_ids)
        at = self._core.ts()
        granted = self._core.apply([LedgerClaim(oid, node, boot, at) for oid in ids]) \
            if ids else []
        return {oid for oid, ok in zip(ids, granted, strict=True) if ok}

    def ledger_release(self, obligation_id: str) -> bool:
        """Hand back this sender's claim of a row it sent nothing under (no connected
        adapter): ``pending`` again, the attempt not spent (``failed`` if it was attempted
        before); ``False`` when this sender does not hold it."""
        return bool(self._core.apply([LedgerRelease(obligation_id, *self.owner,
                                                    self._core.ts())])[0])

    def ledger_reopen(self, obligation_id: str) -> str | None:
        """An operator's retry: a ``failed``/``abandoned`` row is ``pending`` again with its
        attempts reset (the next sweep sends it); the state the row had, ``None`` for an
        unknown id (any other state: nothing changed)."""
        result = self._core.apply([LedgerReopen(obligation_id, self._core.ts())])[0]
        return None if result is None else str(result)

    def ledger_finish(self, obligation_id: str, state: str, *, error: str | None = None,
                      content: str | None = None) -> str | None:
        """End an attempt as ``delivered`` or ``failed`` (``abandoned`` after 3 attempts or
        24 h), or ``abandoned`` at once (refused for good); returns the stored state, or
        ``None`` for an unknown id. ``content``: what is still owed when only the first
        parts were sent (the row's content from then on)."""
        _check_outcome(state)
        return self._core.apply([LedgerFinish(obligation_id, state, error, self._core.ts(),
                                              content, *self.owner)])[0]

    def ledger_finish_later(self, obligation_id: str, state: str, *, error: str | None = None,
                            content: str | None = None, on_done: Callable[[], None]) -> None:
        """:meth:`ledger_finish` without waiting for the commit; ``on_done()`` once durable
        (or failed, logged). A crash before that commit leaves the row ``attempting``:
        redelivered once with the recovered prefix, as for a crash right after the send."""
        _check_outcome(state)
        self._core.apply_later([LedgerFinish(obligation_id, state, error, self._core.ts(),
                                             content, *self.owner)], on_done)

    def ledger_retry(self, obligation_id: str, *, error: str | None,
                     content: str | None = None) -> bool:
        """After a rate limit waited out with the row still claimed: count the refused try
        as a failed attempt (``content``: what is still owed, as for :meth:`ledger_finish`)
        and claim the row again, in one transaction, so no sweep ever sees it ``failed``;
        ``False`` when the claim is refused (its attempts are used up: abandoned)."""
        at = self._core.ts()
        return bool(self._core.apply([LedgerFinish(obligation_id, "failed", error, at, content,
                                                   *self.owner),
                                      LedgerClaim(obligation_id, *self.owner, at)])[1])

    def ledger_finish_many(self, outcomes: Iterable[tuple[str, bool, str | None]]) -> None:
        """End several attempts in one transaction: ``(obligation_id, delivered, error)``."""
        at = self._core.ts()
        ops: list[Op] = [LedgerFinish(oid, "delivered" if ok else "failed",
                                      None if ok else error, at, None, *self.owner)
                         for oid, ok, error in outcomes]
        if ops:
            self._core.apply(ops)

    def ledger_rows(self, states: Iterable[str] | str | None = None, *,
                    session_key: str | None = None) -> list[dict[str, Any]]:
        """Ledger rows (every column) oldest first, filtered by state(s) and key."""
        if isinstance(states, str):
            states = (states,)
        wanted = None if states is None else tuple(states)
        return self._core.read(lambda backend: backend.ledger_rows(wanted, session_key))

    def ledger_counts(self) -> dict[str, int]:
        """Ledger rows per state (one grouped read: ``/metrics`` asks at every scrape)."""
        return self._core.read(lambda backend: backend.ledger_counts())

    def ledger_prune(self, max_age_days: float = 7) -> int:
        """Delete ``delivered``/``abandoned`` rows untouched for ``max_age_days``; the
        count."""
        return self._core.apply([LedgerPrune(self._core.ts() - max_age_days * _DAY)])[0] or 0


def _owes(entry: Any, answered: tuple[str, ...]) -> bool:
    """Whether ``entry`` still owes an answer to one of the ``answered`` events."""
    return entry is not None and bool(entry.owed_events) and any(
        e in entry.owed_events for e in answered)


def _check_outcome(state: str) -> None:
    if state not in ledger.OUTCOMES:
        raise ValueError(f"an attempt ends {', '.join(map(repr, ledger.OUTCOMES))}, "
                         f"not {state!r}")
