"""Maintenance and querying of ``messages_fts``, the derived full-text index (SQLite only).

The index is rebuilt from ``messages``, never the other way round, so every repair here is
"drop what is broken, build it again": no function in this module deletes a message. These
functions run on the database's worker thread and take the peewee database directly.

Corruption shows up in several ways (``database disk image is malformed``, a bare
``constraint failed`` on insert, ``vtable constructor failed`` when a shadow table is gone),
so the status check asks FTS5 itself (``integrity-check`` with rank 1 compares the index
against the content table) instead of matching error texts. A read-only connection may not
run that command (it is an INSERT), so read-only checks run it on a private temporary copy.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from hermes_actors.errors import StoreError
from hermes_actors.store.backends.peewee_import import pw
from hermes_actors.store.backends.sqlite.schema import FTS_DDL, FTS_SHADOW_TABLES, FTS_TRIGGERS
from hermes_actors.store.transcript import public_message

__all__ = ["FTS_STATES", "detach", "rebuild", "search", "status"]

log = logging.getLogger(__name__)

#: What :func:`status` answers.
FTS_STATES = ("ok", "missing", "corrupt")

_CHECK = "INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)"


def _exists(database: pw.Database) -> bool:
    row = database.execute_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'messages_fts'"
    ).fetchone()
    return row is not None


def _trigger_count(database: pw.Database) -> int:
    marks = ", ".join("?" for _ in FTS_TRIGGERS)
    return database.execute_sql(
        f"SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name IN ({marks})",
        FTS_TRIGGERS,
    ).fetchone()[0]


def _check_on_copy(database: pw.Database) -> bool:
    """Run FTS5's integrity check on a temporary copy (for read-only connections)."""
    with tempfile.TemporaryDirectory(prefix="hermes-fts-check-") as tmp:
        copy = sqlite3.connect(str(Path(tmp) / "copy.db"), isolation_level=None)
        try:
            database.connection().backup(copy)
            copy.execute(_CHECK)
            return True
        except sqlite3.DatabaseError:
            return False
        finally:
            copy.close()


def status(database: pw.Database, *, read_only: bool = False) -> str:
    """``"ok"``, ``"missing"`` (no index table) or ``"corrupt"`` (broken, or triggers lost)."""
    try:
        if not _exists(database):
            return "missing"
        if _trigger_count(database) != len(FTS_TRIGGERS):
            return "corrupt"
        if read_only:
            return "ok" if _check_on_copy(database) else "corrupt"
        database.execute_sql(_CHECK)
    except pw.DatabaseError:
        return "corrupt"
    return "ok"


def _force_remove(database: pw.Database) -> None:
    """Remove an index whose virtual table can no longer even be constructed.

    ``DROP TABLE`` needs a working FTS5 table; when a shadow table is gone it fails with
    "vtable constructor failed". SQLite's documented escape is ``writable_schema``: delete
    the virtual table's schema row, reset the schema, then drop the shadow tables normally.
    """
    log.warning("messages_fts cannot be dropped normally; removing its schema entry")
    database.execute_sql("PRAGMA writable_schema = ON")
    try:
        database.execute_sql(
            "DELETE FROM sqlite_master WHERE type = 'table' AND name = 'messages_fts'"
        )
    finally:
        database.execute_sql("PRAGMA writable_schema = RESET")
    for table in FTS_SHADOW_TABLES:
        database.execute_sql(f"DROP TABLE IF EXISTS {table}")


def detach(database: pw.Database) -> None:
    """Drop the index and its triggers; ``messages`` is untouched (appends keep working)."""
    with database.atomic():
        for trigger in FTS_TRIGGERS:
            database.execute_sql(f"DROP TRIGGER IF EXISTS {trigger}")
    try:
        with database.atomic():
            database.execute_sql("DROP TABLE IF EXISTS messages_fts")
    except pw.DatabaseError:
        _force_remove(database)


def rebuild(database: pw.Database) -> None:
    """Drop whatever is left of the index and build it again from ``messages``."""
    detach(database)
    with database.atomic():
        for statement in FTS_DDL:
            database.execute_sql(statement)
        database.execute_sql("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")


def search(database: pw.Database, query: str, limit: int) -> list[dict[str, Any]]:
    """Messages matching the FTS5 ``query``, best match (lowest bm25) first.

    A malformed query raises :class:`StoreError` naming the query; a missing or corrupt index
    raises :class:`StoreError` telling the operator to run ``hermes-actors db rebuild-fts``.
    """
    if not isinstance(query, str) or not query.strip():
        raise StoreError("search query must be a non-empty string")
    limit = max(1, int(limit))
    sql = (
        "SELECT m.id, m.session_id, m.role, m.content, m.tool_name, m.tool_calls,"
        " m.timestamp, m.token_count"
        " FROM messages_fts JOIN messages AS m ON m.id = messages_fts.rowid"
        " WHERE messages_fts MATCH ? ORDER BY bm25(messages_fts), m.id LIMIT ?"
    )
    try:
        rows = database.execute_sql(sql, (query, limit)).fetchall()
    except pw.OperationalError as exc:
        if not _exists(database):
            raise StoreError(
                "full-text search is unavailable (index detached); "
                "run `hermes-actors db rebuild-fts`"
            ) from None
        raise StoreError(f"invalid search query {query!r}: {exc}") from None
    except pw.DatabaseError as exc:
        raise StoreError(
            f"full-text index is corrupt ({exc}); run `hermes-actors db rebuild-fts`"
        ) from None
    out = []
    for msg_id, session_id, role, content, tool_name, tool_calls, ts, tokens in rows:
        message = public_message(
            role, content, tool_name, json.loads(tool_calls) if tool_calls else None, ts, tokens
        )
        out.append({"id": msg_id, "session_id": session_id, **message})
    return out
