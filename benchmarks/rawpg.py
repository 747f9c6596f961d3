"""The PostgreSQL baselines written with raw psycopg: the turn bound, the recovery fixture
and the raw read of recovery's rows.

**The raw bound** (:func:`raw_turn_bound`): the rows one turn writes on PostgreSQL, in the
backend's schema (the same migration, full-text index included), batched as well as psycopg
allows. Per turn, the effects of the backend's hot path (``operations.py``): the inbox row
(accept); the routing flag columns that set the turn marker, the user message and the
``message_count`` bump, the inbox consumption (begin); the assistant message and its bump,
the ledger row, its claim (``attempting``) and the flag columns that clear the marker
(reply + ledger record); the ledger's ``delivered`` (finish); and, for a session's first
turn, its ``sessions`` and routing rows. The same rows as the raw sqlite3 bound
(:mod:`benchmarks.rawsql`), from the same prepared payloads. Every statement is sent with
``executemany`` over a thousand turns per transaction, and the whole transaction (BEGIN,
the twelve ``executemany``, COMMIT) in one pipeline: psycopg sends the statements without
waiting for their answers, so a transaction of 12,000 statements costs a handful of round
trips. The server's settings are the run's (``synchronous_commit`` as configured).

**The fixture** (:func:`build_fixture`): :func:`benchmarks.fixtures.fixture_rows` written
with ``COPY`` into the backend's schema, counted afterwards (a shortfall fails the run) and
vacuumed and analysed, as a database a gateway has run on for a while would be.

**The raw read** (:data:`RAW_READ`): what a bare ``python`` with psycopg reads to know what
recovery needs: every routing row, the in-flight turns' messages, the pending inbox and
ledger rows.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from benchmarks.fixtures import FIXTURE_COLUMNS, dm_key, fixture_rows
from benchmarks.pgserver import ServerCPU
from benchmarks.rawsql import prepare_turns

__all__ = ["RAW_READ", "RawBound", "build_fixture", "connect_migrated", "raw_turn_bound"]

_SQL = {
    "session": "INSERT INTO sessions (id, session_key, source, started_at)"
               " VALUES (%s, %s, %s, %s)",
    "routing": "INSERT INTO routing (session_key, entry, updated_at) VALUES (%s, %s, %s)"
               " ON CONFLICT (session_key) DO UPDATE SET entry = excluded.entry,"
               " updated_at = excluded.updated_at",
    "flags": "UPDATE routing SET active_turn_token = %s, active_turn_started_at = %s,"
             " active_turn_internal = false, resume_pending = false, suspended = false,"
             " updated_at = %s WHERE session_key = %s",
    "inbox": "INSERT INTO inbox (event_id, session_key, payload, internal, received_at)"
             " VALUES (%s, %s, %s, false, %s)",
    "message": "INSERT INTO messages (session_id, role, content, timestamp, turn_token,"
               " is_reply) VALUES (%s, %s, %s, %s, %s, %s)",
    "count": "UPDATE sessions SET message_count = message_count + 1 WHERE id = %s",
    "consume": "UPDATE inbox SET consumed_at = %s, consumed_reason = 'turn'"
               " WHERE event_id = %s AND consumed_at IS NULL",
    "ledger": "INSERT INTO deliveries (obligation_id, session_key, platform, chat_id,"
              " thread_id, content, kind, state, attempts, created_at, updated_at)"
              " VALUES (%s, %s, 'telegram', %s, NULL, %s, 'reply', 'pending', 0, %s, %s)",
    "attempt": "UPDATE deliveries SET state = 'attempting', attempts = attempts + 1,"
               " owner_node = %s, owner_boot = %s, updated_at = %s WHERE obligation_id = %s",
    "finish": "UPDATE deliveries SET state = 'delivered', updated_at = %s"
              " WHERE obligation_id = %s",
}

RAW_READ = """
import sys, psycopg
conn = psycopg.connect(sys.argv[1], autocommit=True)
routing = conn.execute("SELECT session_key, entry FROM routing").fetchall()
turns = conn.execute("SELECT session_id, role, content, turn_token, is_reply FROM messages"
                     " WHERE turn_token IS NOT NULL").fetchall()
inbox = conn.execute("SELECT session_key, payload FROM inbox WHERE consumed_at IS NULL"
                     " ORDER BY seq").fetchall()
ledger = conn.execute("SELECT * FROM deliveries WHERE state IN"
                      " ('pending', 'attempting', 'failed')").fetchall()
print(len(routing), len(turns), len(inbox), len(ledger), flush=True)
"""


class RawBound(NamedTuple):
    """What :func:`raw_turn_bound` measured."""

    #: Turns per second.
    turns_per_s: float
    #: The server's CPU per turn, µs (NaN when its processes are not visible here).
    server_cpu_us: float
    #: This process's CPU per turn (psycopg, building the parameter lists), µs.
    client_cpu_us: float


def connect_migrated(dsn: str) -> Any:
    """An autocommit connection to ``dsn``, its schema created as the backend creates it."""
    import psycopg

    from hermes_actors.store.backends.postgres.schema import migrate

    conn = psycopg.connect(dsn, autocommit=True)
    migrate(conn, where="the benchmark's database")
    return conn


def raw_turn_bound(dsn: str, sessions: int, messages: int, *, batch: int = 1000) -> RawBound:
    """The raw bound (module doc) for ``sessions`` x ``messages`` into the empty ``dsn``."""
    now, sids, stored, rounds = prepare_turns(sessions, messages)
    conn = connect_migrated(dsn)
    sql = _SQL
    server = ServerCPU(dsn)
    cpu_before, server_before = time.process_time(), server.seconds()
    started = time.perf_counter()
    try:
        cur = conn.cursor()
        for m, turns in enumerate(rounds):
            for lo in range(0, len(turns), batch):
                chunk = turns[lo:lo + batch]
                with conn.pipeline(), conn.transaction():
                    if m == 0:
                        cur.executemany(sql["session"], [
                            (sids[n], dm_key(n), "{}", now) for n, *_ in chunk])
                        cur.executemany(sql["routing"], [(dm_key(n), stored[n], now)
                                                         for n, *_ in chunk])
                    cur.executemany(sql["inbox"], [(e, dm_key(n), p, now)
                                                   for n, e, p, *_ in chunk])
                    cur.executemany(sql["flags"], [(tok, now, now, dm_key(n))
                                                   for n, _e, _p, tok, *_ in chunk])
                    cur.executemany(sql["message"], [
                        (sids[n], "user", text, now, tok, False)
                        for n, _e, _p, tok, _o, text in chunk])
                    cur.executemany(sql["count"], [(sids[n],) for n, *_ in chunk])
                    cur.executemany(sql["consume"], [(now, e) for _n, e, *_ in chunk])
                    cur.executemany(sql["message"], [
                        (sids[n], "assistant", "echo: " + text, now, tok, True)
                        for n, _e, _p, tok, _o, text in chunk])
                    cur.executemany(sql["count"], [(sids[n],) for n, *_ in chunk])
                    cur.executemany(sql["ledger"], [
                        (o, dm_key(n), str(n), "echo: " + text, now, now)
                        for n, _e, _p, _t, o, text in chunk])
                    cur.executemany(sql["attempt"], [("node", "boot", now, o)
                                                     for *_, o, _text in chunk])
                    cur.executemany(sql["flags"], [(None, None, now, dm_key(n))
                                                   for n, *_ in chunk])
                    cur.executemany(sql["finish"], [(now, o) for *_, o, _text in chunk])
        elapsed = time.perf_counter() - started
        client = time.process_time() - cpu_before
        server_s = server.seconds() - server_before
        _check_turns(conn, sessions, messages)
    finally:
        conn.close()
    turns_total = sessions * messages
    return RawBound(turns_total / elapsed, server_s / turns_total * 1e6,
                    client / turns_total * 1e6)


def _check_turns(conn: Any, sessions: int, messages: int) -> None:
    """Every row the bound claims to have written is there, in its final state."""
    turns = sessions * messages

    def one(sql: str) -> int:
        row = conn.execute(sql).fetchone()
        return int(row[0]) if row else -1

    found = {
        "sessions": one("SELECT count(*) FROM sessions"),
        "messages": one("SELECT count(*) FROM messages"),
        "consumed inbox rows": one("SELECT count(*) FROM inbox WHERE consumed_at IS NOT NULL"),
        "delivered ledger rows": one("SELECT count(*) FROM deliveries"
                                     " WHERE state = 'delivered'"),
        "unmarked routing rows": one("SELECT count(*) FROM routing"
                                     " WHERE active_turn_token IS NULL"),
    }
    want = {"sessions": sessions, "messages": 2 * turns, "consumed inbox rows": turns,
            "delivered ledger rows": turns, "unmarked routing rows": sessions}
    if found != want:
        raise RuntimeError(f"the raw psycopg bound wrote {found}, not {want}")


def build_fixture(dsn: str, sessions: int, *, markers: int, replied: int,
                  now: float, **chats: Any) -> None:
    """Write :func:`~benchmarks.fixtures.fixture_rows` into the empty ``dsn`` with ``COPY``
    (``chats``: its ``numbers`` and ``platform``); check the counts; vacuum and analyse."""
    rows = fixture_rows(sessions, markers=markers, replied=replied, now=now, **chats)
    conn = connect_migrated(dsn)
    try:
        with conn.transaction():
            conn.execute("SET LOCAL synchronous_commit = off")
            cur = conn.cursor()
            for table, table_rows in zip(FIXTURE_COLUMNS, rows, strict=True):
                columns = FIXTURE_COLUMNS[table]
                with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                    flag = columns.index("is_reply") if "is_reply" in columns else -1
                    for row in table_rows:
                        if flag >= 0:  # 0/1 in the shared rows, a boolean here
                            row = (*row[:flag], bool(row[flag]), *row[flag + 1:])
                        copy.write_row(row)
        for table, table_rows in zip(FIXTURE_COLUMNS, rows, strict=True):
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            if row is None or row[0] != len(table_rows):
                raise RuntimeError(f"the fixture's {table} holds {row and row[0]} rows, "
                                   f"not {len(table_rows)}")
        marked = conn.execute(
            "SELECT count(*) FROM routing WHERE active_turn_token IS NOT NULL").fetchone()
        if marked is None or marked[0] != min(markers, sessions):
            raise RuntimeError(f"the fixture holds {marked and marked[0]} markers, "
                               f"not {min(markers, sessions)}")
        for table in FIXTURE_COLUMNS:
            conn.execute(f"VACUUM (ANALYZE) {table}")
    finally:
        conn.close()
