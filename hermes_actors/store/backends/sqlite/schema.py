"""The SQLite schema of ``state.db``: DDL, forward migrations, FTS, and the peewee models.

The DDL is written out as SQL (frozen per migration) rather than generated from the models,
because a migration must mean the same thing forever while models follow the latest schema.
The models describe the latest schema and are what queries use; a test keeps the two in
step. Canonical tables are re-created ``IF NOT EXISTS`` on every open, so a lost table
(e.g. a dropped ``routing``) comes back empty and the store rebuilds it from the mirror.

``messages_fts`` is a derived full-text index (FTS5, external content on ``messages``, kept
by triggers). It is not re-created on open: detaching it is an operator's decision, undone
by ``rebuild_fts``. All times are epoch seconds (REAL), compared as numbers.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import peewee as pw
from playhouse.sqlite_ext import AutoIncrementField

from hermes_actors.errors import StoreError

__all__ = [
    "CANONICAL_DDL",
    "FTS_DDL",
    "FTS_SHADOW_TABLES",
    "FTS_TRIGGERS",
    "MIGRATIONS",
    "OUTBOX_DDL",
    "ROUTING_CLEAN_MARKS",
    "ROUTING_MAY_NEED_RECOVERY",
    "ROUTING_RECOVERY_DDL",
    "SCHEMA_VERSION",
    "Models",
    "bind_models",
    "migrate",
    "repair_canonical_tables",
]

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

#: ``(key prefix, clean mark)`` per field: every routing entry *without* a turn marker or a
#: resume flag, as the store writes it (one JSON encoder, default separators), contains
#: each clean mark. A row lacking a mark, or holding a key prefix twice (free-form
#: ``metadata`` may contain the same key), may need recovery.
ROUTING_CLEAN_MARKS = (
    ('"active_turn_token": ', '"active_turn_token": null'),
    ('"resume_pending": ', '"resume_pending": false'),
)


def _may_need_recovery_sql() -> str:
    """The test of :func:`~hermes_actors.store.entrymap.may_need_recovery` in SQL: a clean
    mark missing, or a key prefix found again after its first occurrence."""
    tests = []
    for prefix, clean in ROUTING_CLEAN_MARKS:
        tests.append(f"instr(entry, '{clean}') = 0")
        tests.append(f"instr(substr(entry, instr(entry, '{prefix}') + {len(prefix)}),"
                     f" '{prefix}') > 0")
    return " OR ".join(tests)


#: The same test in SQL (the ``WHERE`` of the ``routing_recovery`` index: a query with
#: exactly this text is answered from the index).
ROUTING_MAY_NEED_RECOVERY = _may_need_recovery_sql()
#: The ``routing_recovery`` partial index of the rows that may need recovery, so a start
#: finds 1,000 marked sessions among 100,000 without reading every row. Being an index on
#: the row's own text, it holds for rows written by any tool, not just by the store.
ROUTING_RECOVERY_INDEX = (
    "CREATE INDEX IF NOT EXISTS routing_recovery ON routing (session_key)"
    " WHERE " + ROUTING_MAY_NEED_RECOVERY
)
#: Migration 3 as released (frozen): the index without the repeated-key test.
_ROUTING_RECOVERY_V3 = (
    "CREATE INDEX IF NOT EXISTS routing_recovery ON routing (session_key)"
    " WHERE instr(entry, '\"active_turn_token\": null') = 0"
    " OR instr(entry, '\"resume_pending\": false') = 0",
)
#: Migration 4: the index re-created with today's test. A database migrated to 3 kept the
#: old index, which SQLite cannot use for today's query: every start read every row.
ROUTING_RECOVERY_DDL: tuple[str, ...] = (
    "DROP INDEX IF EXISTS routing_recovery",
    ROUTING_RECOVERY_INDEX,
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

#: Forward migrations; migration N brings ``PRAGMA user_version`` from N-1 to N.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    CANONICAL_DDL + FTS_DDL, OUTBOX_DDL, _ROUTING_RECOVERY_V3, ROUTING_RECOVERY_DDL,
    INGRESS_DDL, IN_REPLY_TO_DDL,
)
#: The schema version this code writes.
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(database: pw.Database) -> int:
    """Bring the schema to :data:`SCHEMA_VERSION`, one transaction per step.

    Raises :class:`StoreError` for a database written by a newer version (left untouched).
    Returns the version found before migrating.
    """
    found = database.execute_sql("PRAGMA user_version").fetchone()[0]
    if found > SCHEMA_VERSION:
        raise StoreError(
            f"state.db has schema version {found}, newer than this hermes_actors "
            f"supports ({SCHEMA_VERSION}); upgrade hermes_actors"
        )
    for number in range(found + 1, SCHEMA_VERSION + 1):
        with database.atomic():
            for statement in MIGRATIONS[number - 1]:
                database.execute_sql(statement)
            database.execute_sql(f"PRAGMA user_version = {number}")
    return found


def repair_canonical_tables(database: pw.Database) -> None:
    """Re-create canonical tables or indexes that were lost (a no-op when all exist)."""
    with database.atomic():
        for statement in (*CANONICAL_DDL, *OUTBOX_DDL, ROUTING_RECOVERY_INDEX):
            database.execute_sql(statement)
        # A re-created table lacks the columns later migrations added to it.
        for statement in (*INGRESS_DDL, *IN_REPLY_TO_DDL):
            if statement.startswith("ALTER TABLE "):
                table, _, column = statement[len("ALTER TABLE "):].partition(" ADD COLUMN ")
                present = {row[1] for row in
                           database.execute_sql(f"PRAGMA table_info({table})")}
                if column.split()[0] in present:
                    continue
            database.execute_sql(statement)


# -- models (latest schema; used for queries) -------------------------------------------------


class _Model(pw.Model):
    class Meta:
        legacy_table_names = False


class SessionRow(_Model):
    """One conversation: ``id`` is the ``session_id``."""

    id = pw.TextField(primary_key=True)
    session_key = pw.TextField(null=True)
    source = pw.TextField(null=True)
    started_at = pw.FloatField()
    ended_at = pw.FloatField(null=True)
    end_reason = pw.TextField(null=True)
    parent_session_id = pw.TextField(null=True)
    message_count = pw.IntegerField(default=0)
    input_tokens = pw.IntegerField(default=0)
    output_tokens = pw.IntegerField(default=0)
    last_prompt_tokens = pw.IntegerField(default=0)

    class Meta:
        table_name = "sessions"


class MessageRow(_Model):
    """One transcript message."""

    id = AutoIncrementField()
    session_id = pw.TextField()
    role = pw.TextField()
    content = pw.TextField()
    tool_name = pw.TextField(null=True)
    tool_calls = pw.TextField(null=True)
    timestamp = pw.FloatField()
    token_count = pw.IntegerField(null=True)
    turn_token = pw.TextField(null=True)
    is_reply = pw.IntegerField(default=0)

    class Meta:
        table_name = "messages"


class RoutingRow(_Model):
    """The current entry of one session key."""

    session_key = pw.TextField(primary_key=True)
    entry = pw.TextField()
    updated_at = pw.FloatField()

    class Meta:
        table_name = "routing"


class DeliveryRow(_Model):
    """One delivery obligation of the ledger (§7)."""

    obligation_id = pw.TextField(primary_key=True)
    session_key = pw.TextField()
    platform = pw.TextField()
    chat_id = pw.TextField(null=True)
    thread_id = pw.TextField(null=True)
    content = pw.TextField()
    kind = pw.TextField()
    state = pw.TextField()
    attempts = pw.IntegerField(default=0)
    owner_pid = pw.IntegerField(null=True)
    owner_started_at = pw.FloatField(null=True)
    created_at = pw.FloatField()
    updated_at = pw.FloatField()
    last_error = pw.TextField(null=True)
    in_reply_to = pw.TextField(null=True)

    class Meta:
        table_name = "deliveries"


class InboxRow(_Model):
    """One accepted inbound event (the durable inbox, §8)."""

    seq = AutoIncrementField()
    event_id = pw.TextField(unique=True)
    session_key = pw.TextField()
    payload = pw.TextField()
    internal = pw.IntegerField(default=0)
    received_at = pw.FloatField()
    consumed_at = pw.FloatField(null=True)
    consumed_reason = pw.TextField(null=True)
    ingress_key = pw.TextField(null=True)

    class Meta:
        table_name = "inbox"


class OutboxRow(_Model):
    """One reply waiting to be read by an HTTP client (the outbox, §17.32)."""

    cursor = AutoIncrementField()
    session_key = pw.TextField()
    platform = pw.TextField()
    chat_id = pw.TextField(null=True)
    thread_id = pw.TextField(null=True)
    text = pw.TextField()
    kind = pw.TextField()
    created_at = pw.FloatField()
    in_reply_to = pw.TextField(null=True)

    class Meta:
        table_name = "outbox"


MODELS = (SessionRow, MessageRow, RoutingRow, DeliveryRow, InboxRow, OutboxRow)


class Models(NamedTuple):
    """The models bound to one database (each ``SessionDB`` has its own set)."""

    Session: Any
    Message: Any
    Routing: Any
    Delivery: Any
    Inbox: Any
    Outbox: Any


def bind_models(database: pw.Database) -> Models:
    """Subclasses of the models bound to ``database``, leaving the module's models unbound.

    Binding per database (instead of ``Model.bind``) lets several databases be open at once,
    e.g. the gateway's and a read-only one in the CLI, without sharing class state.
    """
    bound = []
    for model in MODELS:
        meta = type("Meta", (), {"database": database, "table_name": model._meta.table_name})
        bound.append(type(model.__name__, (model,), {"Meta": meta, "__module__": __name__}))
    return Models(*bound)
