"""The one declaration of the tables builds, on SQLite, exactly the schema the frozen
migrations build (the PostgreSQL twin is in ``postgres/test_schema.py``)."""

from __future__ import annotations

import re
import sqlite3

from hermes_actors.store import SessionDB
from hermes_actors.store.backends.peewee_import import pw
from hermes_actors.store.backends.sqlite.schema import MIGRATIONS, SCHEMA_VERSION, migrate
from hermes_actors.store.schema_models import INDEXES, TABLES


def _normal(sql: str | None) -> str | None:
    """``sql`` without what does not change the schema: quotes, spacing, case."""
    if sql is None:
        return None
    text = re.sub(r"\s+", " ", sql.replace('"', "")).lower()
    return re.sub(r"\s*([(),])\s*", r"\1", text)


def _describe(path) -> dict:
    """Every table, index and trigger of a database: its normalized SQL and what SQLite says
    of its columns, indexes and references."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"
                            " WHERE name NOT LIKE 'sqlite_autoindex_%'").fetchall()
        described = {}
        for kind, name, table, sql in rows:
            facts: tuple = (kind, table, _normal(sql))
            if kind == "table":
                facts += (conn.execute(f'PRAGMA table_xinfo("{name}")').fetchall(),
                          conn.execute(f'PRAGMA index_list("{name}")').fetchall(),
                          conn.execute(f'PRAGMA foreign_key_list("{name}")').fetchall())
            elif kind == "index":
                facts += (conn.execute(f'PRAGMA index_xinfo("{name}")').fetchall(),)
            described[name] = facts
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    return {"user_version": version, **described}


class TestGeneratedSchema:
    def test_a_fresh_database_equals_the_frozen_migrations(self, tmp_path):
        frozen = pw.SqliteDatabase(str(tmp_path / "frozen.db"))
        with frozen.atomic():  # every migration as released, one after the other
            for migration in MIGRATIONS:
                for step in migration:
                    step(frozen) if callable(step) else frozen.execute_sql(step)
            frozen.execute_sql(f"PRAGMA user_version = {SCHEMA_VERSION}")
        frozen.close()
        fresh = pw.SqliteDatabase(str(tmp_path / "fresh.db"))
        assert migrate(fresh) == 0
        fresh.close()

        generated = _describe(tmp_path / "fresh.db")
        assert generated == _describe(tmp_path / "frozen.db")
        assert {*TABLES, *(index.name for index in INDEXES), "messages_fts",
                "messages_ai", "applied_lists"} <= set(generated)
        with sqlite3.connect(tmp_path / "fresh.db") as conn:  # made from the declaration
            assert conn.execute("SELECT sql FROM sqlite_master WHERE name = 'sessions'"
                                ).fetchone()[0].startswith('CREATE TABLE "sessions"')

    def test_the_store_opens_a_fresh_database_in_the_latest_form(self, tmp_path):
        SessionDB(tmp_path / "state.db").close()
        pw_db = pw.SqliteDatabase(str(tmp_path / "again.db"))
        migrate(pw_db)
        pw_db.close()
        assert _describe(tmp_path / "state.db") == _describe(tmp_path / "again.db")
