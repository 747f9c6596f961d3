"""How each write operation (:mod:`hermes_actors.store.ops`) becomes SQL on PostgreSQL.

One small handler per operation, with the results and rules of
:class:`~hermes_actors.store.backends.sqlite.operations.SqliteOps`, run by the backend's
committer inside the transaction of a group commit on its one write connection.

Why raw SQL here: the statements are constants, so psycopg prepares each on the server
after a few uses (``prepare_threshold``) and a turn's ten operations are ten executions of
prepared statements. Where SQLite runs two statements, one does here when PostgreSQL can
say it in one (an append and its ``message_count`` bump are one statement with a
data-modifying CTE; an ``IN`` list is one ``= ANY(array)`` parameter; a ledger claim is one
``UPDATE`` whose condition is :func:`~hermes_actors.store.ledger.claim_allowed`).
Prunes are rare and built with the models (:mod:`~hermes_actors.store.backends.postgres.models`).

The writer runs a transaction's statements in pipeline mode (see ``writer``): a statement is
sent without waiting for its answer. So a handler does not read its statement's result
where it runs: it returns a :class:`Later`, which the writer resolves once the pipeline has
been synced, from the statement's own cursor (a cursor holds the result of its last
statement only). The few handlers whose next statement depends on a result (an accept with
an ingress key that was taken, a ledger outcome other than ``delivered``, an append to a
session never seen) read it at once, which costs the round trip the pipeline saves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cachetools import LRUCache

from hermes_actors.errors import StoreError
from hermes_actors.model.jsontext import to_json
from hermes_actors.store import ledger
from hermes_actors.store.backends.postgres.models import Delivery, Inbox, sql_of
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
    NodeValue,
    Op,
    OutboxAppend,
    OutboxPrune,
    PruneInbox,
    PutRouting,
    SetRoutingFlags,
    WithdrawEvent,
)

__all__ = ["KNOWN_SESSIONS", "Later", "PostgresOps"]

#: How many session ids with a ``sessions`` row the writer remembers.
KNOWN_SESSIONS = 100_000

_INSERT_SESSION = (
    "INSERT INTO sessions (id, session_key, source, started_at, parent_session_id)"
    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING"
)
_ENSURE_SESSION = (
    "INSERT INTO sessions (id, started_at) VALUES (%s, %s) ON CONFLICT (id) DO NOTHING"
)
_END_SESSION = (
    "UPDATE sessions SET ended_at = %s, end_reason = %s WHERE id = %s AND ended_at IS NULL"
)
_PUT_ROUTING = (
    "INSERT INTO routing (session_key, entry, active_turn_token, active_turn_started_at,"
    " active_turn_internal, resume_pending, suspended, updated_at)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (session_key) DO UPDATE SET entry = excluded.entry,"
    " active_turn_token = excluded.active_turn_token,"
    " active_turn_started_at = excluded.active_turn_started_at,"
    " active_turn_internal = excluded.active_turn_internal,"
    " resume_pending = excluded.resume_pending, suspended = excluded.suspended,"
    " updated_at = excluded.updated_at"
)
_SET_ROUTING_FLAGS = (
    "UPDATE routing SET active_turn_token = %s, active_turn_started_at = %s,"
    " active_turn_internal = %s, resume_pending = %s, suspended = %s, updated_at = %s"
    " WHERE session_key = %s"
)
_DELETE_ROUTING = "DELETE FROM routing WHERE session_key = ANY(%s::text[])"
_APPEND_MESSAGE = (
    "WITH m AS (INSERT INTO messages (session_id, role, content, tool_name, tool_calls,"
    " timestamp, token_count, turn_token, is_reply)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id),"
    " s AS (UPDATE sessions SET message_count = message_count + 1 WHERE id = %s)"
    " SELECT id FROM m"
)
_ADD_TOKENS = (
    "UPDATE sessions SET input_tokens = input_tokens + %s,"
    " output_tokens = output_tokens + %s WHERE id = %s"
)
_ADD_TOKENS_LAST = (
    "UPDATE sessions SET input_tokens = input_tokens + %s,"
    " output_tokens = output_tokens + %s, last_prompt_tokens = %s WHERE id = %s"
)
_ACCEPT_EVENT = (
    "INSERT INTO inbox (event_id, session_key, payload, internal, received_at, ingress_key)"
    " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
)
_ACCEPT_EVENT_RETURNING = _ACCEPT_EVENT + " RETURNING event_id"
_INGRESS_HOLDER = "SELECT event_id FROM inbox WHERE ingress_key = %s"
_WITHDRAW_EVENT = "DELETE FROM inbox WHERE event_id = %s AND consumed_at IS NULL"
_CONSUME_EVENTS = (
    "UPDATE inbox SET consumed_at = %s, consumed_reason = %s"
    " WHERE event_id = ANY(%s::text[]) AND consumed_at IS NULL"
)
_LEDGER_RECORD = (
    "INSERT INTO deliveries (obligation_id, session_key, platform, chat_id, thread_id,"
    " content, kind, state, attempts, created_at, updated_at, in_reply_to)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, 'pending', 0, %s, %s, %s)"
    " ON CONFLICT (obligation_id) DO NOTHING"
)
#: A claim in one statement: the row is moved to ``attempting`` exactly when
#: ``ledger.claim_allowed`` allows it (a claimable state, and not the claimer's own
#: attempt); ``tests/store/postgres/test_writes.py`` checks the two agree on every case.
_LEDGER_CLAIM = (
    "UPDATE deliveries SET state = 'attempting', attempts = attempts + 1, owner_node = %s,"
    " owner_boot = %s, updated_at = %s WHERE obligation_id = %s"
    " AND state = ANY(%s::text[]) AND NOT (state = 'attempting'"
    " AND owner_node IS NOT DISTINCT FROM %s AND owner_boot IS NOT DISTINCT FROM %s)"
)
_CLAIMABLE = list(ledger.CLAIMABLE_STATES)
_LEDGER_FINISH_READ = "SELECT attempts, created_at FROM deliveries WHERE obligation_id = %s"
_LEDGER_FINISH = (
    "UPDATE deliveries SET state = %s, last_error = %s, updated_at = %s"
    " WHERE obligation_id = %s"
)
_OUTBOX_APPEND = (
    "INSERT INTO outbox (session_key, platform, chat_id, thread_id, text, kind, created_at,"
    " in_reply_to) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING cursor"
)
_OUTBOX_PRUNE = "DELETE FROM outbox WHERE created_at < %s"
_PUT_NODE_VALUE = (
    "INSERT INTO node_state (node_id, name, value) VALUES (%s, %s, %s)"
    " ON CONFLICT (node_id, name) DO UPDATE SET value = excluded.value"
)
_DELETE_NODE_VALUE = "DELETE FROM node_state WHERE node_id = %s AND name = %s"


def _json(value: Any) -> str | None:
    return None if value is None else to_json(value)


class Later:
    """An operation's result that its statement's cursor holds once the pipeline synced."""

    __slots__ = ("cur", "read")

    def __init__(self, cur: Any, read: Callable[[Any], Any]) -> None:
        self.cur = cur
        self.read = read

    def value(self) -> Any:
        """The result (call after the sync)."""
        return self.read(self.cur)


def _rowcount(cur: Any) -> int:
    return int(cur.rowcount)


def _first_int(cur: Any) -> int:
    return int(cur.fetchone()[0])


def _claimed(cur: Any) -> bool:
    return cur.rowcount > 0


def _finished_delivered(cur: Any) -> str | None:
    return "delivered" if cur.rowcount else None


def _own(cur: Any, sql: str, params: Any) -> Any:
    """``sql`` on a cursor of its own (its result must survive later statements); in
    pipeline mode, its ``fetch*`` waits for the result."""
    own = cur.connection.cursor()
    own.execute(sql, params)
    return own


def _run(cur: Any, sql: str, params: Any, read: Callable[[Any], Any]) -> Later:
    """``sql``, its result read by ``read`` once the pipeline synced."""
    return Later(_own(cur, sql, params), read)


class PostgresOps:
    """Applies operations on a psycopg cursor (only the backend's committer calls it)."""

    def __init__(self) -> None:
        #: Session ids known to have a ``sessions`` row (saves a statement per append),
        #: bounded as on SQLite: forgetting one costs one ``ON CONFLICT DO NOTHING``.
        self._known: LRUCache[str, bool] = LRUCache(maxsize=KNOWN_SESSIONS)
        self._known_in_txn: set[str] = set()
        self._handlers: dict[type, Callable[[Any, Any], Any]] = {
            CreateSession: self._create_session,
            EndSession: self._end_session,
            PutRouting: self._put_routing,
            SetRoutingFlags: self._set_routing_flags,
            DeleteRouting: self._delete_routing,
            AppendMessage: self._append_message,
            AddTokens: self._add_tokens,
            AcceptEvent: self._accept_event,
            WithdrawEvent: self._withdraw_event,
            ConsumeEvents: self._consume_events,
            PruneInbox: self._prune_inbox,
            LedgerRecord: self._ledger_record,
            LedgerClaim: self._ledger_claim,
            LedgerFinish: self._ledger_finish,
            LedgerPrune: self._ledger_prune,
            OutboxAppend: self._outbox_append,
            OutboxPrune: self._outbox_prune,
            NodeValue: self._node_value,
        }

    def apply(self, cur: Any, op: Op) -> Any:
        """Run one operation inside the caller's transaction; return its result."""
        handler = self._handlers.get(type(op))
        if handler is None:
            raise StoreError(f"PostgreSQL cannot apply {type(op).__name__}")
        return handler(cur, op)

    def committed(self, ok: bool) -> None:
        """Tell the handlers whether the surrounding transaction committed."""
        if ok:
            self._known.update(dict.fromkeys(self._known_in_txn, True))
        self._known_in_txn = set()

    # -- sessions and routing ---------------------------------------------------------------

    def _create_session(self, cur: Any, op: CreateSession) -> None:
        cur.execute(_INSERT_SESSION, (op.session_id, op.session_key, _json(op.source),
                                      op.started_at, op.parent_session_id))
        self._known_in_txn.add(op.session_id)

    def _end_session(self, cur: Any, op: EndSession) -> None:
        cur.execute(_END_SESSION, (op.ended_at, op.reason, op.session_id))

    def _put_routing(self, cur: Any, op: PutRouting) -> None:
        cur.execute(_PUT_ROUTING, (
            op.session_key, op.entry, op.active_turn_token, op.active_turn_started_at,
            bool(op.active_turn_internal), bool(op.resume_pending), bool(op.suspended),
            op.updated_at))

    def _set_routing_flags(self, cur: Any, op: SetRoutingFlags) -> Later:
        return _run(cur, _SET_ROUTING_FLAGS, (
            op.active_turn_token, op.active_turn_started_at, bool(op.active_turn_internal),
            bool(op.resume_pending), bool(op.suspended), op.updated_at, op.session_key),
            _rowcount)

    def _delete_routing(self, cur: Any, op: DeleteRouting) -> Later:
        return _run(cur, _DELETE_ROUTING, (list(op.session_keys),), _rowcount)

    def _add_tokens(self, cur: Any, op: AddTokens) -> None:
        if op.last_prompt_tokens is None:
            cur.execute(_ADD_TOKENS, (int(op.input_tokens), int(op.output_tokens),
                                      op.session_id))
        else:
            cur.execute(_ADD_TOKENS_LAST, (int(op.input_tokens), int(op.output_tokens),
                                           int(op.last_prompt_tokens), op.session_id))

    # -- transcript (hot path) --------------------------------------------------------------

    def _append_message(self, cur: Any, op: AppendMessage) -> Later:
        msg = op.message
        if op.session_id not in self._known and op.session_id not in self._known_in_txn:
            # Old data may route to a session whose row never existed (mirror-only entries).
            cur.execute(_ENSURE_SESSION, (op.session_id, msg["timestamp"]))
            self._known_in_txn.add(op.session_id)
        return _run(cur, _APPEND_MESSAGE, (
            op.session_id, msg["role"], msg["content"], msg.get("tool_name"),
            _json(msg.get("tool_calls")), msg["timestamp"], msg.get("token_count"),
            op.turn_token, bool(op.is_reply), op.session_id), _first_int)

    # -- inbox ------------------------------------------------------------------------------

    def _accept_event(self, cur: Any, op: AcceptEvent) -> str:
        params = (op.event_id, op.session_key, op.payload, bool(op.internal),
                  op.received_at, op.ingress_key)
        if op.ingress_key is None:  # the event's id whether or not it was new
            cur.execute(_ACCEPT_EVENT, params)
            return op.event_id
        if _own(cur, _ACCEPT_EVENT_RETURNING, params).fetchone() is not None:
            return op.event_id
        holder = _own(cur, _INGRESS_HOLDER, (op.ingress_key,)).fetchone()
        return holder[0] if holder is not None else op.event_id

    def _withdraw_event(self, cur: Any, op: WithdrawEvent) -> Later:
        return _run(cur, _WITHDRAW_EVENT, (op.event_id,), _rowcount)

    def _consume_events(self, cur: Any, op: ConsumeEvents) -> Later:
        return _run(cur, _CONSUME_EVENTS, (op.at, op.reason, list(op.event_ids)), _rowcount)

    def _prune_inbox(self, cur: Any, op: PruneInbox) -> Later:
        i = Inbox
        return _run(cur, *sql_of(i.delete().where(i.consumed_at.is_null(False)
                                                  & (i.consumed_at < op.before))), _rowcount)

    # -- delivery ledger --------------------------------------------------------------------

    def _ledger_record(self, cur: Any, op: LedgerRecord) -> None:
        cur.execute(_LEDGER_RECORD, (op.obligation_id, op.session_key, op.platform,
                                     op.chat_id, op.thread_id, op.content, op.kind, op.at,
                                     op.at, op.in_reply_to))

    def _ledger_claim(self, cur: Any, op: LedgerClaim) -> Later:
        return _run(cur, _LEDGER_CLAIM, (
            op.owner_node, op.owner_boot, op.at, op.obligation_id, _CLAIMABLE,
            op.owner_node, op.owner_boot), _claimed)

    def _ledger_finish(self, cur: Any, op: LedgerFinish) -> Later | str | None:
        if op.state == "delivered":  # final whatever the attempts: one statement
            return _run(cur, _LEDGER_FINISH, ("delivered", None, op.at, op.obligation_id),
                        _finished_delivered)
        row = _own(cur, _LEDGER_FINISH_READ, (op.obligation_id,)).fetchone()
        if row is None:
            return None
        attempts, created_at = row
        state = ledger.finish_state(op.state, attempts=attempts, created_at=created_at,
                                    now=op.at)
        cur.execute(_LEDGER_FINISH, (state, op.error, op.at, op.obligation_id))
        return state

    def _ledger_prune(self, cur: Any, op: LedgerPrune) -> Later:
        d = Delivery
        return _run(cur, *sql_of(d.delete().where(d.state.in_(list(ledger.FINAL_STATES))
                                                  & (d.updated_at < op.before))), _rowcount)

    # -- outbox and node state --------------------------------------------------------------

    def _outbox_append(self, cur: Any, op: OutboxAppend) -> Later:
        return _run(cur, _OUTBOX_APPEND, (op.session_key, op.platform, op.chat_id,
                                          op.thread_id, op.text, op.kind, op.created_at,
                                          op.in_reply_to), _first_int)

    def _outbox_prune(self, cur: Any, op: OutboxPrune) -> Later:
        return _run(cur, _OUTBOX_PRUNE, (op.before,), _rowcount)

    def _node_value(self, cur: Any, op: NodeValue) -> None:
        if op.value is None:
            cur.execute(_DELETE_NODE_VALUE, (op.node_id, op.name))
        else:
            cur.execute(_PUT_NODE_VALUE, (op.node_id, op.name, op.value))
