"""``PgLeases``: the cluster's lease tables on PostgreSQL (the tables of schema migrations 2
and 4: the shards' leases, and those of the pull adapters).

Each operation of :class:`~hermes_actors.cluster.records.LeaseStore` is one statement (one
short transaction for creating the cluster and for a snapshot), correct however many nodes
run it at once, because the conditions that decide ownership are checked on the rows as they
are locked, in the statement that changes them: PostgreSQL locks each row and, when another
transaction changed it meanwhile, re-checks the condition against the row as committed (read
committed's re-evaluation). So of two nodes acquiring one free shard at once, the second
finds it owned (or locked) and takes nothing; a renewal carrying a stale epoch matches no
row; nothing reads a row in one statement and writes it in another. Statements that change
several rows lock them in shard order, so two of them never deadlock (the races in the tests
found that they did when each locked in its own scan order).

Every time comes from the database's clock (``now()``: the statement's start, one instant
for everything it writes; a statement that waited for a row lock compares against an
earlier instant, which only makes a lease look valid a little longer to it, never shorter)
and is stored as epoch seconds in ``double precision``, like every other time of the
schema. Nodes never compare clocks with each other.

The operations run on one autocommit connection of their own, opened on first use and
again after a failure, with a ``statement_timeout``: a lease round must not hang on a stuck
server past the time its leases are good for (the manager's local deadlines cover that
time). Failures are :class:`~hermes_actors.errors.StoreUnavailableError` (the server cannot
be used; retried at the next round) or :class:`~hermes_actors.errors.StoreError` (refused),
the DSN's password masked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import psycopg

from hermes_actors.cluster.records import (
    Acquired,
    AdapterAcquired,
    AdapterLeaseRow,
    ClusterSnapshot,
    LeaseRow,
    NodeAnnouncement,
    NodeRow,
)
from hermes_actors.cluster.shards import check_shard_count
from hermes_actors.store.backends.postgres.connection import Server
from hermes_actors.store.backends.postgres.schema import migrate, repair_canonical_tables

__all__ = ["DEFAULT_STATEMENT_TIMEOUT", "PgLeases"]

T = TypeVar("T")

#: Seconds one lease statement may run before the server cancels it.
DEFAULT_STATEMENT_TIMEOUT = 5.0
#: The database's clock as epoch seconds.
_NOW = "extract(epoch FROM now())"

_CREATE_CLUSTER = (
    f"INSERT INTO cluster (id, shards, created_at, created_by) VALUES (true, %s, {_NOW}, %s)"
    " ON CONFLICT (id) DO NOTHING")
_CLUSTER_SHARDS = "SELECT shards FROM cluster"
_CREATE_LEASES = (
    "INSERT INTO shard_leases (shard) SELECT generate_series(0, %s - 1)"
    " ON CONFLICT (shard) DO NOTHING")
_HEARTBEAT = (
    "INSERT INTO cluster_nodes (node_id, boot_id, started_at, heartbeat_at, lease_ttl, host,"
    f" pid, address, leaving) VALUES (%s, %s, {_NOW}, {_NOW}, %s, %s, %s, %s, %s)"
    " ON CONFLICT (node_id) DO UPDATE SET boot_id = excluded.boot_id,"
    " started_at = CASE WHEN cluster_nodes.boot_id = excluded.boot_id"
    " THEN cluster_nodes.started_at ELSE excluded.started_at END,"
    " heartbeat_at = excluded.heartbeat_at, lease_ttl = excluded.lease_ttl,"
    " host = excluded.host, pid = excluded.pid, address = excluded.address,"
    " leaving = excluded.leaving")
_HAS_TABLES = "SELECT to_regclass('cluster') IS NOT NULL AND to_regclass('shard_leases') IS NOT NULL"
_SNAPSHOT_NOW = f"SELECT {_NOW}, (SELECT shards FROM cluster)"
_NODES = ("SELECT node_id, boot_id, started_at, heartbeat_at, lease_ttl, host, pid, address,"
          " leaving FROM cluster_nodes ORDER BY node_id")
_LEASES = ("SELECT shard, owner, epoch, expires_at, acquired_at FROM shard_leases"
           " ORDER BY shard")
#: The rows a statement changes are locked first, in shard order (``ORDER BY shard FOR
#: UPDATE``): two statements locking several rows in different orders would deadlock.
#: Free, expired, or the caller's own (a restarted node takes its leases back at once); a
#: row another statement holds locked is skipped, not waited for (it is being taken,
#: renewed or released: the next round looks again).
_ACQUIRE = (
    "WITH due AS (SELECT shard FROM shard_leases WHERE shard = ANY(%(shards)s::integer[])"
    f" AND (owner IS NULL OR expires_at < {_NOW} OR owner = %(me)s)"
    " ORDER BY shard FOR UPDATE SKIP LOCKED)"
    f" UPDATE shard_leases AS l SET owner = %(me)s, epoch = l.epoch + 1, acquired_at = {_NOW},"
    f" expires_at = {_NOW} + %(ttl)s FROM due WHERE l.shard = due.shard"
    " RETURNING l.shard, l.epoch, l.expires_at")


def _tenure_statements(table: str, key: str, key_type: str, keys: str) -> tuple[str, str]:
    """The renewal and the release of the caller's own tenures of ``table`` (rows named by
    ``key``; the parameters ``keys`` and ``epochs`` pair them), its rows locked in ``key``
    order.

    The renewal touches only the caller's own tenure (owner and epoch), and only while it
    has not expired. The tenure stays as it is, so the lock is ``NO KEY UPDATE``: it does
    not wait for the node's writes in flight, whose fence holds the rows ``FOR KEY SHARE``
    (``cluster_fence``). The release ends the tenure: ``FOR UPDATE`` waits for the writes
    still in flight under it."""
    tenures = (
        f"WITH due AS (SELECT l.{key} FROM {table} AS l"
        f" JOIN unnest(%({keys})s::{key_type}[], %(epochs)s::bigint[]) AS h ({key}, epoch)"
        f" ON l.{key} = h.{key} AND l.epoch = h.epoch WHERE l.owner = %(me)s{{condition}}"
        f" ORDER BY l.{key} FOR {{lock}} OF l)")
    renew = (tenures.format(condition=f" AND l.expires_at >= {_NOW}", lock="NO KEY UPDATE")
             + f" UPDATE {table} AS l SET expires_at = {_NOW} + %(ttl)s FROM due"
             f" WHERE l.{key} = due.{key} RETURNING l.{key}, l.expires_at")
    release = (tenures.format(condition="", lock="UPDATE")
               + f" UPDATE {table} AS l SET owner = NULL, expires_at = NULL, acquired_at = NULL"
               f" FROM due WHERE l.{key} = due.{key} RETURNING l.{key}")
    return renew, release


_RENEW, _RELEASE = _tenure_statements("shard_leases", "shard", "integer", "shards")
#: The pull adapters' leases (``adapter_leases``, migration 5), one row per adapter name,
#: with the rules of the shards' leases. Acquiring is an upsert: the row is created taken
#: when no node asked for the adapter before; otherwise PostgreSQL locks the existing row
#: and checks the ``WHERE`` of ``DO UPDATE`` against its latest committed version (read
#: committed's rule for ``ON CONFLICT``, even for a row the statement's snapshot cannot
#: see), so of two nodes taking one free adapter the second finds it owned and takes
#: nothing; two inserting one new name at once: the second waits for the first's row and
#: then finds it owned. Rows are taken in name order (the ``ORDER BY`` of the insert's
#: rows, as in the renewal and the release). An adapter row is never fenced by a write,
#: so the lock is not skipped but waited for: only a renewal or a release holds it, for
#: one short statement.
_ADAPTER_ACQUIRE = (
    "INSERT INTO adapter_leases AS l (name, owner, epoch, acquired_at, expires_at)"
    f" SELECT n, %(me)s, 1, {_NOW}, {_NOW} + %(ttl)s"
    " FROM unnest(%(names)s::text[]) AS n ORDER BY n"
    " ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, epoch = l.epoch + 1,"
    " acquired_at = excluded.acquired_at, expires_at = excluded.expires_at"
    f" WHERE l.owner IS NULL OR l.expires_at < {_NOW} OR l.owner = %(me)s"
    " RETURNING l.name, l.epoch, l.expires_at")
#: The caller's own adapter tenures, renewed and released as the shards' are.
_ADAPTER_RENEW, _ADAPTER_RELEASE = _tenure_statements("adapter_leases", "name", "text",
                                                      "names")
_HAS_ADAPTER_LEASES = "SELECT to_regclass('adapter_leases') IS NOT NULL"
_ADAPTER_LEASES = ("SELECT name, owner, epoch, expires_at, acquired_at FROM adapter_leases"
                   " ORDER BY name")
_LEAVE = "DELETE FROM cluster_nodes WHERE node_id = %s AND boot_id = %s"
_FORGET = (
    f"DELETE FROM cluster_nodes AS n WHERE n.heartbeat_at < {_NOW} - %s"
    " AND NOT EXISTS (SELECT 1 FROM shard_leases AS l WHERE l.owner = n.node_id"
    f" AND l.expires_at >= {_NOW})")


class PgLeases:
    """The lease table of the database ``server`` names (see the module docstring).

    ``read_only`` servers (``cluster status``) may only :meth:`snapshot`. Thread-safe: one
    operation at a time on the one connection.
    """

    def __init__(self, server: Server, *,
                 statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT) -> None:
        self._server = server
        #: The database, as it may be shown (password masked).
        self.where = server.where
        self._timeout_ms = max(1, int(statement_timeout * 1000))
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    @classmethod
    def open(cls, dsn: str, *, read_only: bool = False,
             statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT) -> PgLeases:
        """Leases of the database ``dsn`` names (connected on first use)."""
        return cls(Server(dsn, read_only=read_only), statement_timeout=statement_timeout)

    def close(self) -> None:
        """Close the connection (a later operation opens a new one)."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _run(self, doing: str, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    conn = self._server.connect()
                    conn.execute(f"SET statement_timeout = {self._timeout_ms}")
                    self._conn = conn
                return work(self._conn)
            except psycopg.OperationalError as exc:
                self._discard()
                raise self._server.unavailable(doing, exc) from None
            except psycopg.Error as exc:
                self._discard()
                raise self._server.rejected(doing, exc) from None

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # -- the cluster and its nodes --------------------------------------------------------

    def ensure_cluster(self, shards: int, node_id: str) -> int:
        """Create the cluster (migrating the schema first, and re-creating lost tables, as
        the backend's open does) with ``shards`` free leases unless it exists; returns the
        shard count recorded. Two first nodes at once create it once: the second waits on
        the first's row, then finds it."""
        check_shard_count(shards)

        def create(conn: psycopg.Connection[Any]) -> int:
            migrate(conn, where=self.where)
            repair_canonical_tables(conn)
            with conn.transaction():
                conn.execute(_CREATE_CLUSTER, (shards, node_id))
                row = conn.execute(_CLUSTER_SHARDS).fetchone()
                recorded = int(row[0]) if row is not None else shards
                conn.execute(_CREATE_LEASES, (recorded,))
            return recorded

        return self._run("create the cluster in", create)

    def heartbeat(self, node: NodeAnnouncement) -> None:
        """Insert or refresh ``node``'s row (``started_at`` is kept while the boot is)."""
        params = (node.node_id, node.boot_id, node.lease_ttl, node.host, node.pid,
                  node.address, node.leaving)
        self._run("heartbeat to", lambda conn: conn.execute(_HEARTBEAT, params))

    def leave(self, node_id: str, boot_id: str) -> None:
        """Remove the node's row, if it is still this boot's."""
        self._run("leave the cluster in", lambda conn: conn.execute(_LEAVE, (node_id, boot_id)))

    def forget_nodes(self, dead_for: float) -> int:
        """Remove rows of nodes silent for more than ``dead_for`` seconds holding no valid
        lease; returns how many."""
        return self._run("prune the nodes of",
                         lambda conn: conn.execute(_FORGET, (dead_for,)).rowcount)

    def snapshot(self) -> ClusterSnapshot:
        """Every node and lease as of one instant (a repeatable-read transaction); a
        database without the cluster's tables or row has ``shards`` ``None``."""
        def read(conn: psycopg.Connection[Any]) -> ClusterSnapshot:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                if not conn.execute(_HAS_TABLES).fetchone()[0]:  # type: ignore[index]
                    now = conn.execute(f"SELECT {_NOW}").fetchone()[0]  # type: ignore[index]
                    return ClusterSnapshot(float(now), None, (), ())
                now, shards = conn.execute(_SNAPSHOT_NOW).fetchone()  # type: ignore[misc]
                nodes = tuple(
                    NodeRow(n, b, float(s), float(h), float(t), host, pid, a, bool(leaving))
                    for n, b, s, h, t, host, pid, a, leaving in conn.execute(_NODES))
                leases = tuple(
                    LeaseRow(int(shard), owner, int(epoch), _time(expires), _time(acquired))
                    for shard, owner, epoch, expires, acquired in conn.execute(_LEASES))
                adapters: tuple[AdapterLeaseRow, ...] = ()
                if conn.execute(_HAS_ADAPTER_LEASES).fetchone()[0]:  # type: ignore[index]
                    adapters = tuple(
                        AdapterLeaseRow(name, owner, int(epoch), _time(expires),
                                        _time(acquired))
                        for name, owner, epoch, expires, acquired
                        in conn.execute(_ADAPTER_LEASES))
            return ClusterSnapshot(float(now), None if shards is None else int(shards),
                                   nodes, leases, adapters)

        return self._run("read the cluster in", read)

    # -- leases ---------------------------------------------------------------------------

    def acquire(self, node_id: str, shards: Iterable[int], ttl: float) -> list[Acquired]:
        """Take those of ``shards`` that are free, expired or ``node_id``'s already."""
        wanted = sorted(set(shards))
        if not wanted:
            return []
        params = {"me": node_id, "ttl": ttl, "shards": wanted}
        rows = self._run("acquire leases in",
                         lambda conn: conn.execute(_ACQUIRE, params).fetchall())
        return sorted((Acquired(int(s), int(e), float(x)) for s, e, x in rows),
                      key=lambda lease: lease.shard)

    def renew(self, node_id: str, held: Mapping[int, int], ttl: float) -> dict[int, float]:
        """Extend the still valid leases of ``held`` (shard -> epoch) that are
        ``node_id``'s; returns shard -> new expiry for those renewed."""
        if not held:
            return {}
        params = {"me": node_id, "ttl": ttl, **_pairs(held)}
        rows = self._run("renew leases in",
                         lambda conn: conn.execute(_RENEW, params).fetchall())
        return {int(s): float(x) for s, x in rows}

    def release(self, node_id: str, held: Mapping[int, int]) -> set[int]:
        """Free the leases of ``held`` (shard -> epoch) still ``node_id``'s; returns them."""
        if not held:
            return set()
        params = {"me": node_id, **_pairs(held)}
        rows = self._run("release leases in",
                         lambda conn: conn.execute(_RELEASE, params).fetchall())
        return {int(s) for (s,) in rows}


    # -- pull adapters' leases -------------------------------------------------------------

    def acquire_adapters(self, node_id: str, names: Iterable[str], ttl: float
                         ) -> list[AdapterAcquired]:
        """Take those of the adapter leases ``names`` that are free, expired, already
        ``node_id``'s or not there yet (their rows are created, taken)."""
        wanted = sorted(set(names))
        if not wanted:
            return []
        params = {"me": node_id, "ttl": ttl, "names": wanted}
        rows = self._run("acquire adapter leases in",
                         lambda conn: conn.execute(_ADAPTER_ACQUIRE, params).fetchall())
        return sorted((AdapterAcquired(str(n), int(e), float(x)) for n, e, x in rows),
                      key=lambda lease: lease.name)

    def renew_adapters(self, node_id: str, held: Mapping[str, int], ttl: float
                       ) -> dict[str, float]:
        """Extend the still valid adapter leases of ``held`` (name -> epoch) that are
        ``node_id``'s; returns name -> new expiry for those renewed."""
        if not held:
            return {}
        names = sorted(held)
        params = {"me": node_id, "ttl": ttl, "names": names,
                  "epochs": [held[n] for n in names]}
        rows = self._run("renew adapter leases in",
                         lambda conn: conn.execute(_ADAPTER_RENEW, params).fetchall())
        return {str(n): float(x) for n, x in rows}

    def release_adapters(self, node_id: str, held: Mapping[str, int]) -> set[str]:
        """Free the adapter leases of ``held`` (name -> epoch) still ``node_id``'s."""
        if not held:
            return set()
        names = sorted(held)
        params = {"me": node_id, "names": names, "epochs": [held[n] for n in names]}
        rows = self._run("release adapter leases in",
                         lambda conn: conn.execute(_ADAPTER_RELEASE, params).fetchall())
        return {str(n) for (n,) in rows}


def _pairs(held: Mapping[int, int]) -> dict[str, list[int]]:
    shards = sorted(held)
    return {"shards": shards, "epochs": [held[s] for s in shards]}


def _time(value: Any) -> float | None:
    return None if value is None else float(value)
