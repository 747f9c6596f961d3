"""Before a measurement the benchmark server has WAL segments ready for reuse (``pgwal``)."""

from __future__ import annotations

import itertools

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from benchmarks.pgwal import recycle_segments

pytestmark = pytest.mark.postgres

_roles = itertools.count(1)

_AHEAD = """SELECT count(*) FROM pg_ls_waldir()
            WHERE name ~ '^[0-9A-F]{24}$'
              AND name > pg_walfile_name(pg_current_wal_insert_lsn())"""
_FILES = "SELECT count(*) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$'"


def _count(conn: psycopg.Connection, query: str) -> int:
    row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


class TestRecycleSegments:
    """The segments it passed through wait ahead of the insert position, as renamed files."""

    def test_segments_wait_ahead_of_the_insert_position(self, postgres_server):
        assert recycle_segments(postgres_server.admin_dsn, segments=4)
        with psycopg.connect(postgres_server.admin_dsn, autocommit=True) as conn:
            assert _count(conn, _AHEAD) >= 4

    def test_wal_into_them_creates_no_file(self, postgres_server):
        assert recycle_segments(postgres_server.admin_dsn, segments=4)
        with psycopg.connect(postgres_server.admin_dsn, autocommit=True) as conn:
            files = _count(conn, _FILES)
            for _ in range(4):
                conn.execute("SELECT pg_switch_wal() "
                             "FROM pg_logical_emit_message(false, 'test', '')")
            assert _count(conn, _FILES) == files

    def test_a_role_without_the_right_is_told_so(self, postgres_server):
        role = f"hermes_test_plain_{next(_roles)}"
        with psycopg.connect(postgres_server.admin_dsn, autocommit=True) as conn:
            try:
                conn.execute(f'CREATE ROLE "{role}" LOGIN')
            except psycopg.errors.InsufficientPrivilege:
                pytest.skip("the test server's role may not create roles")
        try:
            assert not recycle_segments(make_conninfo(postgres_server.admin_dsn, user=role))
        finally:
            with psycopg.connect(postgres_server.admin_dsn, autocommit=True) as conn:
                conn.execute(f'DROP ROLE "{role}"')
