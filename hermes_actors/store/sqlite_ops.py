"""How each write operation (:mod:`hermes_actors.store.ops`) becomes SQL on SQLite.

One small handler per operation, all run by :class:`~hermes_actors.store.db.SessionDB` on its
worker thread inside one transaction per ``apply``. Most handlers use the peewee models;
the transcript append, the hottest path, is raw SQL.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import peewee as pw

from hermes_actors.store import ledger
from hermes_actors.store.ops import (
    AcceptEvent,
    AddTokens,
    AppendMessage,
    ConsumeEvents,
    CreateSession,
    DeleteRouting,
    EndSession,
    LedgerClaim,
    LedgerFinish,
    LedgerPrune,
    LedgerRecord,
    Op,
    PruneInbox,
    PutRouting,
)
from hermes_actors.store.schema import Models

__all__ = ["SqliteOps"]

#: Keys per ``IN (...)`` list, well under SQLite's bound-parameter limit.
_CHUNK = 500


def _chunks(items: Iterable[str]) -> Iterator[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) == _CHUNK:
            yield batch
            batch = []
    if batch:
        yield batch


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


class SqliteOps:
    """Applies operations to one SQLite database (call only on its worker thread)."""

    def __init__(
        self,
        database: pw.Database,
        models: Models,
        *,
        is_alive: Callable[[int | None, float | None], bool] = ledger.owner_alive,
    ) -> None:
        self._db = database
        self._m = models
        self._is_alive = is_alive
        #: Session ids known to have a ``sessions`` row (saves a statement per append).
        self._known: set[str] = set()
        self._known_in_txn: set[str] = set()
        self._handlers: dict[type, Callable[[Any], Any]] = {
            CreateSession: self._create_session,
            EndSession: self._end_session,
            PutRouting: self._put_routing,
            DeleteRouting: self._delete_routing,
            AppendMessage: self._append_message,
            AddTokens: self._add_tokens,
            AcceptEvent: self._accept_event,
            ConsumeEvents: self._consume_events,
            PruneInbox: self._prune_inbox,
            LedgerRecord: self._ledger_record,
            LedgerClaim: self._ledger_claim,
            LedgerFinish: self._ledger_finish,
            LedgerPrune: self._ledger_prune,
        }

    def apply(self, op: Op) -> Any:
        """Run one operation inside the caller's transaction; return its result."""
        return self._handlers[type(op)](op)

    def committed(self, ok: bool) -> None:
        """Tell the handlers whether the surrounding transaction committed."""
        if ok:
            self._known |= self._known_in_txn
        self._known_in_txn = set()

    # -- sessions and routing ---------------------------------------------------------------

    def _create_session(self, op: CreateSession) -> None:
        self._m.Session.insert(
            id=op.session_id,
            session_key=op.session_key,
            source=_json(op.source),
            started_at=op.started_at,
            parent_session_id=op.parent_session_id,
        ).on_conflict_ignore().execute()
        self._known_in_txn.add(op.session_id)

    def _end_session(self, op: EndSession) -> None:
        s = self._m.Session
        s.update(ended_at=op.ended_at, end_reason=op.reason).where(
            (s.id == op.session_id) & s.ended_at.is_null()
        ).execute()

    def _put_routing(self, op: PutRouting) -> None:
        r = self._m.Routing
        r.insert(session_key=op.session_key, entry=op.entry, updated_at=op.updated_at).on_conflict(
            conflict_target=[r.session_key], preserve=[r.entry, r.updated_at]
        ).execute()

    def _delete_routing(self, op: DeleteRouting) -> int:
        r = self._m.Routing
        return sum(
            r.delete().where(r.session_key.in_(batch)).execute()
            for batch in _chunks(op.session_keys)
        )

    def _add_tokens(self, op: AddTokens) -> None:
        s = self._m.Session
        changes: dict[Any, Any] = {
            s.input_tokens: s.input_tokens + int(op.input_tokens),
            s.output_tokens: s.output_tokens + int(op.output_tokens),
        }
        if op.last_prompt_tokens is not None:
            changes[s.last_prompt_tokens] = int(op.last_prompt_tokens)
        s.update(changes).where(s.id == op.session_id).execute()

    # -- transcript (hot path: raw SQL) -----------------------------------------------------

    def _append_message(self, op: AppendMessage) -> int:
        msg = op.message
        if op.session_id not in self._known and op.session_id not in self._known_in_txn:
            # Old data may route to a session whose row never existed (mirror-only entries).
            self._db.execute_sql(
                "INSERT OR IGNORE INTO sessions (id, started_at) VALUES (?, ?)",
                (op.session_id, msg["timestamp"]),
            )
            self._known_in_txn.add(op.session_id)
        cursor = self._db.execute_sql(
            "INSERT INTO messages (session_id, role, content, tool_name, tool_calls, timestamp,"
            " token_count, turn_token, is_reply) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                op.session_id,
                msg["role"],
                msg["content"],
                msg.get("tool_name"),
                _json(msg.get("tool_calls")),
                msg["timestamp"],
                msg.get("token_count"),
                op.turn_token,
                1 if op.is_reply else 0,
            ),
        )
        self._db.execute_sql(
            "UPDATE sessions SET message_count = message_count + 1 WHERE id = ?",
            (op.session_id,),
        )
        return cursor.lastrowid

    # -- inbox ------------------------------------------------------------------------------

    def _accept_event(self, op: AcceptEvent) -> None:
        self._m.Inbox.insert(
            event_id=op.event_id,
            session_key=op.session_key,
            payload=op.payload,
            internal=1 if op.internal else 0,
            received_at=op.received_at,
        ).on_conflict_ignore().execute()

    def _consume_events(self, op: ConsumeEvents) -> int:
        i = self._m.Inbox
        return sum(
            i.update(consumed_at=op.at, consumed_reason=op.reason)
            .where(i.event_id.in_(batch) & i.consumed_at.is_null())
            .execute()
            for batch in _chunks(op.event_ids)
        )

    def _prune_inbox(self, op: PruneInbox) -> int:
        i = self._m.Inbox
        return (
            i.delete().where(i.consumed_at.is_null(False) & (i.consumed_at < op.before)).execute()
        )

    # -- delivery ledger --------------------------------------------------------------------

    def _ledger_record(self, op: LedgerRecord) -> None:
        self._m.Delivery.insert(
            obligation_id=op.obligation_id,
            session_key=op.session_key,
            platform=op.platform,
            chat_id=op.chat_id,
            thread_id=op.thread_id,
            content=op.content,
            kind=op.kind,
            state="pending",
            attempts=0,
            created_at=op.at,
            updated_at=op.at,
        ).on_conflict_ignore().execute()

    def _ledger_claim(self, op: LedgerClaim) -> bool:
        d = self._m.Delivery
        row = (
            d.select(d.state, d.owner_pid, d.owner_started_at)
            .where(d.obligation_id == op.obligation_id)
            .tuples()
            .first()
        )
        if row is None:
            return False
        state, owner_pid, owner_started_at = row
        if not ledger.claim_allowed(
            state,
            owner_pid,
            owner_started_at,
            claimer_pid=op.owner_pid,
            claimer_started_at=op.owner_started_at,
            is_alive=self._is_alive,
        ):
            return False
        d.update(
            state="attempting",
            attempts=d.attempts + 1,
            owner_pid=op.owner_pid,
            owner_started_at=op.owner_started_at,
            updated_at=op.at,
        ).where(d.obligation_id == op.obligation_id).execute()
        return True

    def _ledger_finish(self, op: LedgerFinish) -> str | None:
        d = self._m.Delivery
        row = (
            d.select(d.attempts, d.created_at)
            .where(d.obligation_id == op.obligation_id)
            .tuples()
            .first()
        )
        if row is None:
            return None
        attempts, created_at = row
        state = ledger.finish_state(op.state, attempts=attempts, created_at=created_at, now=op.at)
        d.update(state=state, last_error=op.error, updated_at=op.at).where(
            d.obligation_id == op.obligation_id
        ).execute()
        return state

    def _ledger_prune(self, op: LedgerPrune) -> int:
        d = self._m.Delivery
        return (
            d.delete()
            .where(d.state.in_(ledger.FINAL_STATES) & (d.updated_at < op.before))
            .execute()
        )
