"""How each write operation (:mod:`hermes_actors.store.ops`) becomes SQL on SQLite.

One small handler per operation, all run by :class:`~hermes_actors.store.backends.sqlite.db.SessionDB` on its
worker thread inside the transaction of an ``apply`` (or of a group commit, see
:meth:`~hermes_actors.store.backends.sqlite.db.SessionDB.apply`).

Why the operations of a turn are raw SQL: building a statement with peewee's query builder
costs ~70 µs, executing a prepared one ~2 µs, and a turn runs about ten of them on the one
writer thread. The texts are constants, so the ``sqlite3`` statement cache prepares each
once per connection. They still go through ``Database.execute_sql`` so errors arrive as
peewee's exception types, like those of the rare operations (prunes, deletes) that keep
using the models.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from hermes_actors.model.jsontext import to_json
from hermes_actors.store import ledger
from hermes_actors.store import ops as store_ops
from hermes_actors.store.backends.peewee_import import pw
from hermes_actors.store.backends.sqlite.schema import Models
from hermes_actors.store.backends.statements import (
    ACCEPT_EVENT,
    ADD_TOKENS,
    ADD_TOKENS_LAST,
    DELETE_NODE_VALUE,
    END_SESSION,
    INGRESS_HOLDER,
    INSERT_SESSION,
    LEDGER_CLAIM,
    LEDGER_RECORD,
    LEDGER_RELEASE,
    LEDGER_REOPEN,
    LEDGER_STATE,
    OUTBOX_APPEND,
    OUTBOX_IMPORT,
    PUT_NODE_VALUE,
    PUT_ROUTING,
    SET_ROUTING_FLAGS,
    WITHDRAW_EVENT,
)
from hermes_actors.store.opdispatch import OpHandlers
from hermes_actors.store.ops import CONVERSATION_TABLES, ListId, Op
from hermes_actors.store.restarts import merged_restart_counts

__all__ = ["PUT_NODE_VALUE", "SqliteOps"]

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


def _in_list(count: int) -> str:
    """``?, ?, ...`` for an ``IN (...)`` of ``count`` parameters."""
    return ", ".join("?" * count)


_GET_NODE_VALUE = "SELECT value FROM node_state WHERE node_id = ? AND name = ?"
#: An outbox append that ends a ledger row's attempt (``OutboxAppend.obligation_id``): the
#: row is ``delivered`` only while this sender holds its claim; the append follows only then.
_OUTBOX_DELIVERED = (
    "UPDATE deliveries SET state = 'delivered', last_error = NULL, updated_at = ?"
    " WHERE obligation_id = ? AND state = 'attempting' AND owner_node = ? AND owner_boot = ?"
)
_CONSUME_EVENTS = (
    "UPDATE inbox SET consumed_at = ?, consumed_reason = ?"
    " WHERE event_id IN ({}) AND consumed_at IS NULL"
)
_LEDGER_CLAIM_READ = (
    "SELECT state, owner_node, owner_boot FROM deliveries WHERE obligation_id = ?"
)
#: The common claim in one statement: a fresh ``pending`` row nobody owns is always
#: claimable (``ledger.claim_allowed``); anything else takes the read-and-decide path.
_LEDGER_CLAIM_FRESH = LEDGER_CLAIM + " AND state = 'pending' AND owner_node IS NULL"
#: An outcome is recorded unless another sender claimed the row since (``LedgerFinish``).
_NOT_TAKEN = " AND (? IS NULL OR owner_node IS NULL OR (owner_node = ? AND owner_boot IS ?))"
_LEDGER_FINISH_READ = ("SELECT attempts, created_at FROM deliveries WHERE obligation_id = ?"
                       + _NOT_TAKEN)
_LEDGER_FINISH = (
    "UPDATE deliveries SET state = ?, last_error = ?, updated_at = ? WHERE obligation_id = ?"
    + _NOT_TAKEN
)
#: An outcome other than ``delivered``, which may leave only the unsent rest owed.
_LEDGER_FINISH_OWED = (
    "UPDATE deliveries SET state = ?, last_error = ?, updated_at = ?,"
    " content = COALESCE(?, content) WHERE obligation_id = ?" + _NOT_TAKEN
)


def _json(value: Any) -> str | None:
    return None if value is None else to_json(value)


#: How many of the latest op list ids ``applied_lists`` keeps: far more than can be in
#: flight when a writer dies (a group commit's lists, the pipe's queue).
KEPT_LIST_IDS = 65_536
#: Every this many recording transactions, the older ids are deleted.
PRUNE_LIST_IDS_EVERY = 1024
_PRUNE_LIST_IDS = ("DELETE FROM applied_lists WHERE rowid <="
                   " (SELECT max(rowid) FROM applied_lists) - ?")


class SqliteOps(OpHandlers):
    """Applies operations to one SQLite database (call only on its worker thread)."""

    def __init__(self, database: pw.Database, models: Models) -> None:
        self._db = database
        self._m = models
        super().__init__("SQLite")
        #: Transactions that recorded list ids (``applied_lists`` is pruned every
        #: :data:`PRUNE_LIST_IDS_EVERY`).
        self._recorded = 0

    def record_lists(self, ids: list[tuple[str, float]]) -> set[str]:
        """Record the ids of op lists about to be applied in this transaction (one
        statement for a whole group commit); the ones new here (the others are replays)."""
        rows = self._db.execute_sql(
            "INSERT INTO applied_lists (list_id) VALUES "
            + ", ".join(["(?)"] * len(ids))
            + " ON CONFLICT (list_id) DO NOTHING RETURNING list_id",
            [list_id for list_id, _ in ids]).fetchall()
        self._recorded += 1
        if self._recorded % PRUNE_LIST_IDS_EVERY == 0:  # (a rowid range: cheap)
            self._db.execute_sql(_PRUNE_LIST_IDS, (KEPT_LIST_IDS,))
        return {row[0] for row in rows}

    def apply_list(self, ops: list[Op], fresh: set[str] | None = None) -> list[Any]:
        """Run ``ops`` in order inside the caller's transaction; their results. The ops
        after a :class:`ListId` whose id was applied before are skipped (``None``);
        ``fresh``: the new ids of this transaction when a leading one was recorded already
        (:meth:`record_lists`)."""
        results: list[Any] = []
        skipping = False
        for index, op in enumerate(ops):
            if type(op) is ListId:
                if index == 0 and fresh is not None:
                    new = op.list_id in fresh
                else:
                    new = bool(self.record_lists([(op.list_id, op.at)]))
                skipping = not new
                results.append(new)
            else:
                results.append(None if skipping else self.apply(op))
        return results

    def apply(self, op: Op) -> Any:
        """Run one operation inside the caller's transaction; return its result."""
        handler = self._handlers.get(type(op))
        if handler is None:
            self.refuse(op)
        return handler(op)

    # -- sessions and routing ---------------------------------------------------------------

    def _create_session(self, op: store_ops.CreateSession) -> None:
        self._db.execute_sql(
            INSERT_SESSION,
            (op.session_id, op.session_key, _json(op.source), op.started_at,
             op.parent_session_id),
        )
        self._known_in_txn.add(op.session_id)

    def _end_session(self, op: store_ops.EndSession) -> None:
        self._db.execute_sql(END_SESSION, (op.ended_at, op.reason, op.session_id))

    def _put_routing(self, op: store_ops.PutRouting) -> None:
        self._db.execute_sql(PUT_ROUTING, (
            op.session_key, op.entry, op.active_turn_token, op.active_turn_started_at,
            1 if op.active_turn_internal else 0, 1 if op.resume_pending else 0,
            1 if op.suspended else 0, op.updated_at))

    def _set_routing_flags(self, op: store_ops.SetRoutingFlags) -> int:
        return self._db.execute_sql(SET_ROUTING_FLAGS, (
            op.active_turn_token, op.active_turn_started_at, 1 if op.active_turn_internal else 0,
            1 if op.resume_pending else 0, 1 if op.suspended else 0, op.updated_at,
            op.session_key)).rowcount

    def _delete_routing(self, op: store_ops.DeleteRouting) -> int:
        r = self._m.Routing
        return sum(
            r.delete().where(r.session_key.in_(batch)).execute()
            for batch in _chunks(op.session_keys)
        )

    def _delete_conversations(self, op: store_ops.DeleteConversations) -> dict[str, int]:
        # messages go before their sessions rows (the reference), and the FTS trigger
        # ``messages_ad`` removes each one's index row in this same transaction
        counts = dict.fromkeys(CONVERSATION_TABLES, 0)
        ids = set(op.session_ids)
        for batch in _chunks(op.session_keys):
            ids.update(row[0] for row in self._db.execute_sql(
                f"SELECT id FROM sessions WHERE session_key IN ({_in_list(len(batch))})",
                batch).fetchall())
        for batch in _chunks(sorted(ids)):
            marks = _in_list(len(batch))
            counts["messages"] += self._db.execute_sql(
                f"DELETE FROM messages WHERE session_id IN ({marks})", batch).rowcount
            counts["sessions"] += self._db.execute_sql(
                f"DELETE FROM sessions WHERE id IN ({marks})", batch).rowcount
            for session_id in batch:  # (an append to it would insert its row again)
                self._known.pop(session_id, None)
        for batch in _chunks(op.session_keys):
            marks = _in_list(len(batch))
            for table in ("inbox", "deliveries", "outbox", "routing"):
                counts[table] += self._db.execute_sql(
                    f'DELETE FROM "{table}" WHERE session_key IN ({marks})', batch).rowcount
        return counts

    def _add_tokens(self, op: store_ops.AddTokens) -> None:
        if op.last_prompt_tokens is None:
            self._db.execute_sql(
                ADD_TOKENS, (int(op.input_tokens), int(op.output_tokens), op.session_id)
            )
        else:
            self._db.execute_sql(
                ADD_TOKENS_LAST,
                (int(op.input_tokens), int(op.output_tokens), int(op.last_prompt_tokens),
                 op.session_id),
            )

    # -- transcript (hot path: raw SQL) -----------------------------------------------------

    def _append_message(self, op: store_ops.AppendMessage) -> int:
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

    def _accept_event(self, op: store_ops.AcceptEvent) -> str:
        inserted = self._db.execute_sql(
            ACCEPT_EVENT,
            (op.event_id, op.session_key, op.payload, 1 if op.internal else 0, op.received_at,
             op.ingress_key),
        ).rowcount
        if inserted or op.ingress_key is None:
            return op.event_id
        holder = self._db.execute_sql(INGRESS_HOLDER, (op.ingress_key,)).fetchone()
        return holder[0] if holder is not None else op.event_id

    def _withdraw_event(self, op: store_ops.WithdrawEvent) -> int:
        return self._db.execute_sql(WITHDRAW_EVENT, (op.event_id,)).rowcount

    def _consume_events(self, op: store_ops.ConsumeEvents) -> int:
        return sum(
            self._db.execute_sql(
                _CONSUME_EVENTS.format(_in_list(len(batch))), (op.at, op.reason, *batch)
            ).rowcount
            for batch in _chunks(op.event_ids)
        )

    def _prune_inbox(self, op: store_ops.PruneInbox) -> int:
        i = self._m.Inbox
        return (
            i.delete().where(i.consumed_at.is_null(False) & (i.consumed_at < op.before)).execute()
        )

    # -- delivery ledger --------------------------------------------------------------------

    def _ledger_record(self, op: store_ops.LedgerRecord) -> None:
        self._db.execute_sql(
            LEDGER_RECORD,
            (op.obligation_id, op.session_key, op.platform, op.chat_id, op.thread_id,
             op.content, op.kind, op.at, op.at, op.in_reply_to),
        )

    def _ledger_claim(self, op: store_ops.LedgerClaim) -> bool:
        args = (op.owner_node, op.owner_boot, op.at, op.obligation_id)
        if self._db.execute_sql(_LEDGER_CLAIM_FRESH, args).rowcount:
            return True
        row = self._db.execute_sql(_LEDGER_CLAIM_READ, (op.obligation_id,)).fetchone()
        if row is None:
            return False
        state, owner_node, owner_boot = row
        if not ledger.claim_allowed(state, owner_node, owner_boot,
                                    claimer_node=op.owner_node, claimer_boot=op.owner_boot):
            return False
        self._db.execute_sql(LEDGER_CLAIM, args)
        return True

    def _ledger_release(self, op: store_ops.LedgerRelease) -> bool:
        return self._db.execute_sql(LEDGER_RELEASE, (op.at, op.obligation_id, op.owner_node,
                                                      op.owner_boot)).rowcount > 0

    def _ledger_reopen(self, op: store_ops.LedgerReopen) -> str | None:
        row = self._db.execute_sql(LEDGER_STATE, (op.obligation_id,)).fetchone()
        if row is None:
            return None
        if row[0] in ledger.REOPENABLE_STATES:
            self._db.execute_sql(LEDGER_REOPEN, (op.at, op.obligation_id))
        return str(row[0])

    def _ledger_finish(self, op: store_ops.LedgerFinish) -> str | None:
        owner = (op.owner_node, op.owner_node, op.owner_boot)
        if op.state == "delivered":  # final whatever the attempts: one statement
            done = self._db.execute_sql(_LEDGER_FINISH, ("delivered", None, op.at,
                                                         op.obligation_id, *owner)).rowcount
            return "delivered" if done else None
        row = self._db.execute_sql(_LEDGER_FINISH_READ, (op.obligation_id, *owner)).fetchone()
        if row is None:
            return None
        attempts, created_at = row
        state = ledger.finish_state(op.state, attempts=attempts, created_at=created_at, now=op.at)
        self._db.execute_sql(_LEDGER_FINISH_OWED, (state, op.error, op.at, op.content,
                                                   op.obligation_id, *owner))
        return state

    def _ledger_prune(self, op: store_ops.LedgerPrune) -> int:
        d = self._m.Delivery
        return (
            d.delete()
            .where(d.state.in_(ledger.FINAL_STATES) & (d.updated_at < op.before))
            .execute()
        )

    # -- outbox and node state --------------------------------------------------------------

    def _outbox_append(self, op: store_ops.OutboxAppend) -> int | None:
        if op.obligation_id is not None and not self._db.execute_sql(_OUTBOX_DELIVERED, (
                op.created_at, op.obligation_id, op.owner_node, op.owner_boot)).rowcount:
            return None  # the claim is not this sender's (any more): nothing is appended
        if op.cursor is not None:
            # degraded mode's row keeps the cursor its readers may have seen: drawn above the
            # clock, it is above every cursor here (files.memory.clock_floor), and
            # AUTOINCREMENT numbers later rows above it
            self._db.execute_sql(OUTBOX_IMPORT, (
                op.cursor, op.session_key, op.platform, op.chat_id, op.thread_id, op.text,
                op.kind, op.created_at, op.in_reply_to))
            return op.cursor
        return self._db.execute_sql(OUTBOX_APPEND, (
            op.session_key, op.platform, op.chat_id, op.thread_id, op.text, op.kind,
            op.created_at, op.in_reply_to)).lastrowid

    def _outbox_prune(self, op: store_ops.OutboxPrune) -> int:
        return self._db.execute_sql("DELETE FROM outbox WHERE created_at < ?",
                                    (op.before,)).rowcount

    def _node_value(self, op: store_ops.NodeValue) -> None:
        if op.value is None:
            self._db.execute_sql(DELETE_NODE_VALUE, (op.node_id, op.name))
        else:
            self._db.execute_sql(PUT_NODE_VALUE, (op.node_id, op.name, op.value))

    def _set_session_restarts(self, op: store_ops.SetSessionRestarts) -> None:
        # one node per SQLite store: the counts are the node's ``restart_counts`` value
        row = self._db.execute_sql(_GET_NODE_VALUE, (op.node_id, "restart_counts")).fetchone()
        value = merged_restart_counts(row[0] if row else None, op.counts)
        self._db.execute_sql(PUT_NODE_VALUE, (op.node_id, "restart_counts", value))
