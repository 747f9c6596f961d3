"""peewee models of the PostgreSQL schema's latest form: the queries that vary by call.

peewee (>= 3.17, here 4.x) drives psycopg 3 itself (``PostgresqlDatabase`` picks it when
psycopg2 is absent), but its connection handling does not fit this backend: a connection
per thread (a greenlet under gevent, so one per session actor) taken under the database's
global lock, which deadlocks once a blocking pool is behind it. So connections come from
``psycopg_pool`` and peewee is the SQL dialect: the models below, bound to a connectionless
``PostgresqlDatabase``, build the statements whose shape depends on the call (the ledger's
filtered reads, prunes, one session's row) with ``query.sql()``, which run on a pooled
connection. The hot path (a turn's writes, recovery's reads) is prepared raw SQL, as on
SQLite: building a statement costs more than running it. A test keeps these models and the
DDL of :mod:`~hermes_actors.store.backends.postgres.schema` in step.
"""

from __future__ import annotations

from typing import Any

from hermes_actors.store.backends.peewee_import import pw

__all__ = ["DIALECT", "MODELS", "Delivery", "Inbox", "Message", "NodeState", "Outbox", "Routing",
           "Session", "Setting", "sql_of"]

#: The database the models are bound to: never connected, only asked for its SQL dialect.
DIALECT = pw.PostgresqlDatabase(None)


class _Model(pw.Model):
    class Meta:
        database = DIALECT
        legacy_table_names = False


class Session(_Model):
    """One conversation: ``id`` is the ``session_id``."""

    id = pw.TextField(primary_key=True)
    session_key = pw.TextField(null=True)
    source = pw.TextField(null=True)
    started_at = pw.DoubleField()
    ended_at = pw.DoubleField(null=True)
    end_reason = pw.TextField(null=True)
    parent_session_id = pw.TextField(null=True)
    message_count = pw.IntegerField(default=0)
    input_tokens = pw.BigIntegerField(default=0)
    output_tokens = pw.BigIntegerField(default=0)
    last_prompt_tokens = pw.BigIntegerField(default=0)

    class Meta:
        table_name = "sessions"


class Message(_Model):
    """One transcript message."""

    id = pw.BigAutoField()
    session_id = pw.TextField()
    role = pw.TextField()
    content = pw.TextField()
    tool_name = pw.TextField(null=True)
    tool_calls = pw.TextField(null=True)
    timestamp = pw.DoubleField()
    token_count = pw.IntegerField(null=True)
    turn_token = pw.TextField(null=True)
    is_reply = pw.BooleanField(default=False)

    class Meta:
        table_name = "messages"


class Routing(_Model):
    """The current entry of one session key: its JSON text and its flag columns."""

    session_key = pw.TextField(primary_key=True)
    entry = pw.TextField()
    updated_at = pw.DoubleField(null=True)
    active_turn_token = pw.TextField(null=True)
    active_turn_started_at = pw.DoubleField(null=True)
    active_turn_internal = pw.BooleanField(default=False)
    resume_pending = pw.BooleanField(default=False)
    suspended = pw.BooleanField(default=False)

    class Meta:
        table_name = "routing"


class Delivery(_Model):
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
    owner_node = pw.TextField(null=True)
    owner_boot = pw.TextField(null=True)
    created_at = pw.DoubleField()
    updated_at = pw.DoubleField()
    last_error = pw.TextField(null=True)
    in_reply_to = pw.TextField(null=True)

    class Meta:
        table_name = "deliveries"


class Inbox(_Model):
    """One accepted inbound event (the durable inbox, §8)."""

    seq = pw.BigAutoField()
    event_id = pw.TextField(unique=True)
    session_key = pw.TextField()
    payload = pw.TextField()
    internal = pw.BooleanField(default=False)
    received_at = pw.DoubleField()
    consumed_at = pw.DoubleField(null=True)
    consumed_reason = pw.TextField(null=True)
    ingress_key = pw.TextField(null=True)

    class Meta:
        table_name = "inbox"


class Outbox(_Model):
    """One reply waiting to be read by an HTTP client (the outbox, §17.32)."""

    cursor = pw.BigAutoField()
    session_key = pw.TextField()
    platform = pw.TextField()
    chat_id = pw.TextField(null=True)
    thread_id = pw.TextField(null=True)
    text = pw.TextField()
    kind = pw.TextField()
    created_at = pw.DoubleField()
    in_reply_to = pw.TextField(null=True)

    class Meta:
        table_name = "outbox"


class NodeState(_Model):
    """One named value of a node's state."""

    node_id = pw.TextField()
    name = pw.TextField()
    value = pw.TextField()

    class Meta:
        table_name = "node_state"
        primary_key = pw.CompositeKey("node_id", "name")


class Setting(_Model):
    """One setting of the database (the ``meta`` table)."""

    name = pw.TextField(primary_key=True)
    value = pw.TextField()

    class Meta:
        table_name = "meta"


#: Every model, in the order of ``schema.CANONICAL_TABLES``.
MODELS = (Session, Message, Routing, Delivery, Inbox, Outbox, NodeState, Setting)


def sql_of(query: Any) -> tuple[str, list[Any]]:
    """The statement and parameters of a peewee query, for a psycopg cursor."""
    sql, params = query.sql()
    return sql, list(params)
