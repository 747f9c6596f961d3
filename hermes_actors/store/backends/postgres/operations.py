"""How each write operation (:mod:`hermes_actors.store.ops`) becomes SQL on PostgreSQL.

One small handler per operation, with the results and rules of
:class:`~hermes_actors.store.backends.sqlite.operations.SqliteOps`, run by the backend's
committer inside the transaction of a group commit on its one write connection.

Why raw SQL here: the statements are constants, a turn's ten operations are ten
statements, and the handlers do not pay for a query builder. Where SQLite runs two
statements, one does here when PostgreSQL can say it in one (an append and its ``message_count`` bump are one statement with a
data-modifying CTE; an ``IN`` list is one ``= ANY(array)`` parameter; a ledger claim is one
``UPDATE`` whose condition is :func:`~hermes_actors.store.ledger.claim_allowed`).
Prunes are rare and built with the models (:mod:`~hermes_actors.store.backends.postgres.models`).

A handler adds its statements to the transaction's :class:`~.batch.Batch`, which sends
them all at once: it does not read its statement's result where it runs, but returns a
:class:`~.batch.Later`, resolved by the writer once the batch has been sent. The few
handlers whose next statement depends on a result (an accept with an ingress key that was
taken, a ledger outcome other than ``delivered``) ask for it at once (``Batch.now``: one
round trip more).
"""

from __future__ import annotations

from typing import Any

from hermes_actors.model.jsontext import to_json
from hermes_actors.store import ledger
from hermes_actors.store import ops as store_ops
from hermes_actors.store.backends import statements
from hermes_actors.store.backends.postgres.batch import Batch, Later, Result
from hermes_actors.store.backends.postgres.models import Delivery, Inbox, sql_of
from hermes_actors.store.backends.postgres.schema import (
    OUTBOX_CHANNEL,
    inbox_channel,
    outbox_notice,
)
from hermes_actors.store.backends.statements import pyformat
from hermes_actors.store.opdispatch import OpHandlers
from hermes_actors.store.ops import CONVERSATION_TABLES, Op

__all__ = ["PUT_NODE_VALUE", "PostgresOps"]

_INSERT_SESSION = pyformat(statements.INSERT_SESSION)
_ENSURE_SESSION = (
    "INSERT INTO sessions (id, started_at) VALUES (%s, %s) ON CONFLICT (id) DO NOTHING"
)
_END_SESSION = pyformat(statements.END_SESSION)
_PUT_ROUTING = pyformat(statements.PUT_ROUTING)
_SET_ROUTING_FLAGS = pyformat(statements.SET_ROUTING_FLAGS)
_DELETE_ROUTING = "DELETE FROM routing WHERE session_key = ANY(%s::text[])"
#: ``DeleteConversations``: the sessions of the keys, then each table's rows.
_CONVERSATION_SESSIONS = "SELECT id FROM sessions WHERE session_key = ANY(%s::text[])"
_DELETE_MESSAGES_OF = "DELETE FROM messages WHERE session_id = ANY(%s::text[])"
_DELETE_SESSIONS = "DELETE FROM sessions WHERE id = ANY(%s::text[])"
_DELETE_KEYED = {table: f"DELETE FROM {table} WHERE session_key = ANY(%s::text[])"
                 for table in ("inbox", "deliveries", "outbox", "routing")}
_APPEND_MESSAGE = (
    "WITH m AS (INSERT INTO messages (session_id, role, content, tool_name, tool_calls,"
    " timestamp, token_count, turn_token, is_reply)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id),"
    " s AS (UPDATE sessions SET message_count = message_count + 1 WHERE id = %s)"
    " SELECT id FROM m"
)
_ADD_TOKENS = pyformat(statements.ADD_TOKENS)
_ADD_TOKENS_LAST = pyformat(statements.ADD_TOKENS_LAST)
_ACCEPT_EVENT = pyformat(statements.ACCEPT_EVENT)
_ACCEPT_EVENT_RETURNING = _ACCEPT_EVENT + " RETURNING event_id"
_INGRESS_HOLDER = pyformat(statements.INGRESS_HOLDER)
_WITHDRAW_EVENT = pyformat(statements.WITHDRAW_EVENT)
_CONSUME_EVENTS = (
    "UPDATE inbox SET consumed_at = %s, consumed_reason = %s"
    " WHERE event_id = ANY(%s::text[]) AND consumed_at IS NULL"
)
_FENCE_SHARD = "SELECT cluster_fence(%s, %s, %s)"
_NOTIFY = "SELECT pg_notify(%s, %s)"
_LEDGER_RECORD = pyformat(statements.LEDGER_RECORD)
#: A claim in one statement: the row is moved to ``attempting`` exactly when
#: ``ledger.claim_allowed`` allows it (a claimable state, and not the claimer's own
#: attempt); ``tests/store/postgres/test_writes.py`` checks the two agree on every case.
_LEDGER_CLAIM = pyformat(statements.LEDGER_CLAIM) + (
    " AND state = ANY(%s::text[]) AND NOT (state = 'attempting'"
    " AND owner_node IS NOT DISTINCT FROM %s AND owner_boot IS NOT DISTINCT FROM %s)"
)
_CLAIMABLE = list(ledger.CLAIMABLE_STATES)
#: ``ledger.released_state`` in SQL (the ``CASE`` reads ``attempts`` before the update).
_LEDGER_RELEASE = pyformat(statements.LEDGER_RELEASE)
_LEDGER_STATE = pyformat(statements.LEDGER_STATE) + " FOR UPDATE"
_LEDGER_REOPEN = pyformat(statements.LEDGER_REOPEN)
#: An outcome is recorded unless another sender claimed the row since (``LedgerFinish``).
_NOT_TAKEN = (" AND (%s::text IS NULL OR owner_node IS NULL"
              " OR (owner_node = %s AND owner_boot IS NOT DISTINCT FROM %s))")
_LEDGER_FINISH_READ = ("SELECT attempts, created_at FROM deliveries WHERE obligation_id = %s"
                       + _NOT_TAKEN)
_LEDGER_FINISH = (
    "UPDATE deliveries SET state = %s, last_error = %s, updated_at = %s"
    " WHERE obligation_id = %s" + _NOT_TAKEN
)
#: An outcome other than ``delivered``, which may leave only the unsent rest owed.
_LEDGER_FINISH_OWED = (
    "UPDATE deliveries SET state = %s, last_error = %s, updated_at = %s,"
    " content = COALESCE(%s::text, content) WHERE obligation_id = %s" + _NOT_TAKEN
)
_OUTBOX_APPEND = pyformat(statements.OUTBOX_APPEND) + " RETURNING cursor"
#: A row of degraded mode with the cursor it was read at (its journal's import).
_OUTBOX_IMPORT = pyformat(statements.OUTBOX_IMPORT) + " RETURNING cursor"
#: :data:`_OUTBOX_IMPORT` of an append that ended a ledger row's attempt (as
#: :data:`_OUTBOX_DELIVERED` decides it).
_OUTBOX_DELIVERED_IMPORT = (
    "WITH d AS (UPDATE deliveries SET state = 'delivered', last_error = NULL, updated_at = %s"
    " WHERE obligation_id = %s AND state = 'attempting' AND owner_node = %s"
    " AND owner_boot = %s RETURNING 1)"
    " INSERT INTO outbox (cursor, session_key, platform, chat_id, thread_id, text, kind,"
    " created_at, in_reply_to) SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s FROM d"
    " RETURNING cursor"
)
#: The identity's sequence moved past an imported cursor, never back (it is shared by the
#: nodes of a cluster): later rows are numbered above it, as SQLite's AUTOINCREMENT does.
_OUTBOX_PAST = (
    "SELECT setval(pg_get_serial_sequence('outbox', 'cursor'), %s) WHERE %s > COALESCE("
    "pg_sequence_last_value(pg_get_serial_sequence('outbox', 'cursor')::regclass), 0)"
)
#: An outbox append that ends a ledger row's attempt (``OutboxAppend.obligation_id``), one
#: statement: the row is ``delivered`` only while this sender holds its claim, and the
#: append takes its values from that update's row, so it follows only then (no cursor).
_OUTBOX_DELIVERED = (
    "WITH d AS (UPDATE deliveries SET state = 'delivered', last_error = NULL, updated_at = %s"
    " WHERE obligation_id = %s AND state = 'attempting' AND owner_node = %s"
    " AND owner_boot = %s RETURNING 1)"
    " INSERT INTO outbox (session_key, platform, chat_id, thread_id, text, kind, created_at,"
    " in_reply_to) SELECT %s, %s, %s, %s, %s, %s, %s, %s FROM d RETURNING cursor"
)
_OUTBOX_PRUNE = "DELETE FROM outbox WHERE created_at < %s"
#: Upserts one ``node_state`` value (also the import of a home's node files).
PUT_NODE_VALUE = pyformat(statements.PUT_NODE_VALUE)
_DELETE_NODE_VALUE = pyformat(statements.DELETE_NODE_VALUE)
#: The stuck-loop counts per session, shared by every node (migration 4).
_PUT_SESSION_RESTARTS = (
    "INSERT INTO session_restarts (session_key, restarts, updated_at)"
    " SELECT k, n, %s FROM unnest(%s::text[], %s::integer[]) AS c(k, n)"
    " ON CONFLICT (session_key) DO UPDATE SET restarts = excluded.restarts,"
    " updated_at = excluded.updated_at"
)
_DELETE_SESSION_RESTARTS = "DELETE FROM session_restarts WHERE session_key = ANY(%s::text[])"


def _json(value: Any) -> str | None:
    return None if value is None else to_json(value)


def _rowcount(result: Result) -> int:
    return result.rowcount


def _first_int(result: Result) -> int:
    return int(result.rows[0][0])


def _claimed(result: Result) -> bool:
    return result.rowcount > 0


def _finished_delivered(result: Result) -> str | None:
    return "delivered" if result.rowcount else None


def _first_int_or_none(result: Result) -> int | None:
    return int(result.rows[0][0]) if result.rows else None


def _first_row(result: Result) -> tuple[Any, ...] | None:
    return result.rows[0] if result.rows else None


class PostgresOps(OpHandlers):
    """Applies operations on a psycopg cursor (only the backend's committer calls it)."""

    def __init__(self) -> None:
        super().__init__("PostgreSQL")

    def apply(self, batch: Batch, op: Op) -> Any:
        """Add one operation's statements to the transaction's batch; its result, or a
        :class:`~.batch.Later` for it."""
        handler = self._handlers.get(type(op))
        if handler is None:
            self.refuse(op)
        return handler(batch, op)

    # -- sessions and routing ---------------------------------------------------------------

    def _create_session(self, batch: Batch, op: store_ops.CreateSession) -> None:
        batch.add(_INSERT_SESSION, (op.session_id, op.session_key, _json(op.source),
                                      op.started_at, op.parent_session_id))
        self._known_in_txn.add(op.session_id)

    def _end_session(self, batch: Batch, op: store_ops.EndSession) -> None:
        batch.add(_END_SESSION, (op.ended_at, op.reason, op.session_id))

    def _put_routing(self, batch: Batch, op: store_ops.PutRouting) -> None:
        batch.add(_PUT_ROUTING, (
            op.session_key, op.entry, op.active_turn_token, op.active_turn_started_at,
            bool(op.active_turn_internal), bool(op.resume_pending), bool(op.suspended),
            op.updated_at))

    def _set_routing_flags(self, batch: Batch, op: store_ops.SetRoutingFlags) -> Later:
        return batch.run(_SET_ROUTING_FLAGS, (
            op.active_turn_token, op.active_turn_started_at, bool(op.active_turn_internal),
            bool(op.resume_pending), bool(op.suspended), op.updated_at, op.session_key),
            _rowcount)

    def _delete_routing(self, batch: Batch, op: store_ops.DeleteRouting) -> Later:
        return batch.run(_DELETE_ROUTING, (list(op.session_keys),), _rowcount)

    def _delete_conversations(self, batch: Batch, op: store_ops.DeleteConversations) -> dict[str, int]:
        # messages before their sessions rows (the reference); the full-text index is an
        # expression index over messages, so their rows leave it with them
        keys = list(op.session_keys)
        found = batch.now(_CONVERSATION_SESSIONS, (keys,)).rows
        ids = sorted(set(op.session_ids) | {str(row[0]) for row in found})
        counts = dict.fromkeys(CONVERSATION_TABLES, 0)
        counts["messages"] = batch.now(_DELETE_MESSAGES_OF, (ids,)).rowcount
        counts["sessions"] = batch.now(_DELETE_SESSIONS, (ids,)).rowcount
        for table, statement in _DELETE_KEYED.items():
            counts[table] = batch.now(statement, (keys,)).rowcount
        for session_id in ids:  # (an append to it would insert its row again)
            self._known.pop(session_id, None)
        return counts

    def _add_tokens(self, batch: Batch, op: store_ops.AddTokens) -> None:
        if op.last_prompt_tokens is None:
            batch.add(_ADD_TOKENS, (int(op.input_tokens), int(op.output_tokens),
                                      op.session_id))
        else:
            batch.add(_ADD_TOKENS_LAST, (int(op.input_tokens), int(op.output_tokens),
                                           int(op.last_prompt_tokens), op.session_id))

    # -- transcript (hot path) --------------------------------------------------------------

    def _append_message(self, batch: Batch, op: store_ops.AppendMessage) -> Later:
        msg = op.message
        if op.session_id not in self._known and op.session_id not in self._known_in_txn:
            # Old data may route to a session whose row never existed (mirror-only entries).
            batch.add(_ENSURE_SESSION, (op.session_id, msg["timestamp"]))
            self._known_in_txn.add(op.session_id)
        return batch.run(_APPEND_MESSAGE, (
            op.session_id, msg["role"], msg["content"], msg.get("tool_name"),
            _json(msg.get("tool_calls")), msg["timestamp"], msg.get("token_count"),
            op.turn_token, bool(op.is_reply), op.session_id), _first_int)

    # -- inbox ------------------------------------------------------------------------------

    def _accept_event(self, batch: Batch, op: store_ops.AcceptEvent) -> str:
        params = (op.event_id, op.session_key, op.payload, bool(op.internal),
                  op.received_at, op.ingress_key)
        if op.ingress_key is None:  # the event's id whether or not it was new
            batch.add(_ACCEPT_EVENT, params)
            return op.event_id
        if _first_row(batch.now(_ACCEPT_EVENT_RETURNING, params)) is not None:
            return op.event_id
        holder = _first_row(batch.now(_INGRESS_HOLDER, (op.ingress_key,)))
        return holder[0] if holder is not None else op.event_id

    def _withdraw_event(self, batch: Batch, op: store_ops.WithdrawEvent) -> Later:
        return batch.run(_WITHDRAW_EVENT, (op.event_id,), _rowcount)

    def _consume_events(self, batch: Batch, op: store_ops.ConsumeEvents) -> Later:
        return batch.run(_CONSUME_EVENTS, (op.at, op.reason, list(op.event_ids)), _rowcount)

    def _prune_inbox(self, batch: Batch, op: store_ops.PruneInbox) -> Later:
        i = Inbox
        return batch.run(*sql_of(i.delete().where(i.consumed_at.is_null(False)
                                                  & (i.consumed_at < op.before))), _rowcount)

    # -- delivery ledger --------------------------------------------------------------------

    def _ledger_record(self, batch: Batch, op: store_ops.LedgerRecord) -> None:
        batch.add(_LEDGER_RECORD, (op.obligation_id, op.session_key, op.platform,
                                     op.chat_id, op.thread_id, op.content, op.kind, op.at,
                                     op.at, op.in_reply_to))

    def _ledger_claim(self, batch: Batch, op: store_ops.LedgerClaim) -> Later:
        return batch.run(_LEDGER_CLAIM, (
            op.owner_node, op.owner_boot, op.at, op.obligation_id, _CLAIMABLE,
            op.owner_node, op.owner_boot), _claimed)

    def _ledger_release(self, batch: Batch, op: store_ops.LedgerRelease) -> Later:
        return batch.run(_LEDGER_RELEASE, (op.at, op.obligation_id, op.owner_node,
                                           op.owner_boot), _claimed)

    def _ledger_reopen(self, batch: Batch, op: store_ops.LedgerReopen) -> str | None:
        row = _first_row(batch.now(_LEDGER_STATE, (op.obligation_id,)))
        if row is None:
            return None
        if row[0] in ledger.REOPENABLE_STATES:
            batch.add(_LEDGER_REOPEN, (op.at, op.obligation_id))
        return str(row[0])

    def _ledger_finish(self, batch: Batch, op: store_ops.LedgerFinish) -> Later | str | None:
        owner = (op.owner_node, op.owner_node, op.owner_boot)
        if op.state == "delivered":  # final whatever the attempts: one statement
            return batch.run(_LEDGER_FINISH, ("delivered", None, op.at, op.obligation_id,
                                              *owner), _finished_delivered)
        row = _first_row(batch.now(_LEDGER_FINISH_READ, (op.obligation_id, *owner)))
        if row is None:
            return None
        attempts, created_at = row
        state = ledger.finish_state(op.state, attempts=attempts, created_at=created_at,
                                    now=op.at)
        batch.add(_LEDGER_FINISH_OWED, (state, op.error, op.at, op.content, op.obligation_id,
                                        *owner))
        return state

    def _ledger_prune(self, batch: Batch, op: store_ops.LedgerPrune) -> Later:
        d = Delivery
        return batch.run(*sql_of(d.delete().where(d.state.in_(list(ledger.FINAL_STATES))
                                                  & (d.updated_at < op.before))), _rowcount)

    # -- outbox and node state --------------------------------------------------------------

    def _outbox_append(self, batch: Batch, op: store_ops.OutboxAppend) -> Later:
        if op.cursor is not None:
            # degraded mode's row keeps the cursor its readers may have seen: drawn above the
            # clock, it is above every cursor here (files.memory.clock_floor)
            row = (int(op.cursor), op.session_key, op.platform, op.chat_id, op.thread_id,
                   op.text, op.kind, op.created_at, op.in_reply_to)
            if op.obligation_id is None:
                later = batch.run(_OUTBOX_IMPORT, row, _first_int)
            else:  # decided again as it was in degraded mode: only under the same claim
                later = batch.run(_OUTBOX_DELIVERED_IMPORT, (
                    op.created_at, op.obligation_id, op.owner_node, op.owner_boot, *row),
                    _first_int_or_none)
            batch.add(_OUTBOX_PAST, (int(op.cursor), int(op.cursor)))
            return later
        if op.obligation_id is not None:
            return batch.run(_OUTBOX_DELIVERED, (
                op.created_at, op.obligation_id, op.owner_node, op.owner_boot,
                op.session_key, op.platform, op.chat_id, op.thread_id, op.text, op.kind,
                op.created_at, op.in_reply_to), _first_int_or_none)
        return batch.run(_OUTBOX_APPEND, (op.session_key, op.platform, op.chat_id,
                                          op.thread_id, op.text, op.kind, op.created_at,
                                          op.in_reply_to), _first_int)

    def _outbox_prune(self, batch: Batch, op: store_ops.OutboxPrune) -> Later:
        return batch.run(_OUTBOX_PRUNE, (op.before,), _rowcount)

    def _fence_shard(self, batch: Batch, op: store_ops.FenceShard) -> None:
        # Raises FENCED_SQLSTATE in the server, failing the list (Server.rejected names it).
        # Once per tenure and transaction (a group commit holds several lists of a shard):
        # the first check holds the lease row until the transaction ends, and its failure
        # fails the whole transaction, after which each list is replayed alone, fenced.
        params = (int(op.shard), op.owner, int(op.epoch))
        if batch.first(("fence", *params)):
            batch.add(_FENCE_SHARD, params)

    def _notify_shard(self, batch: Batch, op: store_ops.NotifyShard) -> None:
        # the server delivers the same notice of one transaction once anyway
        params = (inbox_channel(int(op.shard)), op.origin)
        if batch.first(("notify", *params)):
            batch.add(_NOTIFY, params)

    def _notify_outbox(self, batch: Batch, op: store_ops.NotifyOutbox) -> None:
        batch.add(_NOTIFY, (OUTBOX_CHANNEL, outbox_notice(op.origin, op.platform, op.chat_id)))

    def _node_value(self, batch: Batch, op: store_ops.NodeValue) -> None:
        if op.value is None:
            batch.add(_DELETE_NODE_VALUE, (op.node_id, op.name))
        else:
            batch.add(PUT_NODE_VALUE, (op.node_id, op.name, op.value))

    def _set_session_restarts(self, batch: Batch, op: store_ops.SetSessionRestarts) -> None:
        # per session, whichever node writes (node_id is a one-node store's business)
        last = dict(op.counts)  # a key named twice: its last count
        put = sorted((k, int(n)) for k, n in last.items() if int(n) > 0)
        gone = sorted(k for k, n in last.items() if int(n) <= 0)
        if put:
            batch.add(_PUT_SESSION_RESTARTS, (op.at, [k for k, _ in put], [n for _, n in put]))
        if gone:
            batch.add(_DELETE_SESSION_RESTARTS, (gone,))
