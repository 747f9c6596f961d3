"""Moving a home's store from SQLite to PostgreSQL: ``hermes-actors db migrate --to DSN``.

:func:`transfer` copies every canonical table of ``<home>/state.db`` row for row into an
empty PostgreSQL database: ids, cursors and sequence numbers, timestamps, the routing flag
columns, the ledger's states and owners, the inbox's consumption and the node's state, so
that a gateway started on the copy finds exactly what it would have found in ``state.db``
(the same markers to judge, the same owed rows to sweep, the same inbox to replay). The
tables are listed in :data:`TABLES`, in the order they are loaded (``sessions`` before the
``messages`` that reference them).

The two sides:

* the source (:class:`~hermes_actors.store.backends.sqlite.export.SqliteSnapshot`) is one
  read-only snapshot of ``state.db``: no migration, no writer process, nothing in the home
  changes;
* the target (:class:`~hermes_actors.store.backends.postgres.load.PostgresLoad`) is ONE
  transaction: the schema, the check that the database holds no rows, the ``COPY`` of every
  table, the rebuilt indexes, the identity sequences moved past the copied ids (and past any
  id SQLite handed out before a prune: a cursor is never reused), and the per-table count
  check all commit together or not at all. A failure leaves the database as it was, so the
  command can simply be run again once its cause is fixed.

The node id stays the home's: the SQLite backend keeps it in ``state.db`` (``meta``), the
PostgreSQL backend in ``<home>/node_id``, so it is written there before the commit (the
node's state rows and the ledger's owners name it). ``meta`` itself is not copied: it holds
nothing else. The full-text index on PostgreSQL is an index expression, built from the
copied messages; there is nothing of FTS5's to copy.

The refusals a user can cause (a target with rows, a ``state.db`` of another schema
version, a home without one) raise :class:`~hermes_actors.errors.UsageError`; an
unreachable server :class:`~hermes_actors.errors.StoreUnreachableError`; a copy that failed
(a row the server refused, a count that does not match) :class:`~hermes_actors.errors.
StoreError`. The home lock and the configuration are the command's business
(:mod:`hermes_actors.process.migrate`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hermes_actors.errors import ConfigError, StoreError

if TYPE_CHECKING:
    from hermes_actors.store.backends.postgres.load import PostgresLoad
    from hermes_actors.store.backends.sqlite.export import SqliteSnapshot

__all__ = ["BATCH_ROWS", "NOT_COMMITTED", "TABLES", "Progress", "Table", "TransferReport", "transfer"]

#: What every failure of the copy adds: the target is as it was.
NOT_COMMITTED = "nothing was committed: fix the cause and run db migrate again"
#: Rows read from SQLite per batch (and the step of the progress reports of big tables).
BATCH_ROWS = 5_000

#: ``progress(line)``: told how the copy goes (every 100,000 rows of a big table, when a
#: table is done, when the indexes are built), one line at a time.
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Table:
    """One canonical table as both backends have it."""

    #: The table's name (the same on both sides).
    name: str
    #: Every column, in the order they are copied.
    columns: tuple[str, ...]
    #: The columns that are flags: ``INTEGER`` 0/1 on SQLite, ``boolean`` on PostgreSQL.
    flags: tuple[str, ...] = ()
    #: The identity column (SQLite ``AUTOINCREMENT``), whose sequence must follow the copy.
    identity: str | None = None


#: The canonical tables, in load order (``messages`` references ``sessions``).
TABLES: tuple[Table, ...] = (
    Table("sessions", ("id", "session_key", "source", "started_at", "ended_at", "end_reason",
                       "parent_session_id", "message_count", "input_tokens", "output_tokens",
                       "last_prompt_tokens")),
    Table("messages", ("id", "session_id", "role", "content", "tool_name", "tool_calls",
                       "timestamp", "token_count", "turn_token", "is_reply"),
          flags=("is_reply",), identity="id"),
    Table("routing", ("session_key", "entry", "updated_at", "active_turn_token",
                      "active_turn_started_at", "active_turn_internal", "resume_pending",
                      "suspended"),
          flags=("active_turn_internal", "resume_pending", "suspended")),
    Table("deliveries", ("obligation_id", "session_key", "platform", "chat_id", "thread_id",
                         "content", "kind", "state", "attempts", "owner_node", "owner_boot",
                         "created_at", "updated_at", "last_error", "in_reply_to")),
    Table("inbox", ("seq", "event_id", "session_key", "payload", "internal", "received_at",
                    "consumed_at", "consumed_reason", "ingress_key"),
          flags=("internal",), identity="seq"),
    Table("outbox", ("cursor", "session_key", "platform", "chat_id", "thread_id", "text",
                     "kind", "created_at", "in_reply_to"), identity="cursor"),
    Table("node_state", ("node_id", "name", "value")),
)


@dataclass
class TransferReport:
    """What :func:`transfer` copied."""

    #: The target, as it may be shown (password masked).
    where: str
    #: The home's node id, now also in ``<home>/node_id`` (``None``: the home had none).
    node_id: str | None
    #: Table -> rows in ``state.db``.
    source_counts: dict[str, int] = field(default_factory=dict)
    #: Table -> rows in the target after the copy (read inside the copy's transaction).
    target_counts: dict[str, int] = field(default_factory=dict)
    #: Identity column (``messages.id``) -> the last value its sequence has handed out.
    sequences: dict[str, int] = field(default_factory=dict)
    #: Seconds the whole transfer took.
    seconds: float = 0.0


def transfer(home: str | Path, dsn: str, *, progress: Progress | None = None) -> TransferReport:
    """Copy ``<home>/state.db`` into the empty PostgreSQL database ``dsn`` (see the module
    docstring); returns what was copied, verified. Nothing is written to the target unless
    everything is."""
    from hermes_actors.store.backends.files.node_files import write_node_id_file
    from hermes_actors.store.backends.sqlite.export import SqliteSnapshot

    try:
        from hermes_actors.store.backends.postgres.load import PostgresLoad
    except ModuleNotFoundError as exc:
        raise ConfigError(f"db migrate needs the {exc.name!r} package; "
                          "install hermes_actors[postgres]") from None
    started = time.monotonic()
    home = Path(home)
    say: Progress = progress or (lambda line: None)
    with SqliteSnapshot(home / "state.db") as source:
        counts = {table.name: source.count(table.name) for table in TABLES}
        with PostgresLoad(dsn) as target:
            report = TransferReport(target.where, source.node_id, source_counts=counts)
            target.prepare()
            for table in TABLES:
                _copy_table(source, target, table, counts[table.name], say)
            begun = time.monotonic()
            target.finish_schema()
            say(f"built the indexes in {time.monotonic() - begun:.1f}s")
            for table in TABLES:
                if table.identity is not None:
                    report.sequences[f"{table.name}.{table.identity}"] = target.set_sequence(
                        table.name, table.identity, source.high_water(table.name))
            report.target_counts = target.counts(counts)
            _verify(counts, report.target_counts, target.where)
            if source.node_id is not None:
                try:
                    write_node_id_file(home, source.node_id)
                except OSError as exc:
                    raise StoreError(f"cannot keep the node id in {home}: {exc}; "
                                     f"{NOT_COMMITTED}") from None
            target.commit()
    report.seconds = time.monotonic() - started
    return report


def _copy_table(source: SqliteSnapshot, target: PostgresLoad, table: Table, total: int, say: Progress) -> None:
    begun = time.monotonic()

    def copying(done: int) -> None:
        say(f"copying {table.name}: {done}/{total} rows")

    written = target.copy(table.name, table.columns,
                          source.batches(table.name, table.columns, table.flags, BATCH_ROWS),
                          copying)
    if written != total:
        raise StoreError(f"{table.name}: read {written} rows from state.db, expected {total}; "
                         f"{NOT_COMMITTED}")
    say(f"copied {table.name}: {written} rows in {time.monotonic() - begun:.1f}s")


def _verify(source: dict[str, int], target: dict[str, int], where: str) -> None:
    """Refuse to commit a copy whose row counts differ from the source's."""
    wrong = [f"{name}: {count} in state.db, {target.get(name)} in {where}"
             for name, count in source.items() if target.get(name) != count]
    if wrong:
        raise StoreError(f"the copy does not match state.db ({'; '.join(wrong)}); "
                         f"{NOT_COMMITTED}")
