"""The SQLite schema of ``state.db``: forward migrations, FTS, and the latest form.

The migrations are written out as SQL (frozen per migration), because a migration must mean
the same thing forever while the models follow the latest schema. The latest form is
generated from the one declaration of the tables (:mod:`hermes_actors.store.schema_models`,
whose models the queries use): a fresh database is made from it, and a test proves that the
frozen migrations build the same schema. Canonical tables are re-created ``IF NOT EXISTS`` on every open, so a lost table
(e.g. a dropped ``routing``) comes back empty and the store rebuilds it from the mirror.

``messages_fts`` is a derived full-text index (FTS5, external content on ``messages``, kept
by triggers). It is not re-created on open: detaching it is an operator's decision, undone
by ``rebuild_fts``. All times are epoch seconds (REAL), compared as numbers.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from hermes_actors.store.backends.peewee_import import pw
from hermes_actors.store.migrations import refuse_newer
from hermes_actors.store.schema_models import MODELS, ROUTING_FLAGGED, Models, latest_ddl
from hermes_actors.store.schema_models import bind as bind_models

__all__ = [
    "CANONICAL_DDL",
    "FLAGS_SCHEMA",
    "FTS_DDL",
    "FTS_SHADOW_TABLES",
    "FTS_TRIGGERS",
    "LATEST_DDL",
    "MIGRATIONS",
    "MODELS",
    "OUTBOX_DDL",
    "ROUTING_FLAGGED",
    "SCHEMA_VERSION",
    "Models",
    "Step",
    "bind_models",
    "migrate",
    "repair_canonical_tables",
]

#: One step of a migration: an SQL statement, or a function of the database.
Step = str | Callable[[pw.Database], None]

#: Tables and indexes holding canonical data (re-created if lost, never dropped by us).
CANONICAL_DDL: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS sessions (
        id TEXT NOT NULL PRIMARY KEY,
        session_key TEXT,
        source TEXT,
        started_at REAL NOT NULL,
        ended_at REAL,
        end_reason TEXT,
        parent_session_id TEXT,
        message_count INTEGER NOT NULL DEFAULT 0,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        last_prompt_tokens INTEGER NOT NULL DEFAULT 0)""",
    "CREATE INDEX IF NOT EXISTS sessions_session_key ON sessions (session_key)",
    """CREATE TABLE IF NOT EXISTS messages (
        id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL REFERENCES sessions (id),
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        tool_name TEXT,
        tool_calls TEXT,
        timestamp REAL NOT NULL,
        token_count INTEGER,
        turn_token TEXT,
        is_reply INTEGER NOT NULL DEFAULT 0)""",
    "CREATE INDEX IF NOT EXISTS messages_session_id ON messages (session_id)",
    "CREATE INDEX IF NOT EXISTS messages_turn_token ON messages (turn_token)"
    " WHERE turn_token IS NOT NULL",
    """CREATE TABLE IF NOT EXISTS routing (
        session_key TEXT NOT NULL PRIMARY KEY,
        entry TEXT NOT NULL,
        updated_at REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS deliveries (
        obligation_id TEXT NOT NULL PRIMARY KEY,
        session_key TEXT NOT NULL,
        platform TEXT NOT NULL,
        chat_id TEXT,
        thread_id TEXT,
        content TEXT NOT NULL,
        kind TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        owner_pid INTEGER,
        owner_started_at REAL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        last_error TEXT)""",
    "CREATE INDEX IF NOT EXISTS deliveries_state ON deliveries (state)",
    """CREATE TABLE IF NOT EXISTS inbox (
        seq INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
        event_id TEXT NOT NULL UNIQUE,
        session_key TEXT NOT NULL,
        payload TEXT NOT NULL,
        internal INTEGER NOT NULL DEFAULT 0,
        received_at REAL NOT NULL,
        consumed_at REAL,
        consumed_reason TEXT)""",
    "CREATE INDEX IF NOT EXISTS inbox_unconsumed ON inbox (seq) WHERE consumed_at IS NULL",
)

#: The FTS5 index and its triggers (raw SQL: peewee has no DDL for external-content FTS5).
FTS_DDL: tuple[str, ...] = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5("
    "content, content='messages', content_rowid='id')",
    """CREATE TRIGGER IF NOT EXISTS messages_ai AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END""",
    """CREATE TRIGGER IF NOT EXISTS messages_ad AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content)
            VALUES ('delete', old.id, old.content);
    END""",
    """CREATE TRIGGER IF NOT EXISTS messages_au AFTER UPDATE OF content ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content)
            VALUES ('delete', old.id, old.content);
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END""",
)
#: Names of the FTS triggers.
FTS_TRIGGERS = ("messages_ai", "messages_ad", "messages_au")
#: Shadow tables FTS5 keeps for ``messages_fts`` (``_content`` is unused: external content).
FTS_SHADOW_TABLES = (
    "messages_fts_data",
    "messages_fts_idx",
    "messages_fts_docsize",
    "messages_fts_config",
    "messages_fts_content",
)

#: The outbox (migration 2): replies to chats served over HTTP, read by cursor (§17.32).
#: ``cursor`` is AUTOINCREMENT so a cursor is never reused, even after old rows are pruned.
OUTBOX_DDL: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS outbox (
        cursor INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
        session_key TEXT NOT NULL,
        platform TEXT NOT NULL,
        chat_id TEXT,
        thread_id TEXT,
        text TEXT NOT NULL,
        kind TEXT NOT NULL,
        created_at REAL NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS outbox_chat ON outbox (platform, chat_id, cursor)",
)

#: Migration 3 as released (frozen): a partial index over the text of routing entries
#: that may carry a turn marker or a resume flag.
_ROUTING_RECOVERY_V3 = (
    "CREATE INDEX IF NOT EXISTS routing_recovery ON routing (session_key)"
    " WHERE instr(entry, '\"active_turn_token\": null') = 0"
    " OR instr(entry, '\"resume_pending\": false') = 0",
)
#: Migration 4 as released (frozen): the same index with a repeated-key test.
_ROUTING_RECOVERY_V4: tuple[str, ...] = (
    "DROP INDEX IF EXISTS routing_recovery",
    "CREATE INDEX IF NOT EXISTS routing_recovery ON routing (session_key) WHERE"
    " instr(entry, '\"active_turn_token\": null') = 0"
    " OR instr(substr(entry, instr(entry, '\"active_turn_token\": ') + 21),"
    " '\"active_turn_token\": ') > 0"
    " OR instr(entry, '\"resume_pending\": false') = 0"
    " OR instr(substr(entry, instr(entry, '\"resume_pending\": ') + 18),"
    " '\"resume_pending\": ') > 0",
)

#: Migration 5: exactly-once ingress. An inbound message's ``ingress_key`` (its platform,
#: chat, thread and platform ``message_id``) is unique among inbox rows, so the duplicate
#: check and the accept are one ``INSERT``; rows stay 7 days after they are consumed, which
#: is how long a retried or redelivered message is recognised.
INGRESS_DDL: tuple[str, ...] = (
    "ALTER TABLE inbox ADD COLUMN ingress_key TEXT",
    "CREATE UNIQUE INDEX IF NOT EXISTS inbox_ingress ON inbox (ingress_key)"
    " WHERE ingress_key IS NOT NULL",
)

#: Migration 6: what an answer answers. A delivery obligation and the outbox row it becomes
#: carry the ids of the inbound events they answer (space-separated), so a client that sent
#: a message can pick its own reply out of a chat's outbox (``send --wait``).
IN_REPLY_TO_DDL: tuple[str, ...] = (
    "ALTER TABLE deliveries ADD COLUMN in_reply_to TEXT",
    "ALTER TABLE outbox ADD COLUMN in_reply_to TEXT",
)

# -- the latest schema of the tables migration 7 rebuilt or added ------------------------------

#: ``routing`` with its flags as columns (:mod:`hermes_actors.store.routing`): recovery,
#: pruning and "who is mid-turn" are indexed queries, and a turn writes columns only.
ROUTING_TABLE = """CREATE TABLE IF NOT EXISTS {name} (
    session_key TEXT NOT NULL PRIMARY KEY,
    entry TEXT NOT NULL,
    updated_at REAL,
    active_turn_token TEXT,
    active_turn_started_at REAL,
    active_turn_internal INTEGER NOT NULL DEFAULT 0,
    resume_pending INTEGER NOT NULL DEFAULT 0,
    suspended INTEGER NOT NULL DEFAULT 0)"""
#: Migration 7's indexes of ``routing`` (frozen; the latest form is ``schema_models``').
ROUTING_INDEXES: tuple[str, ...] = (
    "CREATE INDEX IF NOT EXISTS routing_flagged ON routing (session_key)"
    " WHERE active_turn_token IS NOT NULL OR resume_pending = 1",
    "CREATE INDEX IF NOT EXISTS routing_activity ON routing (updated_at)",
)
#: ``deliveries`` owned by a gateway boot (node id, boot id) instead of a process id.
DELIVERIES_TABLE = """CREATE TABLE IF NOT EXISTS {name} (
    obligation_id TEXT NOT NULL PRIMARY KEY,
    session_key TEXT NOT NULL,
    platform TEXT NOT NULL,
    chat_id TEXT,
    thread_id TEXT,
    content TEXT NOT NULL,
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    owner_node TEXT,
    owner_boot TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    last_error TEXT,
    in_reply_to TEXT)"""
DELIVERIES_INDEXES = ("CREATE INDEX IF NOT EXISTS deliveries_state ON deliveries (state)",)
#: A node's state (restart counts, restart-storm boots, the clean-shutdown marker) and the
#: home's own settings (its node id).
NODE_DDL: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS node_state (
        node_id TEXT NOT NULL,
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (node_id, name))""",
    """CREATE TABLE IF NOT EXISTS meta (
        name TEXT NOT NULL PRIMARY KEY,
        value TEXT NOT NULL)""",
)


def _rebuild_routing(database: pw.Database) -> None:
    """Migration 7's data step: every routing row's flags move out of its JSON text into
    columns (a row that does not parse keeps its text, with no flags: the store skips it
    at first use, as before)."""
    from hermes_actors.store.routing import FLAG_FIELDS, NO_FLAGS, flags_from_data

    rows = database.execute_sql("SELECT session_key, entry, updated_at FROM routing").fetchall()
    database.execute_sql(ROUTING_TABLE.format(name="routing_v7"))
    converted = []
    for key, text, column_time in rows:
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            flags = flags_from_data(data)
            for name in FLAG_FIELDS:
                data.pop(name, None)
            text = json.dumps(data, ensure_ascii=False)
        else:
            flags = NO_FLAGS._replace(updated_at=column_time)
        converted.append((key, text, *flags))
    database.execute_sql("DROP TABLE routing")
    database.execute_sql("ALTER TABLE routing_v7 RENAME TO routing")
    columns = ", ".join(("session_key", "entry", *FLAG_FIELDS))
    cursor = database.cursor()
    cursor.executemany(f"INSERT INTO routing ({columns}) VALUES ({', '.join('?' * 8)})",
                       converted)
    for statement in ROUTING_INDEXES:
        database.execute_sql(statement)


def _rebuild_deliveries(database: pw.Database) -> None:
    """Migration 7: ledger rows are owned by a gateway boot; a row of the old owner columns
    (a process) is unowned, which is what a dead owner meant."""
    database.execute_sql(DELIVERIES_TABLE.format(name="deliveries_v7"))
    database.execute_sql(
        "INSERT INTO deliveries_v7 (obligation_id, session_key, platform, chat_id, thread_id,"
        " content, kind, state, attempts, created_at, updated_at, last_error, in_reply_to)"
        " SELECT obligation_id, session_key, platform, chat_id, thread_id, content, kind,"
        " state, attempts, created_at, updated_at, last_error, in_reply_to FROM deliveries")
    database.execute_sql("DROP TABLE deliveries")
    database.execute_sql("ALTER TABLE deliveries_v7 RENAME TO deliveries")
    for statement in DELIVERIES_INDEXES:
        database.execute_sql(statement)


#: Migration 8: the ids of the op lists applied last (``ops.ListId``), so a replayed list is
#: applied once. Only the latest ones are kept (``operations.KEPT_LIST_IDS``, pruned by
#: rowid): a replay can only be of a list in flight when the writer died, and nothing is
#: written here between that and the import of the degraded run's journal.
APPLIED_LISTS_DDL: tuple[str, ...] = (
    "CREATE TABLE IF NOT EXISTS applied_lists (list_id TEXT NOT NULL UNIQUE)",
)

#: Migration 7: routing flags as columns, ledger ownership by gateway boot, node state.
FLAGS_AND_NODES: tuple[Step, ...] = (_rebuild_routing, _rebuild_deliveries, *NODE_DDL)

#: Forward migrations; migration N brings ``PRAGMA user_version`` from N-1 to N. A step is
#: an SQL statement or a function of the database (run in the migration's transaction).
MIGRATIONS: tuple[tuple[Step, ...], ...] = (
    CANONICAL_DDL + FTS_DDL, OUTBOX_DDL, _ROUTING_RECOVERY_V3, _ROUTING_RECOVERY_V4,
    INGRESS_DDL, IN_REPLY_TO_DDL, FLAGS_AND_NODES, APPLIED_LISTS_DDL,
)
#: The schema version this code writes.
SCHEMA_VERSION = len(MIGRATIONS)
#: The first version with routing flags as columns and node state (migration 7).
FLAGS_SCHEMA = 7

#: Every canonical table and index in its latest form, generated from the one declaration
#: (:mod:`hermes_actors.store.schema_models`): what a fresh database is made of, and what
#: re-creates a lost table. ``applied_lists`` is SQLite's own (the writer process's).
LATEST_DDL: tuple[str, ...] = (*latest_ddl(bind_models(pw.SqliteDatabase(None))),
                               *APPLIED_LISTS_DDL)


def migrate(database: pw.Database) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION`, one transaction per step; a database with
    nothing in it is made in the latest form at once (:data:`LATEST_DDL` and the FTS index).

    Raises :class:`StoreError` for a database written by a newer version (left untouched).
    Returns the version found before migrating.
    """
    found = database.execute_sql("PRAGMA user_version").fetchone()[0]
    refuse_newer(found, SCHEMA_VERSION, "state.db")
    if found == 0 and not database.execute_sql("SELECT 1 FROM sqlite_master").fetchone():
        with database.atomic():
            for statement in (*LATEST_DDL, *FTS_DDL):
                database.execute_sql(statement)
            database.execute_sql(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return found
    for number in range(found + 1, SCHEMA_VERSION + 1):
        with database.atomic():
            for step in MIGRATIONS[number - 1]:
                if callable(step):
                    step(database)
                else:
                    database.execute_sql(step)
            database.execute_sql(f"PRAGMA user_version = {number}")
    return found


def repair_canonical_tables(database: pw.Database) -> None:
    """Re-create canonical tables or indexes that were lost (a no-op when all exist)."""
    with database.atomic():
        for statement in LATEST_DDL:
            database.execute_sql(statement)
