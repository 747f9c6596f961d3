"""Connections to the server: the read pool, the writer's own connection, and what a
failure says.

Reads take a connection from a ``psycopg_pool.ConnectionPool`` of ``store.pool_size``
connections (all opened at start, so a burst of reads never waits for a handshake); the
committer's writes go over one more connection of their own, so a burst of slow reads can
never starve the writes behind it. Every connection is in autocommit mode: a read is one
statement with no ``BEGIN``/``COMMIT`` round trips, and the committer opens its
transactions itself.

Every text that leaves this backend (an exception, a log line) names the database by its
DSN as :func:`~hermes_actors.model.dsn.mask_dsn` shows it (host, port, dbname and user
only) and passes a driver's message through :func:`~hermes_actors.model.dsn.scrub`, so a
password in the DSN is never shown.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import conninfo
from psycopg_pool import ConnectionPool

from hermes_actors.errors import (
    FencedError,
    StoreError,
    StoreRejectedError,
    StoreUnavailableError,
    StoreUnreachableError,
)
from hermes_actors.model.dsn import mask_dsn, remember, scrub
from hermes_actors.store.backends.postgres.greenwait import connection_class
from hermes_actors.store.backends.postgres.schema import FENCED_SQLSTATE

__all__ = [
    "APPLICATION_NAME",
    "CONNECT_TIMEOUT",
    "POOL_QUIET",
    "POOL_TIMEOUT",
    "PoolWarnings",
    "Server",
]

#: Seconds a connection attempt may take (libpq's ``connect_timeout``; at least 2).
CONNECT_TIMEOUT = 5
#: Seconds a read waits for a free connection of the pool before the store is unavailable.
POOL_TIMEOUT = 10.0
#: How the backend's connections show in ``pg_stat_activity`` (unless the DSN names one).
APPLICATION_NAME = "hermes_actors"
#: TCP settings of every connection (libpq's names; ignored on a Unix socket): a server
#: that vanishes (its host down, a partition) is noticed within about a minute, by the
#: keepalive probes while a call waits for an answer, or by the unacknowledged data of a
#: call being sent, instead of the kernel's default of about two hours.
TCP_KEEPALIVE = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
                 "keepalives_count": 3, "tcp_user_timeout": 60_000}

#: Seconds without a warning of psycopg's pool after which its next warning is shown again.
POOL_QUIET = 60.0


class PoolWarnings(logging.Filter):
    """One line per outage from psycopg's pool (logger ``psycopg.pool``), not dozens.

    While the server is away, every pool retries its connections in the background and logs
    a warning per failed attempt ("error connecting in 'hermes-actors-reads': ..."), and
    every gateway started meanwhile has a pool of its own. The first warning is shown (with
    a note); the next ones are muted until the pool has been quiet for :data:`POOL_QUIET`
    seconds, so the next outage shows its first line again. Installed on the logger when
    this module is imported (:func:`install`)."""

    def __init__(self, quiet: float = POOL_QUIET,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__("psycopg.pool")
        self._quiet = quiet
        self._clock = clock
        self._last: float | None = None
        self._lock = threading.Lock()
        #: Warnings muted so far.
        self.muted = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        now = self._clock()
        with self._lock:
            last, self._last = self._last, now
            if last is not None and now - last < self._quiet:
                self.muted += 1
                return False
        record.msg = (f"{record.msg} (further warnings of the database pool are muted until "
                      f"it has been quiet for {self._quiet:g} s)")
        return True

    @classmethod
    def install(cls) -> PoolWarnings:
        """The filter on logger ``psycopg.pool`` (added once per process)."""
        logger = logging.getLogger("psycopg.pool")
        for existing in logger.filters:
            if isinstance(existing, cls):
                return existing
        mine = cls()
        logger.addFilter(mine)
        return mine


PoolWarnings.install()


class Server:
    """The database server one DSN names: connections to it, and errors naming it safely."""

    def __init__(self, dsn: str, *, read_only: bool = False,
                 writer_idle_timeout: float | None = None) -> None:
        self._dsn = dsn
        remember(dsn)
        #: Seconds the writer's connection may hold a transaction open between two
        #: statements before the server ends it (``None``: the server's setting). A cluster
        #: node sets it: a node paused inside a write still holds its fence's share lock on
        #: a lease row, and no other node could take that shard until the lock goes.
        self.writer_idle_timeout = writer_idle_timeout
        #: The DSN as it may be shown (host, port, dbname and user only).
        self.where = mask_dsn(dsn)
        self.read_only = read_only
        try:
            options = conninfo.conninfo_to_dict(dsn)
        except psycopg.Error:  # (libpq's message may quote the DSN: never shown)
            raise StoreUnreachableError(
                "the store DSN is not a valid connection string (libpq cannot parse it; "
                "it is not shown, as it may hold a password)") from None
        self._params: dict[str, Any] = {"autocommit": True,
                                        "connect_timeout": CONNECT_TIMEOUT}
        if "application_name" not in options:
            self._params["application_name"] = APPLICATION_NAME
        for name, value in TCP_KEEPALIVE.items():  # (the DSN's own settings win)
            if name not in options:
                self._params[name] = value

    def scrub(self, exc: BaseException | str) -> str:
        """A driver's message without the password (one line)."""
        text = " ".join(str(exc).split())
        return scrub(text, self._dsn)

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        if self.read_only:
            conn.execute("SET default_transaction_read_only = on")

    def _configure_writer(self, conn: psycopg.Connection[Any]) -> None:
        # the writer binds values into its statements' text (see ``batch``): its quoting
        # is that of standard-conforming strings, whatever the server's default
        conn.execute("SET standard_conforming_strings = on")
        if self.writer_idle_timeout is not None:
            conn.execute("SET idle_in_transaction_session_timeout = "
                         f"{max(1, int(self.writer_idle_timeout * 1000))}")

    def connect(self, *, writer: bool = False) -> psycopg.Connection[Any]:
        """A new autocommit connection (``writer``: the committer's, see
        :mod:`~.greenwait`); raises :class:`StoreUnavailableError`."""
        try:
            cls = connection_class() if writer else psycopg.Connection
            conn = cls.connect(self._dsn, **self._params)
        except psycopg.Error as exc:
            raise StoreUnavailableError(
                f"cannot connect to the store database {self.where}: {self.scrub(exc)}"
            ) from None
        try:
            self._configure(conn)
            if writer:
                self._configure_writer(conn)
        except psycopg.Error as exc:
            conn.close()
            raise StoreUnavailableError(
                f"cannot use the store database {self.where}: {self.scrub(exc)}") from None
        return conn

    def connect_at_start(self) -> psycopg.Connection[Any]:
        """:meth:`connect` when the store opens: failing, it is unreachable (no degraded
        mode to start in, see :class:`StoreUnreachableError`)."""
        try:
            return self.connect()
        except StoreUnavailableError as exc:
            raise StoreUnreachableError(str(exc)) from None

    def pool(self, size: int) -> ConnectionPool:
        """An open pool of ``size`` connections for reads (all connected before it returns);
        raises :class:`StoreUnreachableError`."""
        pool: ConnectionPool = ConnectionPool(
            self._dsn, kwargs=dict(self._params), min_size=size, max_size=size, open=False,
            configure=self._configure, name="hermes-actors-reads", timeout=POOL_TIMEOUT)
        try:
            pool.open(wait=True, timeout=CONNECT_TIMEOUT * 2)
        except psycopg.Error as exc:
            pool.close()
            raise StoreUnreachableError(
                f"cannot open {size} connections to the store database {self.where}: "
                f"{self.scrub(exc)}") from None
        return pool

    def unavailable(self, doing: str, exc: BaseException) -> StoreUnavailableError:
        """The error for a read or write that failed because the server cannot be used."""
        return StoreUnavailableError(f"cannot {doing} {self.where}: {self.scrub(exc)}")

    def rejected(self, doing: str, exc: BaseException) -> StoreError:
        """The error for a statement the server refused (a constraint, bad data); a write
        of a cluster tenure that is over (``cluster_fence``) is a :class:`FencedError`."""
        message = f"{doing} rejected by {self.where}: {self.scrub(exc)}"
        diag = getattr(exc, "diag", None)
        if getattr(exc, "sqlstate", None) == FENCED_SQLSTATE and diag is not None:
            shard, _, epoch = (diag.message_detail or "").partition(" ")
            if shard.isdigit() and epoch.isdigit():
                return FencedError(message, int(shard), int(epoch))
        return StoreRejectedError(message)
