"""The SQL the database backends share, written once in SQLite's ``?`` style.

Both backends run these statements as they stand here; PostgreSQL's psycopg takes ``%s``
for a parameter, so its module converts each text once at import (:func:`pyformat`).
What differs (SQLite's ``IN (...)`` against PostgreSQL's ``= ANY(array)``, a claim decided
in one statement, ``RETURNING``) stays in each backend's ``operations`` module.
"""

from __future__ import annotations

__all__ = [
    "ACCEPT_EVENT",
    "ADD_TOKENS",
    "ADD_TOKENS_LAST",
    "DELETE_NODE_VALUE",
    "END_SESSION",
    "INGRESS_HOLDER",
    "INSERT_SESSION",
    "LEDGER_CLAIM",
    "LEDGER_RECORD",
    "LEDGER_RELEASE",
    "LEDGER_REOPEN",
    "LEDGER_STATE",
    "OUTBOX_APPEND",
    "OUTBOX_IMPORT",
    "PUT_NODE_VALUE",
    "PUT_ROUTING",
    "SET_ROUTING_FLAGS",
    "WITHDRAW_EVENT",
    "pyformat",
]


def pyformat(statement: str) -> str:
    """``statement`` with psycopg's ``%s`` for each ``?`` (none of these texts holds a
    literal ``?`` or ``%``)."""
    return statement.replace("?", "%s")


INSERT_SESSION = (
    "INSERT INTO sessions (id, session_key, source, started_at, parent_session_id) VALUES"
    " (?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING"
)
END_SESSION = "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL"
PUT_ROUTING = (
    'INSERT INTO "routing" (session_key, entry, active_turn_token, active_turn_started_at,'
    " active_turn_internal, resume_pending, suspended, updated_at) VALUES (?, ?, ?, ?, ?,"
    " ?, ?, ?) ON CONFLICT (session_key) DO UPDATE SET entry = excluded.entry,"
    " active_turn_token = excluded.active_turn_token, active_turn_started_at ="
    " excluded.active_turn_started_at, active_turn_internal ="
    " excluded.active_turn_internal, resume_pending = excluded.resume_pending, suspended"
    " = excluded.suspended, updated_at = excluded.updated_at"
)
SET_ROUTING_FLAGS = (
    'UPDATE "routing" SET active_turn_token = ?, active_turn_started_at = ?,'
    " active_turn_internal = ?, resume_pending = ?, suspended = ?, updated_at = ? WHERE"
    " session_key = ?"
)
#: Upserts one ``node_state`` value (also the import of a home's node files).
PUT_NODE_VALUE = (
    "INSERT INTO node_state (node_id, name, value) VALUES (?, ?, ?) ON CONFLICT (node_id,"
    " name) DO UPDATE SET value = excluded.value"
)
DELETE_NODE_VALUE = "DELETE FROM node_state WHERE node_id = ? AND name = ?"
ADD_TOKENS = (
    "UPDATE sessions SET input_tokens = input_tokens + ?, output_tokens = output_tokens +"
    " ? WHERE id = ?"
)
ADD_TOKENS_LAST = (
    "UPDATE sessions SET input_tokens = input_tokens + ?, output_tokens = output_tokens +"
    " ?, last_prompt_tokens = ? WHERE id = ?"
)
ACCEPT_EVENT = (
    "INSERT INTO inbox (event_id, session_key, payload, internal, received_at,"
    " ingress_key) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
INGRESS_HOLDER = "SELECT event_id FROM inbox WHERE ingress_key = ?"
WITHDRAW_EVENT = "DELETE FROM inbox WHERE event_id = ? AND consumed_at IS NULL"
LEDGER_RECORD = (
    "INSERT INTO deliveries (obligation_id, session_key, platform, chat_id, thread_id,"
    " content, kind, state, attempts, created_at, updated_at, in_reply_to) VALUES (?, ?,"
    " ?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?) ON CONFLICT (obligation_id) DO NOTHING"
)
#: ``ledger.released_state`` in SQL (the ``CASE`` reads ``attempts`` before the update).
LEDGER_RELEASE = (
    "UPDATE deliveries SET state = CASE WHEN attempts > 1 THEN 'failed' ELSE 'pending'"
    " END, attempts = attempts - 1, owner_node = NULL, owner_boot = NULL, updated_at = ?"
    " WHERE obligation_id = ? AND state = 'attempting' AND owner_node = ? AND owner_boot"
    " = ?"
)
LEDGER_REOPEN = (
    "UPDATE deliveries SET state = 'pending', attempts = 0, owner_node = NULL, owner_boot"
    " = NULL, last_error = NULL, updated_at = ? WHERE obligation_id = ? AND state IN"
    " ('failed', 'abandoned')"
)
#: A claim's update; each backend adds the condition under which it claims.
LEDGER_CLAIM = (
    "UPDATE deliveries SET state = 'attempting', attempts = attempts + 1, owner_node = ?,"
    " owner_boot = ?, updated_at = ? WHERE obligation_id = ?"
)
LEDGER_STATE = "SELECT state FROM deliveries WHERE obligation_id = ?"
#: PostgreSQL adds ``RETURNING cursor``; SQLite reads ``lastrowid``.
OUTBOX_APPEND = (
    "INSERT INTO outbox (session_key, platform, chat_id, thread_id, text, kind,"
    " created_at, in_reply_to) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
#: A row of degraded mode with the cursor it was read at (the counter continues above).
OUTBOX_IMPORT = (
    "INSERT INTO outbox (cursor, session_key, platform, chat_id, thread_id, text, kind,"
    " created_at, in_reply_to) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
