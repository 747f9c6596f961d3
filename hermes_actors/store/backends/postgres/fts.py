"""Full-text search on PostgreSQL: the ``messages_fts`` GIN index, its status and repair.

The index is an expression index over ``messages`` (see
:mod:`~hermes_actors.store.backends.postgres.schema`), so unlike SQLite's FTS5 table it has
no content of its own to lose: it is kept by the server in the same transaction as every
append. What can still go wrong is that it is missing (dropped, or detached on purpose) or
invalid (an interrupted ``CREATE INDEX CONCURRENTLY`` or ``REINDEX`` leaves it so, and the
planner then ignores it). ``status`` reports those from the catalog; ``rebuild`` drops
whatever is there and builds it again from ``messages``, never touching a message.

Search ranks like FTS5's bm25 in spirit: ``ts_rank`` with length normalization (a short
message that repeats the words beats a long one that mentions them once), ties broken by
message id. As on SQLite, a search without the index is refused with the advice to run
``hermes-actors db rebuild-fts`` rather than scanning every message.
"""

from __future__ import annotations

import json
from typing import Any

from hermes_actors.errors import StoreError
from hermes_actors.store.backends.postgres.ftsquery import QuerySyntaxError, to_tsquery_sql
from hermes_actors.store.backends.postgres.schema import FTS_DDL, FTS_INDEX, FTS_VECTOR
from hermes_actors.store.transcript import public_message

__all__ = ["FTS_STATES", "detach", "rebuild", "search", "status"]

#: What :func:`status` answers.
FTS_STATES = ("ok", "missing", "corrupt")

#: ``ts_rank`` normalization 1: the rank divided by 1 + log(document length).
_RANK = 1

_INDEX_STATE = (
    "SELECT i.indisvalid AND i.indisready FROM pg_index AS i"
    " WHERE i.indexrelid = to_regclass(%s)"
)


def status(cur: Any) -> str:
    """``"ok"``, ``"missing"`` (no index) or ``"corrupt"`` (present but not usable)."""
    row = cur.execute(_INDEX_STATE, (FTS_INDEX,)).fetchone()
    if row is None:
        return "missing"
    return "ok" if row[0] else "corrupt"


def detach(conn: Any) -> None:
    """Drop the index; messages are untouched and appends keep working."""
    conn.execute(f"DROP INDEX IF EXISTS {FTS_INDEX}")


def rebuild(conn: Any) -> None:
    """Drop whatever is left of the index and build it again from ``messages``."""
    with conn.transaction():
        conn.execute(f"DROP INDEX IF EXISTS {FTS_INDEX}")
        conn.execute(FTS_DDL)


def search(cur: Any, query: str, limit: int) -> list[dict[str, Any]]:
    """Messages matching the FTS5-syntax ``query``, best match first.

    A malformed query raises :class:`StoreError` naming the query; a missing or unusable
    index raises :class:`StoreError` telling the operator to run ``hermes-actors db
    rebuild-fts``.
    """
    if not isinstance(query, str) or not query.strip():
        raise StoreError("search query must be a non-empty string")
    try:
        match, params = to_tsquery_sql(query)
    except QuerySyntaxError as exc:
        raise StoreError(f"invalid search query {query!r}: {exc}") from None
    state = status(cur)
    if state != "ok":
        raise StoreError(f"full-text search is unavailable (index {state}); "
                         "run `hermes-actors db rebuild-fts`")
    sql = (
        "SELECT id, session_id, role, content, tool_name, tool_calls, timestamp, token_count"
        f" FROM (SELECT m.*, ts_rank({FTS_VECTOR}, query.q, {_RANK}) AS rank"
        f" FROM messages AS m, (SELECT {match} AS q) AS query"
        f" WHERE {FTS_VECTOR} @@ query.q) AS hits"
        " ORDER BY rank DESC, id LIMIT %s"
    )
    rows = cur.execute(sql, (*params, max(1, int(limit)))).fetchall()
    out = []
    for msg_id, session_id, role, content, tool_name, tool_calls, ts, tokens in rows:
        message = public_message(
            role, content, tool_name, json.loads(tool_calls) if tool_calls else None, ts, tokens)
        out.append({"id": msg_id, "session_id": session_id, **message})
    return out
