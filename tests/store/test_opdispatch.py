"""The one op dispatch: each database backend handles exactly the ops it should."""

import typing

import pytest

from hermes_actors.errors import StoreError
from hermes_actors.store.backends.postgres.operations import PostgresOps
from hermes_actors.store.backends.sqlite.operations import SqliteOps
from hermes_actors.store.opdispatch import handler_name
from hermes_actors.store.ops import FenceShard, ListId, NotifyOutbox, NotifyShard, Op

ALL_OPS = set(typing.get_args(Op))


def test_handler_names_follow_the_op_class():
    assert handler_name(ListId) == "_list_id"
    assert handler_name(NotifyOutbox) == "_notify_outbox"


def test_sqlite_handles_every_op_but_the_cluster_ones_and_list_ids():
    handled = set(SqliteOps(None, None)._handlers)  # type: ignore[arg-type]
    assert handled == ALL_OPS - {ListId, FenceShard, NotifyShard, NotifyOutbox}


def test_postgres_handles_every_op_but_list_ids():
    assert set(PostgresOps()._handlers) == ALL_OPS - {ListId}


def test_an_op_without_a_handler_is_refused_by_name():
    op = ListId("l", 0.0)
    with pytest.raises(StoreError, match="^SQLite cannot apply ListId$"):
        SqliteOps(None, None).apply(op)  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="^PostgreSQL cannot apply ListId$"):
        PostgresOps().apply(None, op)  # type: ignore[arg-type]
