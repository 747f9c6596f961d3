"""``Reads``: the questions the store's domain asks of the PostgreSQL backend (reads only).

Kept apart from :mod:`~hermes_actors.store.backends.postgres.backend` (opening, writes,
tools) because this is the larger half and the one that follows the protocol method by
method. Every read is raw SQL on one pooled connection, in the caller's thread (or greenlet,
where psycopg waits cooperatively). Recovery's and pruning's questions are answered from
the partial and activity indexes of ``routing``; a transcript is read in ``id`` order.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from hermes_actors.store.backends.postgres.connection import Server
from hermes_actors.store.protocol import DIAGNOSTIC_TABLES, OUTBOX_COLUMNS
from hermes_actors.store.routing import RoutingFlags, RoutingRow
from hermes_actors.store.transcript import (
    LAST_ROW_COLUMNS,
    public_message,
    reply_after_last_row,
)

__all__ = ["DIAGNOSTIC_ORDER", "Reads"]

T = TypeVar("T")

#: The routing columns in :class:`RoutingRow` order.
_ROUTING_SELECT = (
    "SELECT session_key, entry, active_turn_token, active_turn_started_at,"
    " active_turn_internal, resume_pending, suspended, updated_at FROM routing"
)
#: How each diagnostic table is listed (insertion order where the table has one).
DIAGNOSTIC_ORDER = {
    "sessions": "started_at, id", "messages": "id", "routing": "session_key",
    "inbox": "seq", "deliveries": "created_at, obligation_id", "outbox": "cursor",
    "node_state": "node_id, name",
}
_MESSAGE_COLUMNS = "role, content, tool_name, tool_calls, timestamp, token_count"
#: Per turn ``(session_id, token)``, in one query: its last final reply row, and the
#: session's last message (used only when there is no reply row).
_TURN_REPLIES = (
    "SELECT t.sid, t.token, r.content, l.role, l.content, l.tool_calls, l.timestamp,"
    " l.turn_token FROM unnest(%s::text[], %s::text[]) AS t(sid, token)"
    " LEFT JOIN LATERAL (SELECT content FROM messages WHERE session_id = t.sid"
    " AND turn_token = t.token AND is_reply ORDER BY id DESC LIMIT 1) AS r ON true"
    f" LEFT JOIN LATERAL (SELECT {', '.join(LAST_ROW_COLUMNS)}"
    " FROM messages WHERE session_id = t.sid ORDER BY id DESC LIMIT 1) AS l ON true"
)


class Reads:
    """The read methods of the ``Backend`` protocol over a pool of connections."""

    def __init__(self, server: Server, pool: ConnectionPool) -> None:
        self._server = server
        self._pool = pool

    def _check_open(self) -> None:
        """Raise ``StoreError`` once the backend is closed (the backend says how)."""

    def _read(self, fn: Callable[[Any], T]) -> T:
        """``fn(cursor)`` on a pooled connection. If the server dropped that connection (it
        restarted, say), the idle ones are checked too, the dead replaced, and the read runs
        once more; a cancelled or timed-out statement is not retried. A read that cannot be
        run raises ``StoreUnavailableError``."""
        self._check_open()
        for attempt in (1, 2):
            broken = False
            try:
                with self._pool.connection() as conn:
                    try:
                        with conn.cursor() as cur:
                            return fn(cur)
                    except psycopg.OperationalError:
                        broken = conn.broken
                        raise
            except PoolTimeout as exc:
                raise self._server.unavailable("read", exc) from None
            except psycopg.OperationalError as exc:
                if attempt == 1 and broken:
                    self._pool.check()  # its siblings likely died with it
                    continue
                raise self._server.unavailable("read", exc) from None
            except psycopg.Error as exc:
                raise self._server.rejected("read", exc) from None
        raise AssertionError("unreachable")

    # -- routing ----------------------------------------------------------------------------

    def _routing(self, where: str = "", params: tuple[Any, ...] = ()) -> list[RoutingRow]:
        def read(cur: Any) -> list[RoutingRow]:
            rows = cur.execute(_ROUTING_SELECT + where, params).fetchall()
            return [RoutingRow(key, text, RoutingFlags(token, started, internal, resume,
                                                       suspended, updated))
                    for key, text, token, started, internal, resume, suspended, updated
                    in rows]

        return self._read(read)

    def routing_keys(self) -> dict[str, None]:
        """Every routing key, as an ordered set (``dict`` with ``None`` values)."""
        # fetchall() loads the rows in C; iterating the cursor is a Python call per row
        # (100,000 keys at a recovery: ~65 ms against ~40 ms here)
        return self._read(lambda cur: dict.fromkeys([key for (key,) in cur.execute(
            "SELECT session_key FROM routing ORDER BY session_key").fetchall()]))

    def routing_rows(self) -> list[RoutingRow]:
        """Every routing row."""
        return self._routing(" ORDER BY session_key")

    def shard_routing_rows(self, shards: int, wanted: list[int]) -> list[RoutingRow]:
        """The routing rows of the sessions of the ``wanted`` shards (a cluster node)."""
        return self._routing(" WHERE cluster_shard(session_key, %s) = ANY(%s::integer[])"
                             " ORDER BY session_key", (shards, list(wanted)))

    def routing_row(self, session_key: str) -> RoutingRow | None:
        """One routing row, or ``None``."""
        rows = self._routing(" WHERE session_key = %s", (session_key,))
        return rows[0] if rows else None

    def routing_flagged(self) -> list[RoutingRow]:
        """The rows with a turn marker or a pending resume (from the partial index)."""
        return self._routing(" WHERE active_turn_token IS NOT NULL OR resume_pending"
                             " ORDER BY session_key")

    def routing_idle_before(self, cutoff: float, limit: int | None = None
                            ) -> list[RoutingRow]:
        """Pruning's candidates: unflagged rows last active before ``cutoff`` or never
        (``limit``: the longest idle first, at most that many)."""
        where = (" WHERE (updated_at < %s OR updated_at IS NULL) AND active_turn_token IS NULL"
                 " AND NOT resume_pending AND NOT suspended")
        if limit is None:
            return self._routing(where + " ORDER BY session_key", (cutoff,))
        return self._routing(where + " ORDER BY updated_at ASC NULLS LAST, session_key"
                             " LIMIT %s", (cutoff, limit))

    # -- the node ---------------------------------------------------------------------------

    def node_values(self, node_id: str) -> dict[str, str]:
        """The named state values of ``node_id``."""
        return self._read(lambda cur: dict(cur.execute(
            "SELECT name, value FROM node_state WHERE node_id = %s", (node_id,)).fetchall()))

    def session_restarts(self, node_id: str) -> dict[str, int]:
        """Every session's stuck-loop count (shared by the nodes; ``node_id`` unused)."""
        return self._read(lambda cur: dict(cur.execute(
            "SELECT session_key, restarts FROM session_restarts ORDER BY session_key"
        ).fetchall()))

    # -- transcripts ------------------------------------------------------------------------

    def _messages(self, where: str, params: tuple[Any, ...],
                  tail: str = "") -> list[dict[str, Any]]:
        def read(cur: Any) -> list[dict[str, Any]]:
            rows = cur.execute(f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE {where}"
                               f" ORDER BY id{tail}", params).fetchall()
            return [public_message(role, content, name, json.loads(calls) if calls else None,
                                   ts, tok)
                    for role, content, name, calls, ts, tok in rows]

        return self._read(read)

    def load_messages(self, session_id: str,
                      before_turn: str | None = None) -> list[dict[str, Any]]:
        """The transcript of ``session_id`` in order (§17.13 shape); with ``before_turn``
        only the messages written before that turn's first one."""
        if before_turn is None:
            return self._messages("session_id = %s", (session_id,))
        return self._messages(
            "session_id = %s AND id < COALESCE((SELECT min(id) FROM messages"
            " WHERE session_id = %s AND turn_token = %s), 9223372036854775807)",
            (session_id, session_id, before_turn))

    def load_tail(self, session_id: str, limit: int) -> list[dict[str, Any]]:
        """The last ``limit`` messages of ``session_id`` in order; only those rows are
        read (newest first by the primary key, ``LIMIT``, then reversed)."""
        if limit <= 0:
            return []
        newest = self._messages("session_id = %s", (session_id, int(limit)), " DESC LIMIT %s")
        newest.reverse()
        return newest

    def message_count(self, session_id: str) -> int:
        """How many transcript messages ``session_id`` has."""
        return self._read(lambda cur: int(cur.execute(
            "SELECT count(*) FROM messages WHERE session_id = %s", (session_id,)
        ).fetchone()[0]))

    def turn_replies(self, turns: list[tuple[str, str, float | None]]
                     ) -> dict[tuple[str, str], str]:
        """``(session_id, token) -> content`` of each turn's reply, in one query (recovery
        asks about every interrupted turn at once): its last final reply row, else a reply
        its transcript ends with that was written after the marker's start
        (``transcript.reply_after_marker``)."""
        if not turns:
            return {}
        started_of = {(sid, token): started for sid, token, started in turns}
        rows = self._read(lambda cur: cur.execute(_TURN_REPLIES, (
            [sid for sid, _t, _s in turns], [token for _sid, token, _s in turns])).fetchall())
        found = {}
        for sid, token, reply, *last in rows:
            if reply is not None:
                found[(sid, token)] = reply
                continue
            adopted = reply_after_last_row(tuple(last) if last[0] is not None else None,
                                           token, started_of[(sid, token)])
            if adopted is not None:
                found[(sid, token)] = adopted
        return found

    # -- inbox, ledger, outbox --------------------------------------------------------------

    def pending_inbox(self) -> list[tuple[str, dict[str, Any]]]:
        """Unconsumed inbox events as ``(session_key, payload)``, in arrival (``seq``) order."""
        rows = self._read(lambda cur: cur.execute(
            "SELECT session_key, payload FROM inbox WHERE consumed_at IS NULL ORDER BY seq"
        ).fetchall())
        return [(key, json.loads(payload)) for key, payload in rows]

    def shard_pending_inbox(self, shards: int, wanted: list[int]
                            ) -> list[tuple[str, dict[str, Any]]]:
        """:meth:`pending_inbox` of the sessions of the ``wanted`` shards."""
        return [(key, json.loads(payload))
                for key, _id, payload in self.shard_pending_rows(shards, wanted)]

    def shard_pending_rows(self, shards: int, wanted: list[int]
                           ) -> list[tuple[str, str, str]]:
        """:meth:`shard_pending_inbox` unparsed: ``(session_key, event_id, payload text)``
        (a cluster node's pass parses only the events it has not dispatched yet). Of every
        shard (a node alone in its cluster), no row's shard is computed."""
        if len(set(wanted)) >= shards:
            return self._read(lambda cur: cur.execute(
                "SELECT session_key, event_id, payload FROM inbox WHERE consumed_at IS NULL"
                " ORDER BY seq").fetchall())
        return self._read(lambda cur: cur.execute(
            "SELECT session_key, event_id, payload FROM inbox WHERE consumed_at IS NULL"
            " AND cluster_shard(session_key, %s) = ANY(%s::integer[]) ORDER BY seq",
            (shards, list(wanted))).fetchall())

    def ledger_counts(self) -> dict[str, int]:
        """How many ledger rows are in each state."""
        return self._read(lambda cur: dict(cur.execute(
            "SELECT state, count(*) FROM deliveries GROUP BY state").fetchall()))

    def outbox_read(self, platform: str, chat_id: str | None, after: int,
                    limit: int) -> list[dict[str, Any]]:
        """One chat's outbox rows after cursor ``after``, oldest first."""
        chat = "chat_id IS NULL" if chat_id is None else "chat_id = %s"
        params: tuple[Any, ...] = (platform,) + (() if chat_id is None else (chat_id,))
        sql = (f"SELECT {', '.join(OUTBOX_COLUMNS)} FROM outbox"
               f" WHERE platform = %s AND {chat} AND cursor > %s ORDER BY cursor LIMIT %s")

        def read(cur: Any) -> list[dict[str, Any]]:
            rows = cur.execute(sql, (*params, int(after), int(limit))).fetchall()
            return [dict(zip(OUTBOX_COLUMNS, row, strict=True)) for row in rows]

        return self._read(read)

    def outbox_head(self) -> int:
        """The highest outbox cursor, 0 when empty."""
        return self._read(lambda cur: int(cur.execute(
            "SELECT coalesce(max(cursor), 0) FROM outbox").fetchone()[0]))

    # -- diagnostics ------------------------------------------------------------------------

    def rows(self, table: str) -> list[dict[str, Any]]:
        """Every row of a diagnostic table (``protocol.DIAGNOSTIC_TABLES``), in key order."""
        if table not in DIAGNOSTIC_TABLES:
            raise ValueError(f"not a diagnostic table: {table!r}")

        def read(cur: Any) -> list[dict[str, Any]]:
            cur.execute(f"SELECT * FROM {table} ORDER BY {DIAGNOSTIC_ORDER[table]}")
            names = [column.name for column in cur.description]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

        return self._read(read)

    def counts(self) -> dict[str, int]:
        """Row counts: ``sessions``, ``messages``, ``routing``, ``pending_deliveries``."""

        def read(cur: Any) -> dict[str, int]:
            def one(sql: str) -> int:
                return int(cur.execute(sql).fetchone()[0])

            return {
                "sessions": one("SELECT count(*) FROM sessions"),
                "messages": one("SELECT count(*) FROM messages"),
                "routing": one("SELECT count(*) FROM routing"),
                "pending_deliveries": one(
                    "SELECT count(*) FROM deliveries"
                    " WHERE state IN ('pending', 'attempting', 'failed')"),
            }

        return self._read(read)
