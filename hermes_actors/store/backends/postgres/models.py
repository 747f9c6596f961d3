"""The models of the tables bound to PostgreSQL's dialect: the queries that vary by call.

peewee (>= 3.17, here 4.x) drives psycopg 3 itself (``PostgresqlDatabase`` picks it when
psycopg2 is absent), but its connection handling does not fit this backend: a connection
per thread (a greenlet under gevent, so one per session actor) taken under the database's
global lock, which deadlocks once a blocking pool is behind it. So connections come from
``psycopg_pool`` and peewee is the SQL dialect: the models below, bound to a connectionless
``PostgresqlDatabase``, build the statements whose shape depends on the call (the ledger's
filtered reads, prunes, one session's row) with ``query.sql()``, which run on a pooled
connection. The hot path (a turn's writes, recovery's reads) is prepared raw SQL, as on
SQLite: building a statement costs more than running it. The latest DDL of
:mod:`~hermes_actors.store.backends.postgres.schema` is generated from these same models.
"""

from __future__ import annotations

from typing import Any

from hermes_actors.store.backends.peewee_import import pw
from hermes_actors.store.schema_models import bind

__all__ = ["DIALECT", "MODELS", "Delivery", "Inbox", "Message", "NodeState", "Outbox", "Routing",
           "Session", "Setting", "sql_of"]

#: The database the models are bound to: never connected, only asked for its SQL dialect.
DIALECT = pw.PostgresqlDatabase(None)


#: The one declaration of the tables (:mod:`hermes_actors.store.schema_models`), bound to it.
Session, Message, Routing, Delivery, Inbox, Outbox, NodeState, Setting = MODELS = bind(DIALECT)


def sql_of(query: Any) -> tuple[str, list[Any]]:
    """The statement and parameters of a peewee query, for a psycopg cursor."""
    sql, params = query.sql()
    return sql, list(params)
