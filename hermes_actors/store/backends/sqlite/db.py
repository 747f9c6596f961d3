"""``SessionDB``: the canonical store, peewee over SQLite in WAL mode (§5).

Everything runs on one :class:`~hermes_actors.store.backends.sqlite.executor.DbExecutor` worker that owns the
connection. Writes arrive as lists of operations (:mod:`hermes_actors.store.ops`) and each
list is applied atomically in a ``BEGIN IMMEDIATE`` transaction, so a crash leaves either all
of a change or none of it.

Group commit: lists of different callers that wait for the worker at the same time are
applied in ONE transaction (one COMMIT, one WAL append), which is where most of a short
write's cost lies. Each caller returns only after that COMMIT. If anything in the merged
transaction fails, it is rolled back and every list is re-applied alone, in arrival order,
with the handling below, so one bad list fails only its own caller. (Rolling back and
replaying was preferred to a SAVEPOINT per list: failures are rare, and two statements per
list are not free on the hot path.) One caller has at most one list in flight, so its
writes keep their order.

Write failures, in the order they are handled:

1. FTS corruption (the derived index broke): rebuild the index once, then re-run the same
   operations in order. Messages are never lost to a broken index.
2. Other operational errors (lock timeouts beyond ``busy_timeout``, I/O errors, a full disk):
   re-run up to :data:`WRITE_ATTEMPTS` times, then raise :class:`StoreUnavailableError`,
   on which the store switches to degraded mode instead of dropping the write.
3. Constraint violations are programming errors: :class:`StoreError` at once, no retry.

Only this module and :mod:`~hermes_actors.store.backends.sqlite.fts` know they talk to SQLite; the methods
are the ones a PostgreSQL implementation would provide (§16).
"""

from __future__ import annotations

import json
import logging
import operator
import os
import threading
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hermes_actors._green import gevent_threading_patched
from hermes_actors.errors import (
    ConfigError,
    StoreError,
    StoreRejectedError,
    StoreUnavailableError,
)
from hermes_actors.model.ids import new_id
from hermes_actors.store.backends.closing import ClosesOnce
from hermes_actors.store.backends.files.node_files import (
    import_home_files,
    read_node_id_file,
)
from hermes_actors.store.backends.peewee_import import pw
from hermes_actors.store.backends.sqlite import fts
from hermes_actors.store.backends.sqlite.checkpointer import FALLBACK_PAGES
from hermes_actors.store.backends.sqlite.executor import DbExecutor, ExecutorStatistics
from hermes_actors.store.backends.sqlite.operations import PUT_NODE_VALUE, SqliteOps
from hermes_actors.store.backends.sqlite.schema import (
    FLAGS_SCHEMA,
    ROUTING_FLAGGED,
    SCHEMA_VERSION,
    bind_models,
    migrate,
    repair_canonical_tables,
)
from hermes_actors.store.ops import ListId, Op
from hermes_actors.store.protocol import DIAGNOSTIC_TABLES, OUTBOX_COLUMNS
from hermes_actors.store.restarts import parse_restart_counts
from hermes_actors.store.routing import (
    NO_FLAGS,
    RoutingFlags,
    RoutingRow,
    flags_from_data,
    is_prunable,
    longest_idle,
    needs_recovery,
)
from hermes_actors.store.transcript import (
    LAST_ROW_COLUMNS,
    public_message,
    reply_after_last_row,
)

__all__ = [
    "BUSY_TIMEOUT_MS",
    "WRITER_ENV",
    "read_only_uri",
    "WRITE_ATTEMPTS",
    "SessionDB",
    "StoreUnavailableError",
]

log = logging.getLogger(__name__)
_first = operator.itemgetter(0)

T = TypeVar("T")

#: How long SQLite itself waits for a lock held by another connection.
BUSY_TIMEOUT_MS = 5000
#: Attempts of one write transaction before the database is declared unavailable.
WRITE_ATTEMPTS = 3
#: Environment variable that picks where writes are committed: ``thread`` or ``process``.
WRITER_ENV = "HERMES_ACTORS_DB_WRITER"
_WRITERS = ("thread", "process")
#: ``PRAGMA synchronous`` levels of a connection that writes (``store.synchronous``; the
#: config's ``SYNCHRONOUS_LEVELS``, repeated here so the writer child never imports the
#: configuration). ``full``: the log is synced at every COMMIT, so a committed write (an
#: acknowledged message) survives a power loss; ``normal``: only at checkpoints, so it
#: survives a process crash but an OS crash or a power loss may roll the last commits back.
SYNCHRONOUS = ("full", "normal")


#: Database errors that reject one list's writes (a constraint, a statement or a value):
#: that list fails alone, with :class:`StoreError`; the database stays in use.
_REJECTED = (pw.IntegrityError, pw.ProgrammingError, pw.DataError, pw.InterfaceError)
#: What sqlite3 raises, outside its own errors, for a value it cannot bind.
_UNBINDABLE = (UnicodeError, OverflowError)

#: Error texts of failures in the environment, never caused by a broken full-text index.
_ENVIRONMENTAL = ("readonly", "read-only", "locked", "busy", "disk i/o", "full", "unable to open")


def _may_be_index_damage(exc: Exception) -> bool:
    """Whether a write error could come from a corrupt FTS index (worth an FTS check)."""
    text = str(exc).lower()
    return not any(marker in text for marker in _ENVIRONMENTAL)


def _pragmas(read_only: bool, writer: str, synchronous: str) -> list[tuple[str, Any]]:
    if read_only:
        return [("busy_timeout", BUSY_TIMEOUT_MS), ("query_only", 1)]
    pragmas = [
        ("journal_mode", "wal"),
        ("synchronous", synchronous),
        ("foreign_keys", "on"),
        ("busy_timeout", BUSY_TIMEOUT_MS),
    ]
    if writer == "inline":  # the writer process: its Checkpointer keeps the log short
        pragmas.append(("wal_autocheckpoint", FALLBACK_PAGES))
    return pragmas


def read_only_uri(path: Path) -> str:
    """A read-only URI; ``immutable`` when no WAL exists, so nothing is created beside it.

    A read-only connection to a WAL database otherwise creates ``-wal``/``-shm`` files and
    leaves them. Without a ``-wal`` file no writer is active (SQLite removes it on the last
    clean close), so treating the file as immutable for one short check is safe.
    """
    quoted = urllib.parse.quote(str(path.resolve()))
    wal = Path(str(path) + "-wal")
    return f"file:{quoted}?mode=ro" + ("" if wal.exists() else "&immutable=1")


def _pick_writer(asked: str | None) -> str:
    gevent_mode = gevent_threading_patched()
    if asked == "inline":  # the writer process's own handle: one thread, no hub
        if gevent_mode:
            raise StoreError("the database writer 'inline' would run SQLite on the gevent"
                             " hub; use 'thread' or 'process'")
        return asked
    choice = asked or os.environ.get(WRITER_ENV) or ("process" if gevent_mode else "thread")
    if choice not in _WRITERS:
        if not asked:  # a setting, not a database that failed: no degraded mode for a typo
            raise ConfigError(f"{WRITER_ENV} must be 'thread' or 'process', not {choice!r}")
        raise StoreError(f"the database writer must be 'thread' or 'process', not {choice!r}"
                         " (from the caller)")
    if choice == "process" and not gevent_mode:
        if asked:
            raise StoreError("the database writer 'process' needs gevent (monkey-patched"
                             " threading); use 'thread'")
        log.warning("%s=process needs gevent; writing from a thread instead", WRITER_ENV)
        return "thread"
    return choice


#: The routing columns in :class:`RoutingRow` order.
_ROUTING_SELECT = (
    "SELECT session_key, entry, active_turn_token, active_turn_started_at,"
    ' active_turn_internal, resume_pending, suspended, updated_at FROM "routing"'
)


class SessionDB(ClosesOnce):
    """The canonical session database at ``path`` (created with its schema when missing).

    ``read_only=True`` opens an existing database without creating or changing anything
    (``hermes-actors db check``); writes then raise :class:`StoreError`. Opening raises
    :class:`StoreUnavailableError` when the file cannot be opened as a hermes database.

    ``writer`` picks where writes are committed: ``"thread"`` (the worker thread, with the
    reads) or ``"process"`` (a child process, see
    :mod:`~hermes_actors.store.backends.sqlite.writer_process`; needs gevent). The default comes from the
    ``HERMES_ACTORS_DB_WRITER`` environment variable, else ``"process"`` when gevent has
    patched ``threading`` and ``"thread"`` otherwise. ``"inline"`` runs every call in the
    caller's own thread, for a process with a single thread (the writer process itself).

    ``synchronous`` is SQLite's ``PRAGMA synchronous`` on every connection that writes (this
    handle's, and the writer process's): ``"full"`` or ``"normal"`` (:data:`SYNCHRONOUS`).
    """

    #: The backend's kind (``Backend.kind``).
    kind = "sqlite"
    #: Whether the data lives in the home (``Backend.local``).
    local = True

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False,
                 writer: str | None = None, synchronous: str = "full") -> None:
        if synchronous not in SYNCHRONOUS:
            raise ConfigError(f"config key 'store.synchronous': expected one of "
                              f"{', '.join(SYNCHRONOUS)}, got {synchronous!r}")
        #: Where the database lives.
        self.path = Path(path)
        #: ``PRAGMA synchronous`` of the connections that write (``"full"`` or ``"normal"``).
        self.synchronous = synchronous
        #: Whether this handle was opened read-only.
        self.read_only = read_only
        #: ``"thread"``, ``"process"`` or ``"inline"``: where this handle's writes are committed.
        self.writer = "thread" if read_only else _pick_writer(writer)
        self._closed = False
        self._close_lock = threading.Lock()
        self._executor = DbExecutor(name=f"hermes-db:{self.path.name}",
                                    inline=self.writer == "inline")
        self._writer: Any = None
        self._writer_lock: int | None = None
        try:
            if self.writer == "process":  # first: its interpreter starts while we open
                self._start_writer_process()
            self._executor.run(self._open)
        except BaseException:
            try:
                self._stop_writer_process()
            finally:
                self._executor.close()
            raise

    @property
    def executor(self) -> DbExecutor:
        """The executor every call of this handle runs on (its one worker thread and its
        group commit); a test holds it to make callers wait together."""
        return self._executor

    @property
    def writer_pid(self) -> int | None:
        """The pid of the writer process, or ``None`` when writes run in this process."""
        return self._writer.pid if self._writer is not None else None

    def _start_writer_process(self) -> None:
        import gevent

        from hermes_actors.store.backends.sqlite.writer_process import WriterProcess, writer_lock

        self._writer_lock = writer_lock(self.path, BUSY_TIMEOUT_MS / 1000, gevent.sleep)
        try:
            self._writer = WriterProcess(self.path, self._writer_lock, self.synchronous)
        except OSError as exc:
            raise StoreUnavailableError(
                f"cannot start the database writer process for {self.path}: {exc}") from None

    def _stop_writer_process(self) -> None:
        try:
            if self._writer is not None:
                self._writer.close()
        finally:
            if self._writer_lock is not None:
                os.close(self._writer_lock)
                self._writer_lock = None

    # -- lifecycle (worker thread) ----------------------------------------------------------

    def _open(self) -> None:
        if self.read_only:
            if not self.path.is_file():
                raise StoreUnavailableError(f"no database file at {self.path}")
            target, extra = read_only_uri(self.path), {"uri": True}
        else:
            target, extra = str(self.path), {}
        self._database = pw.SqliteDatabase(
            target,
            pragmas=_pragmas(self.read_only, self.writer, self.synchronous),
            thread_safe=False,
            autoconnect=False,
            lock_type="IMMEDIATE",
            timeout=BUSY_TIMEOUT_MS / 1000,
            **extra,
        )
        try:
            self._database.connect()
            if self.read_only:
                version = self._database.execute_sql("PRAGMA user_version").fetchone()[0]
                if version < 1:
                    raise StoreUnavailableError(f"{self.path} is not a hermes_actors database")
                self._schema = version
            else:
                migrate(self._database)
                repair_canonical_tables(self._database)
                self._schema = SCHEMA_VERSION
            self._node_id = self._read_node_id() or ""
            if not self.read_only and not self._node_id:
                self._node_id = self._create_node_id()
            if not self.read_only and self.writer != "inline":
                self._import_home_files()
        except pw.PeeweeException as exc:
            self._database.close()
            raise StoreUnavailableError(f"cannot open {self.path}: {exc}") from None
        except StoreError:
            self._database.close()
            raise
        self._models = bind_models(self._database)
        self._ops = SqliteOps(self._database, self._models)

    def _read_node_id(self) -> str | None:
        if self._schema < FLAGS_SCHEMA:
            return None
        row = self._database.execute_sql(
            "SELECT value FROM meta WHERE name = 'node_id'").fetchone()
        return row[0] if row else None

    def _create_node_id(self) -> str:
        """A new node id for this home: the one a degraded start left in ``<home>/node_id``
        if any (so the node keeps its name), else a fresh one."""
        node = read_node_id_file(self.path.parent) or new_id()
        with self._database.atomic():
            self._database.execute_sql(
                "INSERT INTO meta (name, value) VALUES ('node_id', ?)"
                " ON CONFLICT (name) DO NOTHING", (node,))
        return self._read_node_id() or node

    def _import_home_files(self) -> None:
        def put(found: dict[str, str]) -> None:
            with self._database.atomic():
                for name, value in found.items():
                    self._database.execute_sql(PUT_NODE_VALUE, (self._node_id, name, value))

        import_home_files(self.path.parent, put, self.path.name)

    def close(self) -> None:
        """Close the connection and stop the worker (idempotent)."""
        if not self._first_close():
            return
        try:
            self._stop_writer_process()
        finally:
            try:
                self._executor.run(self._database.close)
            finally:
                self._executor.close()

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise StoreError(f"the session database {self.path} is closed")
        if self._writer is not None:
            self._writer.barrier()  # this call sees every write submitted before it
        return self._executor.run(fn, *args)

    def statistics(self) -> ExecutorStatistics:
        """The worker's record: batches, write transactions (``group_calls``) and the op
        lists they committed (``grouped``), calls waiting now. With a writer process its
        frames count as batches and as group calls."""
        stats = self._executor.statistics()
        w = self._writer
        if w is None:
            return stats
        return ExecutorStatistics(stats.batches + w.frames, stats.calls + w.lists, w.frames,
                                  w.lists, w.largest, stats.waiting + w.waiting())

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one SQL statement on this handle's own connection and return its rows: a
        diagnostic (and fault-injection) hook for tests and tools, never used by the store.
        Bypasses the writer process; a write here commits at once (autocommit)."""
        return self._run(lambda: self._database.execute_sql(statement, params).fetchall())

    def writer_pragma(self, name: str) -> Any:
        """The value of ``PRAGMA name`` on the connection that commits this handle's writes
        (the writer process's when there is one): a diagnostic, e.g. ``synchronous``."""
        if not name.isidentifier():
            raise ValueError(f"not a pragma name: {name!r}")
        if self._writer is not None:
            return self._writer.pragma(name)
        return self._run(
            lambda: self._database.execute_sql(f"PRAGMA {name}").fetchone()[0])

    def set_trace_callback(self, callback: Callable[[str], None] | None) -> None:
        """Call ``callback(sql)`` for every statement run on this process's connection
        (diagnostics, benchmarks, tests; a writer process's statements are not seen)."""
        self._run(lambda: self._database.connection().set_trace_callback(callback))

    # -- writes -----------------------------------------------------------------------------

    def apply(self, ops: list[Op]) -> list[Any]:
        """Apply ``ops`` in order as one transaction; one result per op. See the module doc."""
        if self.read_only:
            raise StoreError(f"{self.path} is open read-only")
        if self._closed:
            raise StoreError(f"the session database {self.path} is closed")
        if self._writer is not None:
            return self._writer.apply(ops)  # encoded at once: no copy needed
        return self._executor.run_grouped(self._apply_group, list(ops))

    def apply_lists(self, lists: list[list[Op]]) -> list[tuple[bool, Any]]:
        """Apply several lists as one group commit: ``(ok, results or error)`` each (what
        a writer process runs for each frame)."""
        if self._closed:
            raise StoreError(f"the session database {self.path} is closed")
        return self._executor.run(self._apply_group, lists)

    def apply_later(self, ops: list[Op], callback: Callable[[bool, Any], None]) -> None:
        """:meth:`apply` without waiting: ``callback(ok, results_or_error)`` once committed
        (under gevent in the hub, so it must not block; see ``DbExecutor.post_grouped``)."""
        if self.read_only:
            raise StoreError(f"{self.path} is open read-only")
        if self._closed:
            raise StoreError(f"the session database {self.path} is closed")
        if self._writer is not None:
            self._writer.post(ops, callback)
            return
        self._executor.post_grouped(self._apply_group, list(ops), callback)

    def _apply_group(self, lists: list[list[Op]]) -> list[tuple[bool, Any]]:
        """Apply several callers' lists in one transaction; ``(ok, results or error)`` each."""
        if len(lists) > 1:
            try:
                with self._database.atomic():
                    # one statement records every list's id (ops.ListId) for the group
                    heads = [(ops[0].list_id, ops[0].at) for ops in lists
                             if ops and type(ops[0]) is ListId]
                    fresh = self._ops.record_lists(heads) if heads else None
                    results = [self._ops.apply_list(ops, fresh) for ops in lists]
            except Exception as exc:  # noqa: BLE001 - replayed one by one below
                self._ops.committed(False)
                log.debug("group commit of %d lists failed (%s); applying them one by one",
                          len(lists), exc)
            except BaseException:
                self._ops.committed(False)
                raise
            else:
                self._ops.committed(True)
                return [(True, r) for r in results]
        outcomes: list[tuple[bool, Any]] = []
        for ops in lists:
            try:
                outcomes.append((True, self._apply(ops)))
            except Exception as exc:  # noqa: BLE001 - raised in that list's caller
                outcomes.append((False, exc))
        return outcomes

    def _apply(self, ops: list[Op]) -> list[Any]:
        fts_repaired = False
        failures = 0
        while True:
            try:
                with self._database.atomic():
                    results = self._ops.apply_list(ops)
            except pw.DatabaseError as exc:
                self._ops.committed(False)
                if (
                    not fts_repaired
                    and _may_be_index_damage(exc)
                    and fts.status(self._database) == "corrupt"
                ):
                    fts_repaired = True
                    log.warning("full-text index is corrupt (%s); rebuilding it", exc)
                    try:
                        fts.rebuild(self._database)
                    except pw.DatabaseError as rebuild_exc:
                        raise StoreUnavailableError(
                            f"cannot write {self.path}: {exc}; rebuilding the full-text "
                            f"index failed too: {rebuild_exc}"
                        ) from exc
                    continue
                if isinstance(exc, _REJECTED):  # this list's values or statements: not an
                    # outage (retrying or a failover would fail the same way)
                    raise StoreRejectedError(f"write rejected by {self.path}: {exc}") from exc
                failures += 1
                if isinstance(exc, pw.OperationalError) and failures < WRITE_ATTEMPTS:
                    log.warning("write to %s failed (%s); retrying", self.path, exc)
                    continue
                raise StoreUnavailableError(f"cannot write {self.path}: {exc}") from exc
            except _UNBINDABLE as exc:  # a value sqlite3 cannot bind (a lone surrogate, an
                self._ops.committed(False)  # integer over 64 bits)
                raise StoreRejectedError(f"write rejected by {self.path}: {type(exc).__name__}: "
                                 f"{exc}") from exc
            except BaseException:
                self._ops.committed(False)
                raise
            self._ops.committed(True)
            return results

    # -- reads ------------------------------------------------------------------------------

    def _read(self, fn: Callable[[], T]) -> T:
        def guarded() -> T:
            try:
                return fn()
            except pw.PeeweeException as exc:
                if self._closed:  # close() ran between the check and this read
                    raise StoreError(f"the session database {self.path} is closed") from exc
                raise StoreUnavailableError(f"cannot read {self.path}: {exc}") from exc

        return self._run(guarded)

    # routing: flags are columns (see :mod:`hermes_actors.store.routing`)

    def _routing(self, where: str = "", params: tuple = (),
                 keep: Callable[[RoutingRow], bool] = lambda row: True) -> list[RoutingRow]:
        """Routing rows ``WHERE where``; ``keep`` is the same test in Python, for a database
        opened read-only before its flags became columns (they are then in the text)."""
        if self._schema < FLAGS_SCHEMA:
            return [row for row in self._text_flag_rows() if keep(row)]
        # raw: peewee's row iteration costs more than the read itself at 100,000 rows
        rows = self._database.execute_sql(_ROUTING_SELECT + where, params).fetchall()
        return [RoutingRow(key, text, RoutingFlags(token, started, bool(internal),
                                                   bool(resume), bool(suspended), updated))
                for key, text, token, started, internal, resume, suspended, updated in rows]

    def _text_flag_rows(self) -> list[RoutingRow]:
        out = []
        for key, text in self._database.execute_sql('SELECT session_key, entry FROM "routing"'):
            try:
                data = json.loads(text)
            except ValueError:
                data = None
            out.append(RoutingRow(key, text,
                                  flags_from_data(data) if isinstance(data, dict) else NO_FLAGS))
        return out

    def routing_keys(self) -> dict[str, None]:
        """Every routing key, as an ordered set (``dict`` with ``None`` values), read from
        the key index without the entries' text."""
        return self._read(self._routing_keys)

    def _routing_keys(self) -> dict[str, None]:
        # One row of every key joined by NUL (a key never holds one: validate_session_key),
        # split in C: a row a key cost ~0.8 us each (a step, the GIL handed back and forth,
        # a tuple), 40 % of this read at 100,000 keys, itself a sixth of a crash recovery.
        # Should a key hold a NUL after all (written by another program), there are more
        # parts than rows, and the keys are read a row each.
        joined, count = self._database.execute_sql(
            'SELECT group_concat(session_key, char(0)), count(*) FROM "routing"').fetchone()
        parts = joined.split("\0") if joined is not None else []
        if len(parts) == count:
            return dict.fromkeys(parts)
        return dict.fromkeys(map(_first, self._database.execute_sql(
            'SELECT session_key FROM "routing"')))

    def routing_rows(self) -> list[RoutingRow]:
        """Every routing row."""
        return self._read(self._routing)

    def routing_row(self, session_key: str) -> RoutingRow | None:
        """One routing row, or ``None``."""
        rows = self._read(lambda: self._routing(
            " WHERE session_key = ?", (session_key,), lambda row: row.session_key == session_key))
        return rows[0] if rows else None

    def routing_flagged(self) -> list[RoutingRow]:
        """The rows with a turn marker or a pending resume (from the partial index)."""
        return self._read(lambda: self._routing(f" WHERE {ROUTING_FLAGGED}", (),
                                                lambda row: needs_recovery(row.flags)))

    def routing_idle_before(self, cutoff: float, limit: int | None = None
                            ) -> list[RoutingRow]:
        """Pruning's candidates: unflagged rows last active before ``cutoff`` or never
        (``limit``: the longest idle first, at most that many)."""
        where = (" WHERE (updated_at < ? OR updated_at IS NULL) AND active_turn_token IS NULL"
                 " AND resume_pending = 0 AND suspended = 0")
        params: tuple = (cutoff,)
        if limit is not None:
            where += " ORDER BY updated_at ASC NULLS LAST, session_key LIMIT ?"
            params = (cutoff, limit)
        rows = self._read(lambda: self._routing(
            where, params, lambda row: is_prunable(row.flags, cutoff)))
        return rows if limit is None else longest_idle(rows, limit)

    # the node

    def node_id(self) -> str:
        """The home's node id (created at the first open)."""
        return self._node_id

    def node_values(self, node_id: str) -> dict[str, str]:
        """The named state values of ``node_id``."""
        return self._read(lambda: dict(self._database.execute_sql(
            "SELECT name, value FROM node_state WHERE node_id = ?", (node_id,)).fetchall()))

    def session_restarts(self, node_id: str) -> dict[str, int]:
        """The node's stuck-loop counts (its ``restart_counts`` value: one node here)."""
        return parse_restart_counts(self.node_values(node_id).get("restart_counts"))

    def _messages(self, where: str, params: tuple, tail: str = "") -> list[dict[str, Any]]:
        rows = self._database.execute_sql(
            "SELECT role, content, tool_name, tool_calls, timestamp, token_count"
            f" FROM messages WHERE {where} ORDER BY id{tail}",
            params,
        ).fetchall()
        return [
            public_message(role, content, name, json.loads(calls) if calls else None, ts, tok)
            for role, content, name, calls, ts, tok in rows
        ]

    def load_messages(self, session_id: str,
                      before_turn: str | None = None) -> list[dict[str, Any]]:
        """The transcript of ``session_id`` in order (§17.13 shape); with ``before_turn``
        only the messages written before that turn's first one."""
        if before_turn is None:
            return self._read(lambda: self._messages("session_id = ?", (session_id,)))
        return self._read(lambda: self._messages(
            "session_id = ? AND id < COALESCE((SELECT MIN(id) FROM messages"
            " WHERE session_id = ? AND turn_token = ?), 9223372036854775807)",
            (session_id, session_id, before_turn),
        ))

    def load_tail(self, session_id: str, limit: int) -> list[dict[str, Any]]:
        """The last ``limit`` messages of ``session_id`` in order; only those rows are
        read (newest first by the primary key, ``LIMIT``, then reversed)."""
        if limit <= 0:
            return []
        newest = self._read(lambda: self._messages(
            "session_id = ?", (session_id, int(limit)), " DESC LIMIT ?"))
        newest.reverse()
        return newest

    def message_count(self, session_id: str) -> int:
        """How many transcript messages ``session_id`` has."""
        return self._read(lambda: self._database.execute_sql(
            "SELECT COUNT(*) FROM messages WHERE session_id = ?", (session_id,)).fetchone()[0])

    def turn_reply(self, session_id: str, token: str) -> dict[str, Any] | None:
        """The last persisted final reply (``is_reply``) of turn ``token``, or ``None``."""
        rows = self._read(
            lambda: self._messages(
                "session_id = ? AND turn_token = ? AND is_reply = 1",
                (session_id, token),
                " DESC LIMIT 1",
            )
        )
        return rows[0] if rows else None

    def turn_replies(self, turns: list[tuple[str, str, float | None]]
                     ) -> dict[tuple[str, str], str]:
        """``(session_id, token) -> content`` of each turn's reply, one read job: its last
        final reply row, else a reply its transcript ends with that was written after the
        marker's start (``started``, epoch; ``transcript.reply_after_marker``)."""

        def read() -> dict[tuple[str, str], str]:
            found = {}
            for sid, token, started in turns:
                row = self._database.execute_sql(
                    "SELECT content FROM messages WHERE session_id = ? AND turn_token = ?"
                    " AND is_reply = 1 ORDER BY id DESC LIMIT 1", (sid, token)).fetchone()
                if row is not None:
                    found[(sid, token)] = row[0]
                    continue
                last = self._database.execute_sql(
                    f"SELECT {', '.join(LAST_ROW_COLUMNS)} FROM messages"
                    " WHERE session_id = ? ORDER BY id DESC LIMIT 1", (sid,)).fetchone()
                reply = reply_after_last_row(last, token, started)
                if reply is not None:
                    found[(sid, token)] = reply
            return found

        return self._read(read)

    def pending_inbox(self) -> list[tuple[str, dict[str, Any]]]:
        """Unconsumed inbox events as ``(session_key, payload)``, in arrival (``seq``) order."""
        i = self._models.Inbox
        rows = self._read(
            lambda: list(
                i.select(i.session_key, i.payload)
                .where(i.consumed_at.is_null())
                .order_by(i.seq)
                .tuples()
            )
        )
        return [(key, json.loads(payload)) for key, payload in rows]

    def ledger_rows(
        self, states: tuple[str, ...] | None = None, session_key: str | None = None
    ) -> list[dict[str, Any]]:
        """Ledger rows as dicts of every column, oldest first, optionally filtered."""
        d = self._models.Delivery

        def query() -> list[dict[str, Any]]:
            q = d.select()
            if states is not None:
                q = q.where(d.state.in_(list(states)))
            if session_key is not None:
                q = q.where(d.session_key == session_key)
            return list(q.order_by(d.created_at, d.obligation_id).dicts())

        return self._read(query)

    def ledger_counts(self) -> dict[str, int]:
        """How many ledger rows are in each state."""
        return self._read(lambda: dict(self._database.execute_sql(
            "SELECT state, count(*) FROM deliveries GROUP BY state").fetchall()))

    def outbox_read(self, platform: str, chat_id: str | None, after: int,
                    limit: int) -> list[dict[str, Any]]:
        """One chat's outbox rows after cursor ``after``, oldest first."""
        chat = "chat_id IS NULL" if chat_id is None else "chat_id = ?"
        params: tuple = (platform,) + (() if chat_id is None else (chat_id,))

        def read() -> list[dict[str, Any]]:
            rows = self._database.execute_sql(
                f"SELECT {', '.join(OUTBOX_COLUMNS)} FROM outbox"
                f" WHERE platform = ? AND {chat} AND cursor > ? ORDER BY cursor LIMIT ?",
                params + (int(after), int(limit))).fetchall()
            return [dict(zip(OUTBOX_COLUMNS, row, strict=True)) for row in rows]

        return self._read(read)

    def outbox_head(self) -> int:
        """The highest outbox cursor, 0 when empty."""
        return self._read(lambda: self._database.execute_sql(
            "SELECT max(cursor) FROM outbox").fetchone()[0] or 0)

    def rows(self, table: str) -> list[dict[str, Any]]:
        """Every row of a diagnostic table (``protocol.DIAGNOSTIC_TABLES``), in rowid order."""
        if table not in DIAGNOSTIC_TABLES:
            raise ValueError(f"not a diagnostic table: {table!r}")

        def read() -> list[dict[str, Any]]:
            cursor = self._database.execute_sql(f'SELECT * FROM "{table}" ORDER BY rowid')
            names = [column[0] for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

        return self._read(read)

    def session_row(self, session_id: str) -> dict[str, Any] | None:
        """The ``sessions`` row of ``session_id`` as a dict (``source`` decoded), or ``None``."""
        s = self._models.Session
        row = self._read(lambda: s.select().where(s.id == session_id).dicts().first())
        if row is not None and row["source"]:
            row["source"] = json.loads(row["source"])
        return row

    def counts(self) -> dict[str, int]:
        """Row counts: ``sessions``, ``messages``, ``routing``, ``pending_deliveries``."""

        def query() -> dict[str, int]:
            one = self._database.execute_sql
            return {
                "sessions": one("SELECT count(*) FROM sessions").fetchone()[0],
                "messages": one("SELECT count(*) FROM messages").fetchone()[0],
                "routing": one("SELECT count(*) FROM routing").fetchone()[0],
                "pending_deliveries": one(
                    "SELECT count(*) FROM deliveries WHERE state IN ('pending', 'attempting',"
                    " 'failed')"
                ).fetchone()[0],
            }

        return self._read(query)

    # -- full-text index and integrity ------------------------------------------------------

    def search(self, query: str, limit: int = 20) -> list[dict[str, Any]]:
        """Transcript messages matching ``query`` (FTS5 syntax), with ``id`` and ``session_id``,
        best match first. A malformed query raises :class:`StoreError`."""
        return self._run(fts.search, self._database, query, limit)

    def check_fts(self) -> str:
        """``"ok"``, ``"missing"`` or ``"corrupt"``, from FTS5's own integrity check."""
        return self._run(lambda: fts.status(self._database, read_only=self.read_only))

    def rebuild_fts(self) -> None:
        """Drop and rebuild the full-text index from ``messages`` (no message is touched)."""
        if self.read_only:
            raise StoreError(f"{self.path} is open read-only")
        self._run(fts.rebuild, self._database)

    def detach_fts(self) -> None:
        """Drop the full-text index and its triggers; messages stay, search stops working."""
        if self.read_only:
            raise StoreError(f"{self.path} is open read-only")
        self._run(fts.detach, self._database)

    def integrity_check(self) -> str:
        """``"ok"``, or SQLite's first integrity complaint."""

        def check() -> str:
            try:
                rows = self._database.execute_sql("PRAGMA integrity_check").fetchall()
            except pw.DatabaseError as exc:
                return str(exc)
            messages = [row[0] for row in rows]
            return "ok" if messages == ["ok"] else "; ".join(messages[:5])

        return self._run(check)
