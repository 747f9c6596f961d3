"""The durable outbox in the store: replies to chats that are read over HTTP (§17.32).

The HTTP adapter cannot push a reply to a client, so it appends the reply here and clients
read it by cursor (``GET /v1/outbox``). A cursor is the row's ``AUTOINCREMENT`` key: global,
strictly increasing and never reused, so "everything after cursor N" is exact across
restarts and prunes.

Three pieces, kept apart from the rest of the store so the session tables' code is untouched:
the SQLite handlers (registered by :class:`~hermes_actors.store.backends.sqlite.operations.SqliteOps`),
:class:`MemoryOutbox` (the degraded backend's copy, lost on a crash, like its inbox), and
:class:`OutboxStoreMethods`, the store's public methods (a mixin of ``SessionStore``).
Reads go through ``apply`` like writes: the degraded backend has no SQL to read from, and
one path for both keeps their answers the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import peewee as pw

from hermes_actors.store.ops import OutboxAppend, OutboxHead, OutboxPrune, OutboxRead

__all__ = [
    "MAX_READ",
    "OUTBOX_COLUMNS",
    "MemoryOutbox",
    "OutboxStoreMethods",
    "sqlite_outbox_handlers",
]

#: The columns of an outbox row, in the order reads return them.
OUTBOX_COLUMNS = (
    "cursor", "session_key", "platform", "chat_id", "thread_id", "text", "kind", "created_at",
    "in_reply_to",
)  # fmt: skip
#: The most rows one read returns.
MAX_READ = 1000
_DAY = 86400.0


def sqlite_outbox_handlers(database: pw.Database) -> dict[type, Callable[[Any], Any]]:
    """The outbox operation handlers for one SQLite database (run on its worker thread)."""

    def append(op: OutboxAppend) -> int:
        """Insert the row; its cursor."""
        cursor = database.execute_sql(
            "INSERT INTO outbox (session_key, platform, chat_id, thread_id, text, kind,"
            " created_at, in_reply_to) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (op.session_key, op.platform, op.chat_id, op.thread_id, op.text, op.kind,
             op.created_at, op.in_reply_to),
        )
        return cursor.lastrowid

    def read(op: OutboxRead) -> list[dict[str, Any]]:
        """One chat's rows after the cursor."""
        chat = "chat_id IS NULL" if op.chat_id is None else "chat_id = ?"
        params: tuple = (op.platform,) + (() if op.chat_id is None else (op.chat_id,))
        rows = database.execute_sql(
            f"SELECT {', '.join(OUTBOX_COLUMNS)} FROM outbox"
            f" WHERE platform = ? AND {chat} AND cursor > ? ORDER BY cursor LIMIT ?",
            params + (int(op.after), int(op.limit)),
        ).fetchall()
        return [dict(zip(OUTBOX_COLUMNS, row, strict=True)) for row in rows]

    def head(_op: OutboxHead) -> int:
        """The highest cursor, 0 when empty."""
        return database.execute_sql("SELECT max(cursor) FROM outbox").fetchone()[0] or 0

    def prune(op: OutboxPrune) -> int:
        """Delete old rows; the count."""
        return database.execute_sql(
            "DELETE FROM outbox WHERE created_at < ?", (op.before,)
        ).rowcount

    return {OutboxAppend: append, OutboxRead: read, OutboxHead: head, OutboxPrune: prune}


class MemoryOutbox:
    """The outbox of the degraded backend: a list in memory (call under the backend's lock)."""

    def __init__(self) -> None:
        self._rows: list[dict[str, Any]] = []
        self._last = 0

    def apply(self, op: Any) -> Any:
        """Apply one outbox operation; same results as the SQLite handlers."""
        if isinstance(op, OutboxAppend):
            self._last = max(self._last, int(op.floor)) + 1
            row = dict(zip(OUTBOX_COLUMNS, (
                self._last, op.session_key, op.platform, op.chat_id, op.thread_id, op.text,
                op.kind, op.created_at, op.in_reply_to,
            ), strict=True))  # fmt: skip
            self._rows.append(row)
            return self._last
        if isinstance(op, OutboxRead):
            found = [
                dict(r) for r in self._rows
                if r["platform"] == op.platform and r["chat_id"] == op.chat_id
                and r["cursor"] > op.after
            ]  # fmt: skip
            return found[: op.limit]
        if isinstance(op, OutboxHead):
            return self._last
        assert isinstance(op, OutboxPrune)
        kept = [r for r in self._rows if r["created_at"] >= op.before]
        pruned = len(self._rows) - len(kept)
        self._rows = kept
        return pruned


class OutboxStoreMethods:
    """``outbox_append``/``outbox_read``/``outbox_head``/``outbox_prune`` of the store.

    A mixin of :class:`~hermes_actors.store.store.SessionStore`; it relies on the store's
    ``_apply`` and ``_ts``.
    """

    def outbox_append(
        self,
        *,
        session_key: str,
        platform: str,
        chat_id: str | None,
        thread_id: str | None,
        text: str,
        kind: str,
        floor: int = 0,
        in_reply_to: tuple[str, ...] = (),
    ) -> int:
        """Append a reply for a chat; returns its cursor (greater than every earlier one).
        ``in_reply_to`` names the inbound events it answers."""
        if not isinstance(text, str):
            raise ValueError("outbox text must be a string")
        op = OutboxAppend(
            session_key=session_key,
            platform=str(platform),
            chat_id=None if chat_id is None else str(chat_id),
            thread_id=None if thread_id is None else str(thread_id),
            text=text,
            kind=str(kind),
            created_at=self._ts(),
            floor=int(floor),
            in_reply_to=" ".join(in_reply_to) or None,
        )
        return int(self._apply([op])[0])

    def outbox_read(
        self, platform: str, chat_id: str | None, after: int = 0, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Rows of one chat with a cursor above ``after``, oldest first (at most ``limit``,
        capped at :data:`MAX_READ`); each a dict of :data:`OUTBOX_COLUMNS`."""
        limit = max(1, min(int(limit), MAX_READ))
        chat = None if chat_id is None else str(chat_id)
        return self._apply([OutboxRead(str(platform), chat, int(after), limit)])[0]

    def outbox_head(self) -> int:
        """The highest cursor so far (0 when the outbox is empty)."""
        return int(self._apply([OutboxHead()])[0] or 0)

    def outbox_prune(self, max_age_days: float = 7) -> int:
        """Delete rows older than ``max_age_days``; returns the count."""
        return int(self._apply([OutboxPrune(self._ts() - max_age_days * _DAY)])[0] or 0)
