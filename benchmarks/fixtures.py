"""Fast fixture databases: many stored sessions written with raw ``sqlite3`` in the real schema.

``SessionDB`` creates the schema (so the fixture is exactly what the gateway opens); the
rows then go in with ``executemany`` in one transaction and ``synchronous=OFF``, because a
fixture of 100,000 sessions built through the store would take minutes and measure nothing.
Entries are real ``SessionEntry.to_dict()`` JSON, varied per session from one template.
"""

from __future__ import annotations

import copy
import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["FIXTURE_COLUMNS", "Fixture", "FixtureRows", "build_state_db", "dm_key", "dm_source",
           "fixture_rows", "open_raw"]

_T0 = 1_700_000_000.0


def dm_source(n: int, platform: str = "telegram") -> Any:
    """The ``SessionSource`` of session ``n``: a DM with chat ``n`` (Telegram unless
    ``platform`` says otherwise)."""
    from hermes_actors import SessionSource

    return SessionSource(platform, chat_id=str(n), user_id=f"u{n}", user_name=f"user {n}")


def dm_key(n: int, platform: str = "telegram") -> str:
    """The session key of :func:`dm_source` ``(n, platform)`` (checked against the key
    builder)."""
    return f"agent:main:{platform}:dm:{n}"


def open_raw(path: Path, *, synchronous: str = "NORMAL") -> sqlite3.Connection:
    """A raw connection with the store's pragmas (WAL, foreign keys), autocommit mode."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


class Fixture(NamedTuple):
    """What :func:`build_state_db` wrote."""

    #: The ``state.db`` path.
    path: Path
    #: Sessions stored.
    sessions: int
    #: Turn markers set (the first ``markers`` sessions).
    markers: int
    #: Marked sessions whose reply was persisted (recovery records it in the ledger).
    replied: int


def _template(now: float, platform: str = "telegram") -> dict[str, Any]:
    from hermes_actors.model.entry import SessionEntry
    from hermes_actors.model.keys import build_session_key
    from hermes_actors.model.timeutil import from_epoch
    from hermes_actors.store import lifecycle
    from hermes_actors.store.routing import FLAG_FIELDS

    src = dm_source(0, platform)
    assert build_session_key(src) == dm_key(0, platform), "the fixture's key pattern drifted"
    entry = lifecycle.fresh_entry(dm_key(0, platform), src, from_epoch(now))
    assert isinstance(entry, SessionEntry)
    data = entry.to_dict()
    for name in FLAG_FIELDS:  # stored as columns, not in the entry text
        del data[name]
    return data


class FixtureRows(NamedTuple):
    """The rows of a fixture, in the column order of :data:`FIXTURE_COLUMNS`."""

    sessions: list[tuple[Any, ...]]
    routing: list[tuple[Any, ...]]
    messages: list[tuple[Any, ...]]


#: The columns each table of :class:`FixtureRows` fills.
FIXTURE_COLUMNS = {
    "sessions": ("id", "session_key", "source", "started_at", "message_count"),
    "routing": ("session_key", "entry", "updated_at", "active_turn_token",
                "active_turn_started_at"),
    "messages": ("session_id", "role", "content", "timestamp", "turn_token", "is_reply"),
}


def fixture_rows(sessions: int, *, markers: int = 0, replied: int = 0,
                 now: float | None = None, numbers: list[int] | None = None,
                 platform: str = "telegram") -> FixtureRows:
    """``sessions`` DM sessions; the first ``markers`` have a fresh turn marker and a
    persisted user message, the first ``replied`` of those also a persisted final reply
    (``is_reply`` as 0/1). The sessions are those of chats ``0 .. sessions - 1``, or of
    the chats ``numbers`` lists (its first ``sessions``), on ``platform``."""
    now = _T0 if now is None else now
    template = _template(now, platform)
    chats = list(range(sessions)) if numbers is None else list(numbers[:sessions])
    sessions_rows, routing_rows, message_rows = [], [], []
    for i, n in enumerate(chats):
        entry = copy.deepcopy(template)
        key, sid = dm_key(n, platform), f"20231114_221320_{n:08x}"
        entry["session_key"], entry["session_id"] = key, sid
        entry["origin"]["chat_id"] = str(n)
        entry["origin"]["user_id"] = f"u{n}"
        entry["origin"]["user_name"] = f"user {n}"
        entry["display_name"] = f"user {n}"
        count = 0
        token = started = None
        if i < markers:
            token, started = uuid.UUID(int=n + 1).hex, now - 60.0
            message_rows.append((sid, "user", f"question {n}", now - 60.0, token, 0))
            count = 1
            if i < replied:
                message_rows.append((sid, "assistant", f"answer {n}", now - 30.0, token, 1))
                count = 2
        sessions_rows.append((sid, key, json.dumps(entry["origin"]), now - 3600.0, count))
        routing_rows.append((key, json.dumps(entry, ensure_ascii=False), now - 3600.0, token,
                             started))
    return FixtureRows(sessions_rows, routing_rows, message_rows)


def _insert(table: str) -> str:
    columns = FIXTURE_COLUMNS[table]
    return (f"INSERT INTO {table} ({', '.join(columns)})"
            f" VALUES ({', '.join('?' * len(columns))})")


def build_state_db(home: Path, sessions: int, *, markers: int = 0, replied: int = 0,
                   now: float | None = None) -> Fixture:
    """Write ``<home>/state.db`` with the rows of :func:`fixture_rows`."""
    from hermes_actors.store import SessionDB

    home.mkdir(parents=True, exist_ok=True)
    path = home / "state.db"
    SessionDB(path).close()
    rows = fixture_rows(sessions, markers=markers, replied=replied, now=now)
    conn = open_raw(path, synchronous="OFF")
    try:
        conn.execute("BEGIN IMMEDIATE")
        for table, table_rows in zip(FIXTURE_COLUMNS, rows, strict=True):
            conn.executemany(_insert(table), table_rows)
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return Fixture(path, sessions, min(markers, sessions), min(replied, markers, sessions))
