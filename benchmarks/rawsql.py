"""Two persistence baselines written with raw ``sqlite3``, for the rows one turn writes.

**The raw bound** (:func:`raw_turn_bound`): the physical limit of this machine for the
durable rows of a turn, batched as well as SQLite allows. Per turn, the same rows the
runtime writes: the inbox row; the routing flag columns that set the turn marker; the user
message (FTS trigger on) and the ``message_count`` bump; the inbox consumption; the
assistant message and its bump; the ledger row and its two state changes (``attempting``,
``delivered``); the flag columns that clear the marker; and, for a session's first turn,
its ``sessions`` and routing rows (the entry text, flags as columns). Every payload (event JSON, entry JSON) is serialised
before the clock starts, statements are prepared once and run with ``executemany`` over a
thousand turns per transaction, with the store's pragmas (WAL, ``synchronous=NORMAL``).

**The reference pattern** (:func:`reference_turns`): the persistence of the reference
gateway, re-created from its design document: routing lives in memory and every routing
change rewrites the whole ``sessions.json`` (``to_dict`` of every entry, temp file, fsync,
``os.replace``); every transcript row and every ledger change is its own transaction (FTS
trigger on). Per turn that is three rewrites (activity touch, marker set, marker clear) and
five commits (two transcript rows, ledger record, attempt, outcome). It has no durable
inbox, so it writes less than our runtime per turn; the comparison is conservative.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any, NamedTuple

from benchmarks.fixtures import dm_key, dm_source, open_raw

__all__ = ["PreparedTurns", "prepare_turns", "raw_turn_bound", "reference_change",
           "reference_turns"]

_SQL = {
    "session": "INSERT INTO sessions (id, session_key, source, started_at) VALUES (?, ?, ?, ?)",
    "routing": "INSERT INTO routing (session_key, entry, updated_at) VALUES (?, ?, ?)"
               " ON CONFLICT (session_key) DO UPDATE SET entry = excluded.entry,"
               " updated_at = excluded.updated_at",
    "flags": "UPDATE routing SET active_turn_token = ?, active_turn_started_at = ?,"
             " active_turn_internal = 0, resume_pending = 0, suspended = 0, updated_at = ?"
             " WHERE session_key = ?",
    "inbox": "INSERT INTO inbox (event_id, session_key, payload, internal, received_at)"
             " VALUES (?, ?, ?, 0, ?)",
    "message": "INSERT INTO messages (session_id, role, content, timestamp, turn_token,"
               " is_reply) VALUES (?, ?, ?, ?, ?, ?)",
    "count": "UPDATE sessions SET message_count = message_count + 1 WHERE id = ?",
    "consume": "UPDATE inbox SET consumed_at = ?, consumed_reason = 'turn'"
               " WHERE event_id = ? AND consumed_at IS NULL",
    "ledger": "INSERT INTO deliveries (obligation_id, session_key, platform, chat_id,"
              " thread_id, content, kind, state, attempts, created_at, updated_at)"
              " VALUES (?, ?, 'telegram', ?, NULL, ?, 'reply', 'pending', 0, ?, ?)",
    "attempt": "UPDATE deliveries SET state = 'attempting', attempts = attempts + 1,"
               " owner_node = ?, owner_boot = ?, updated_at = ? WHERE obligation_id = ?",
    "finish": "UPDATE deliveries SET state = 'delivered', updated_at = ?"
              " WHERE obligation_id = ?",
}


def _entries(sessions: int, now: float, texts: bool = True) -> tuple[list[Any], list[str]]:
    """Per session: its real ``SessionEntry``, and (``texts``) its stored entry text (the
    JSON without the flag columns)."""
    from dataclasses import replace

    from hermes_actors.model.timeutil import from_epoch
    from hermes_actors.store import lifecycle
    from hermes_actors.store.routing import entry_text

    when = from_epoch(now)
    objects, stored = [], []
    for n in range(sessions):
        # a deterministic id: fresh ids carry 32 random bits, and among 10,000 sessions
        # created in one second a collision is likely enough to break a run now and then
        entry = replace(lifecycle.fresh_entry(dm_key(n), dm_source(n), when),
                        session_id=f"{when:%Y%m%d_%H%M%S}_{n:08x}")
        objects.append(entry)
        if texts:
            stored.append(entry_text(entry))
    return objects, stored


class PreparedTurns(NamedTuple):
    """The payloads of ``sessions`` x ``messages`` turns, serialised before any clock runs."""

    #: The time every row is stamped with.
    now: float
    #: Per session: its id.
    session_ids: list[str]
    #: Per session: its stored routing entry text.
    entries: list[str]
    #: Per round (message number): per session ``(n, event_id, payload, token,
    #: obligation_id, text)``.
    rounds: list[list[tuple[int, str, str, str, str, str]]]


def prepare_turns(sessions: int, messages: int) -> PreparedTurns:
    """The rows' payloads of the raw bounds (SQLite's here, PostgreSQL's in ``rawpg``)."""
    from hermes_actors import MessageEvent

    now = time.time()
    objects, stored = _entries(sessions, now)
    sources = [dm_source(n) for n in range(sessions)]
    rounds = []
    for m in range(messages):
        turns = []
        for n in range(sessions):
            event = MessageEvent(source=sources[n], text=f"message {m} of {n}")
            payload = json.dumps(event.to_dict(), ensure_ascii=False)
            token, oid = uuid.uuid4().hex, uuid.uuid4().hex[:24]
            turns.append((n, event.event_id, payload, token, oid, event.text))
        rounds.append(turns)
    return PreparedTurns(now, [e.session_id for e in objects], stored, rounds)


def raw_turn_bound(home: Path, sessions: int, messages: int, *, batch: int = 1000) -> float:
    """Turns per second of the raw bound (module doc) for ``sessions`` x ``messages``."""
    from hermes_actors.store import SessionDB

    home.mkdir(parents=True, exist_ok=True)
    path = home / "state.db"
    SessionDB(path).close()
    now, sids, stored, rounds = prepare_turns(sessions, messages)
    conn = open_raw(path)
    started = time.perf_counter()
    for m, turns in enumerate(rounds):
        for lo in range(0, len(turns), batch):
            chunk = turns[lo:lo + batch]
            conn.execute("BEGIN IMMEDIATE")
            if m == 0:
                conn.executemany(_SQL["session"], [
                    (sids[n], dm_key(n), "{}", now) for n, *_ in chunk])
                conn.executemany(_SQL["routing"], [(dm_key(n), stored[n], now)
                                                   for n, *_ in chunk])
            conn.executemany(_SQL["inbox"], [(e, dm_key(n), p, now)
                                              for n, e, p, *_ in chunk])
            conn.executemany(_SQL["flags"], [(tok, now, now, dm_key(n))
                                             for n, _e, _p, tok, *_ in chunk])
            conn.executemany(_SQL["message"], [
                (sids[n], "user", text, now, tok, 0)
                for n, _e, _p, tok, _o, text in chunk])
            conn.executemany(_SQL["count"], [(sids[n],) for n, *_ in chunk])
            conn.executemany(_SQL["consume"], [(now, e) for _n, e, *_ in chunk])
            conn.executemany(_SQL["message"], [
                (sids[n], "assistant", "echo: " + text, now, tok, 1)
                for n, _e, _p, tok, _o, text in chunk])
            conn.executemany(_SQL["count"], [(sids[n],) for n, *_ in chunk])
            conn.executemany(_SQL["ledger"], [
                (o, dm_key(n), str(n), "echo: " + text, now, now)
                for n, _e, _p, _t, o, text in chunk])
            conn.executemany(_SQL["attempt"], [("node", "boot", now, o)
                                               for *_, o, _text in chunk])
            conn.executemany(_SQL["flags"], [(None, None, now, dm_key(n)) for n, *_ in chunk])
            conn.executemany(_SQL["finish"], [(now, o) for *_, o, _text in chunk])
            conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return sessions * messages / elapsed


def _save_mirror(path: Path, entries: dict[str, Any]) -> None:
    """The reference's ``_save()``: every entry's ``to_dict``, temp file, fsync, replace."""
    data = json.dumps({k: e.to_dict() for k, e in entries.items()}, ensure_ascii=False)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def reference_turns(home: Path, sessions: int, *, budget_s: float, max_turns: int,
                    min_turns: int = 3) -> float:
    """Turns per second of the reference pattern (module doc) with ``sessions`` stored;
    runs turns round-robin until ``budget_s`` seconds or ``max_turns`` turns."""
    from dataclasses import replace

    from hermes_actors.model.timeutil import from_epoch
    from hermes_actors.store import SessionDB

    home.mkdir(parents=True, exist_ok=True)
    db_path, mirror = home / "state.db", home / "sessions.json"
    SessionDB(db_path).close()
    now = time.time()
    objects, _ = _entries(sessions, now, texts=False)
    entries = {e.session_key: e for e in objects}
    conn = open_raw(db_path)
    conn.execute("BEGIN")
    conn.executemany(_SQL["session"], [(e.session_id, e.session_key, "{}", now) for e in objects])
    conn.execute("COMMIT")
    _save_mirror(mirror, entries)

    def commit(sql: str, params: tuple, then: tuple | None = None) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(sql, params)
        if then is not None:
            conn.execute(*then)
        conn.execute("COMMIT")

    turns = 0
    started = time.perf_counter()
    while turns < max_turns:
        n = turns % sessions
        key, entry = dm_key(n), entries[dm_key(n)]
        sid, token, oid = entry.session_id, uuid.uuid4().hex, uuid.uuid4().hex[:24]
        stamp = from_epoch(time.time())
        entries[key] = entry = replace(entry, updated_at=stamp)            # touch
        _save_mirror(mirror, entries)
        entries[key] = entry = replace(entry, active_turn_token=token,     # marker set
                                       active_turn_started_at=stamp)
        _save_mirror(mirror, entries)
        commit(_SQL["message"], (sid, "user", f"message {turns}", now, token, 0),
               (_SQL["count"], (sid,)))
        commit(_SQL["message"], (sid, "assistant", f"echo {turns}", now, token, 1),
               (_SQL["count"], (sid,)))
        commit(_SQL["ledger"], (oid, key, str(n), f"echo {turns}", now, now))
        entries[key] = replace(entry, active_turn_token=None,              # marker clear
                               active_turn_started_at=None)
        _save_mirror(mirror, entries)
        commit(_SQL["attempt"], (1, now, now, oid))
        commit(_SQL["finish"], (now, oid))
        turns += 1
        if turns >= min_turns and time.perf_counter() - started >= budget_s:
            break
    elapsed = time.perf_counter() - started
    conn.close()
    return turns / elapsed


def reference_change(home: Path, sessions: int, *, repeats: int) -> float:
    """Seconds of one routing change in the reference pattern with ``sessions`` stored
    (one entry replaced, the whole ``sessions.json`` rewritten; median of ``repeats``)."""
    import statistics
    from dataclasses import replace

    from hermes_actors.model.timeutil import from_epoch

    home.mkdir(parents=True, exist_ok=True)
    objects, _ = _entries(sessions, time.time(), texts=False)
    entries = {e.session_key: e for e in objects}
    mirror = home / "sessions.json"
    _save_mirror(mirror, entries)
    timings = []
    for i in range(repeats):
        key = dm_key(i % sessions)
        started = time.perf_counter()
        entries[key] = replace(entries[key], updated_at=from_epoch(time.time()))
        _save_mirror(mirror, entries)
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)
