"""Reaching the server: a clear error (password masked) when it cannot be reached, exit 2
from the command line, no degraded start; and a read pool of the configured size."""

from __future__ import annotations

import threading

import pytest
from psycopg.conninfo import make_conninfo

from hermes_actors import cli
from hermes_actors.config import load_config
from hermes_actors.errors import StoreUnreachableError
from hermes_actors.store import SessionStore
from hermes_actors.store.factory import open_backend
from hermes_actors.store.ops import PutRouting
from hermes_actors.store.routing import NO_FLAGS
from hermes_actors.testing import wait_until

SECRET = "s3cr3t-pw"


@pytest.fixture
def nowhere(tmp_path) -> str:
    """A DSN with a password, naming a server that does not exist (an empty socket dir)."""
    sockets = tmp_path / "no-server"
    sockets.mkdir()
    return f"postgresql://hermes:{SECRET}@/hermes?host={sockets}"


class TestUnreachable:
    """An unreachable server stops the start with a message that names it, masked."""

    def test_backend_raises_unreachable_with_the_password_masked(self, open_pg, nowhere):
        with pytest.raises(StoreUnreachableError) as caught:
            open_pg(nowhere)
        text = str(caught.value)
        assert SECRET not in text
        assert "dbname=hermes user=hermes" in text and "cannot connect" in text
        assert "password" not in text

    def test_a_store_does_not_start_degraded(self, home, nowhere):
        config = load_config({"store": {"backend": "postgres", "dsn": nowhere}}, env={})
        with pytest.raises(StoreUnreachableError):
            SessionStore(home / "sessions", config, mirror_interval=None)
        assert not (home / "sessions" / "sessions.json").exists()

    @pytest.mark.parametrize("command", [["db", "check"], ["db", "rebuild-fts"],
                                         ["sessions", "list"]])
    def test_the_cli_exits_2(self, home, nowhere, monkeypatch, capsys, command):
        monkeypatch.setenv("HERMES_STORE_BACKEND", "postgres")
        monkeypatch.setenv("HERMES_STORE_DSN", nowhere)
        assert cli.main([*command, "--home", str(home)]) == 2
        err = capsys.readouterr().err
        assert "cannot connect to the store database" in err and SECRET not in err

    def test_a_bad_dsn_in_the_config_is_not_echoed(self, home, capsys):
        (home / "config.yaml").write_text(
            f"store:\n  backend: postgres\n  dsn: 'hermes:{SECRET} at db'\n")
        assert cli.main(["db", "check", "--home", str(home)]) == 2
        err = capsys.readouterr().err
        assert "store.dsn" in err and SECRET not in err


class TestPool:
    """Reads share a pool of store.pool_size connections; writes have one of their own."""

    def test_pool_size_comes_from_the_config(self, postgres_dsn, home):
        dsn = make_conninfo(postgres_dsn, application_name="hermes-pool-test")
        config = load_config({"store": {"backend": "postgres", "dsn": dsn, "pool_size": 3}},
                             env={})
        backend = open_backend(home, config)
        try:
            backend.apply([PutRouting("k", "{}", *NO_FLAGS)])  # the writer connects
            assert backend.statistics().pool_size == 3
            count = backend.sql(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                ("hermes-pool-test",))
            assert count == [(4,)]  # 3 for reads, 1 for writes
        finally:
            backend.close()

    def test_a_read_waits_for_a_free_connection(self, open_pg, postgres_dsn):
        import psycopg

        pg = open_pg(pool_size=2)
        results: list[object] = []
        with psycopg.connect(postgres_dsn, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(4242)")
            blocked = [threading.Thread(target=lambda: results.append(pg.sql(
                "SELECT pg_advisory_lock_shared(4242)"))) for _ in range(2)]
            for thread in blocked:
                thread.start()
            wait_until(lambda: pg.statistics().pool_available == 0, 30, 0.005,
                       "every connection taken")
            third = threading.Thread(target=lambda: results.append(pg.sql("SELECT 1")))
            third.start()
            wait_until(lambda: pg.statistics().pool_waiting == 1, 30, 0.005,
                       "a read waiting for a connection")
            assert results == []  # every connection is taken: the third read waits
            holder.execute("SELECT pg_advisory_unlock(4242)")
            for thread in [*blocked, third]:
                thread.join(30)
        assert sorted(map(str, results)) == ["[('',)]", "[('',)]", "[(1,)]"]


class TestKeepalives:
    """Every connection probes its server, so one that vanishes fails a waiting call within
    about a minute; a DSN's own setting wins."""

    def test_connections_carry_the_tcp_settings(self, postgres_dsn):
        from hermes_actors.store.backends.postgres.connection import TCP_KEEPALIVE, Server

        conn = Server(postgres_dsn).connect()
        try:
            params = conn.info.get_parameters()
            assert {k: params.get(k) for k in TCP_KEEPALIVE} == {
                k: str(v) for k, v in TCP_KEEPALIVE.items()}
        finally:
            conn.close()
        conn = Server(make_conninfo(postgres_dsn, keepalives_idle=5)).connect()
        try:
            assert conn.info.get_parameters()["keepalives_idle"] == "5"
        finally:
            conn.close()


class TestRunCommand:
    """``hermes-actors run`` on an unreachable server exits 2 before serving, password
    masked (a real process: gevent patched, port bound first)."""

    def test_run_exits_2(self, home, nowhere):
        import os
        import subprocess
        import sys

        env = {**os.environ, "HERMES_STORE_BACKEND": "postgres", "HERMES_STORE_DSN": nowhere}
        done = subprocess.run(
            [sys.executable, "-m", "hermes_actors", "run", "--home", str(home), "--port", "0"],
            env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert "cannot connect to the store database" in done.stderr
        assert SECRET not in done.stderr + done.stdout
