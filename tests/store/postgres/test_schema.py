"""Forward migrations and their version table, lost tables, read-only opens, the models that
build the varying queries staying in step with the DDL, and the generated latest form
building what the frozen migrations build."""

from __future__ import annotations

import threading

import psycopg
import pytest

from hermes_actors.errors import StoreError, StoreUnavailableError
from hermes_actors.store.backends.postgres import models, schema
from hermes_actors.store.ops import PutRouting
from hermes_actors.store.routing import NO_FLAGS


def _sql(dsn: str, statement: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description is not None else []


class TestMigrations:
    """A database is brought to the latest version once, and its history is recorded."""

    def test_a_fresh_database_records_every_migration(self, pg, postgres_dsn):
        rows = _sql(postgres_dsn, "SELECT version FROM schema_version ORDER BY version")
        assert [v for (v,) in rows] == list(range(1, schema.SCHEMA_VERSION + 1))
        assert pg.integrity_check() == "ok"

    def test_a_reopen_runs_nothing_again(self, open_pg, postgres_dsn):
        open_pg().close()
        before = _sql(postgres_dsn, "SELECT version, applied_at FROM schema_version")
        open_pg()
        assert _sql(postgres_dsn, "SELECT version, applied_at FROM schema_version") == before

    def test_concurrent_opens_migrate_once(self, open_pg, postgres_dsn):
        barrier = threading.Barrier(3)
        errors: list[BaseException] = []

        def start() -> None:
            barrier.wait(10)
            try:
                open_pg()
            except BaseException as exc:  # noqa: BLE001 - asserted below
                errors.append(exc)

        threads = [threading.Thread(target=start) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == []
        assert _sql(postgres_dsn, "SELECT count(*) FROM schema_version") == [
            (schema.SCHEMA_VERSION,)]

    def test_a_newer_schema_is_refused_untouched(self, open_pg, postgres_dsn):
        open_pg().close()
        _sql(postgres_dsn, "INSERT INTO schema_version (version) VALUES (%s)",
             (schema.SCHEMA_VERSION + 1,))
        with pytest.raises(StoreError, match="newer than this hermes_actors"):
            open_pg()

    def test_a_lost_table_comes_back_empty(self, open_pg, postgres_dsn):
        pg = open_pg()
        pg.apply([PutRouting("k", "{}", *NO_FLAGS)])
        pg.close()
        _sql(postgres_dsn, "DROP TABLE routing")
        again = open_pg()
        assert again.routing_rows() == [] and again.integrity_check() == "ok"

    def test_a_lost_index_comes_back(self, open_pg, postgres_dsn):
        open_pg().close()
        _sql(postgres_dsn, "DROP INDEX routing_flagged")
        assert open_pg().integrity_check() == "ok"

    def test_an_open_does_not_wait_for_writes_in_flight(self, open_pg, postgres_dsn):
        # CREATE INDEX IF NOT EXISTS takes its table's SHARE lock even when the index
        # exists: an open beside a running writer must not run it (it waited, and could
        # deadlock with a group commit holding one table and wanting another).
        open_pg().close()
        with psycopg.connect(postgres_dsn, autocommit=True) as writer, \
                psycopg.connect(postgres_dsn, autocommit=True) as opener:
            writer.execute("BEGIN")
            writer.execute("INSERT INTO routing (session_key, entry) VALUES ('w', '{}')")
            opener.execute("SET lock_timeout = '2s'")
            schema.repair_canonical_tables(opener)  # raises LockNotAvailable if it waits
            writer.execute("ROLLBACK")

    def test_integrity_names_what_is_missing(self, pg, postgres_dsn):
        _sql(postgres_dsn, "DROP INDEX routing_flagged")
        assert pg.integrity_check() == "routing_flagged is missing"


class TestReadOnly:
    """A read-only open changes nothing and refuses writes."""

    def test_an_empty_database_is_not_a_store(self, open_pg, postgres_dsn):
        with pytest.raises(StoreUnavailableError, match="no hermes_actors database"):
            open_pg(read_only=True)
        assert _sql(postgres_dsn, "SELECT to_regclass('schema_version')") == [(None,)]

    def test_writes_are_refused(self, open_pg, home):
        open_pg().apply([PutRouting("k", "{}", *NO_FLAGS)])
        ro = open_pg(read_only=True)
        assert [row.session_key for row in ro.routing_rows()] == ["k"]
        with pytest.raises(StoreError, match="read-only"):
            ro.apply([PutRouting("j", "{}", *NO_FLAGS)])
        with pytest.raises(StoreError):  # the session itself is read-only too
            ro.sql("DELETE FROM routing")


class TestModels:
    """The peewee models describe the tables the DDL creates, column for column."""

    def test_models_match_the_ddl(self, pg):
        for model in models.MODELS:
            table = model._meta.table_name
            columns = [name for (name,) in pg.sql(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_schema = current_schema() AND table_name = %s"
                " ORDER BY ordinal_position", (table,))]
            assert columns == [f.column_name for f in model._meta.sorted_fields], table


#: What the server says of a schema: columns, indexes, constraints, functions.
_DESCRIBE = (
    "SELECT table_name, ordinal_position, column_name, data_type, is_nullable,"
    " column_default, is_identity, identity_generation FROM information_schema.columns"
    " WHERE table_schema = current_schema() AND table_name <> 'schema_version'"
    " ORDER BY 1, 2",
    "SELECT tablename, indexname, replace(indexdef, current_schema() || '.', '')"
    " FROM pg_indexes WHERE schemaname = current_schema()"
    " AND tablename <> 'schema_version' ORDER BY 1, 2",
    "SELECT conrelid::regclass::text, conname, contype, pg_get_constraintdef(oid)"
    " FROM pg_constraint WHERE connamespace = current_schema()::regnamespace"
    " AND conrelid <> 'schema_version'::regclass ORDER BY 1, 2",
    "SELECT proname, pg_get_function_arguments(oid), prosrc FROM pg_proc"
    " WHERE pronamespace = current_schema()::regnamespace ORDER BY 1",
)


class TestGeneratedSchema:
    """A fresh database is made from the one declaration of the tables
    (``schema_models``) and equals one built by every frozen migration in turn."""

    def test_a_fresh_database_equals_the_frozen_migrations(self, postgres_server,
                                                           postgres_dsn):
        with postgres_server.database() as frozen_dsn:
            with psycopg.connect(frozen_dsn, autocommit=True) as conn:
                conn.execute(schema._VERSION_DDL)  # what the released runner did
                for migration in schema.MIGRATIONS:
                    for statement in migration:
                        conn.execute(statement)
                frozen = [conn.execute(query).fetchall() for query in _DESCRIBE]
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            assert schema.migrate(conn, where="test") == 0
            fresh = [conn.execute(query).fetchall() for query in _DESCRIBE]
            [(at_once,)] = conn.execute(  # the fresh path: every version in one statement
                "SELECT count(DISTINCT applied_at) = 1 FROM schema_version").fetchall()
        assert fresh == frozen
        columns, indexes, _, functions = fresh
        assert {row[0] for row in columns} >= {*schema.CANONICAL_TABLES,
                                               *schema.CLUSTER_TABLES}
        assert {row[1] for row in indexes} >= {*schema.CANONICAL_INDEXES, schema.FTS_INDEX}
        assert [row[0] for row in functions] == ["cluster_fence", "cluster_shard"]
        assert at_once


class TestOutboxNotices:
    """The payload of an outbox append's notice (no server needed)."""

    def test_round_trip(self):
        for chat in ("42", None, "a\u00e9\"\\\n"):
            payload = schema.outbox_notice("node-1", "webhook", chat)
            assert schema.read_outbox_notice(payload) == ("node-1", "webhook", chat)

    @pytest.mark.parametrize("payload", ["", "x", "[]", '["a","b"]', '[1,"b","c"]',
                                         '["a","b",3]', '{"a":1}', "null"])
    def test_anything_else_is_not_a_notice(self, payload):
        assert schema.read_outbox_notice(payload) is None
