"""``Backend``: everything the store's domain asks of a persistence backend, written down.

The domain (:class:`~hermes_actors.store.store.SessionStore` and its parts) decides; a
backend persists and answers. Writes are lists of operation records
(:mod:`~hermes_actors.store.ops`) applied as one transaction each; reads are the methods
below, each a question the domain really asks (recovery's candidates, pruning's candidates,
a turn's reply, the outbox after a cursor...), never "give me your connection". Backends:
:class:`~hermes_actors.store.backends.sqlite.db.SessionDB` (the embedded default),
:class:`~hermes_actors.store.backends.postgres.backend.PostgresBackend` (a database server)
and :class:`~hermes_actors.store.backends.files.backend.FilesBackend` (degraded mode:
routing in ``sessions.json``, transcripts in JSONL files, inbox, ledger and outbox in
memory). The conformance suite (``tests/store/conformance``) runs the same tests against
every backend. The database backends also answer :class:`DatabaseTools`, what the
``hermes-actors db`` commands and full-text search ask.

Failure contract: a read or write that fails because the backend cannot be used (a database
that cannot be opened, written or read) raises
:class:`~hermes_actors.errors.StoreUnavailableError`, on which the store fails over to the
files backend and re-applies the write there (a ``local`` backend), or reports an outage and
fails the call (a database server); any other :class:`~hermes_actors.errors.StoreError`
fails only the call (a constraint violation is a programming error).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from hermes_actors.store.ops import Op
from hermes_actors.store.routing import RoutingRow

__all__ = ["DIAGNOSTIC_TABLES", "NODE_VALUES", "OUTBOX_COLUMNS", "Backend", "DatabaseTools"]

#: The tables a backend can list for diagnostics (:meth:`Backend.rows`).
DIAGNOSTIC_TABLES = ("sessions", "messages", "routing", "inbox", "deliveries", "outbox",
                     "node_state")
#: The columns of an outbox row, in the order reads return them.
OUTBOX_COLUMNS = (
    "cursor", "session_key", "platform", "chat_id", "thread_id", "text", "kind", "created_at",
    "in_reply_to",
)  # fmt: skip
#: The named values of a node's state (:class:`~hermes_actors.store.ops.NodeValue`).
NODE_VALUES = ("clean_shutdown", "restart_counts", "restart_storm", "imported_journal")


@runtime_checkable
class Backend(Protocol):
    """A persistence backend of the session store (see the module docstring)."""

    #: ``"sqlite"``, ``"postgres"`` or ``"files"``: what ``hermes-actors db check`` reports
    #: as the mode. Only the files backend is *degraded*.
    kind: str

    #: Whether the data lives in this gateway's home (SQLite, the files): when such a
    #: backend fails, the home's files stand in for it (degraded mode). A database server
    #: (``False``) has no local stand-in: its failures are an *outage* the gateway waits out
    #: (the store reports it, see :class:`~hermes_actors.store.failover.FailOver`).
    local: bool

    # -- writes -----------------------------------------------------------------------------

    def apply(self, ops: list[Op]) -> list[Any]:
        """Apply ``ops`` in order as one transaction; one result per op (``None`` for most)."""
        ...

    def apply_later(self, ops: list[Op], callback: Callable[[bool, Any], None]) -> None:
        """:meth:`apply` without waiting: ``callback(ok, results_or_error)`` once it is
        durable (under gevent in the hub: the callback must not block)."""
        ...

    # -- identity ---------------------------------------------------------------------------

    def node_id(self) -> str:
        """The id of the gateway node this store belongs to: created (and kept durably) at
        the first call, the same at every later start on the same home."""
        ...

    def node_values(self, node_id: str) -> dict[str, str]:
        """The named state values of ``node_id`` (JSON texts), see :data:`NODE_VALUES`."""
        ...

    def session_restarts(self, node_id: str) -> dict[str, int]:
        """The stuck-loop counts :class:`~hermes_actors.store.ops.SetSessionRestarts`
        keeps (``session_key -> count``, positive only): every node's on a database of a
        cluster, ``node_id``'s own on a store of one node."""
        ...

    # -- routing ----------------------------------------------------------------------------

    def routing_keys(self) -> dict[str, None]:
        """Every routing key, as an insertion-ordered set."""
        ...

    def routing_rows(self) -> list[RoutingRow]:
        """Every routing row."""
        ...

    def routing_row(self, session_key: str) -> RoutingRow | None:
        """One routing row, or ``None``."""
        ...

    def routing_flagged(self) -> list[RoutingRow]:
        """The rows with a turn marker or a pending resume (recovery's work list)."""
        ...

    def routing_idle_before(self, cutoff: float, limit: int | None = None
                            ) -> list[RoutingRow]:
        """Pruning's candidates: rows with no marker, no pending resume, not suspended, and
        last active before ``cutoff`` (epoch seconds) or never; with ``limit``, at most that
        many, the longest idle first (by ``updated_at``, rows without one last)."""
        ...

    # -- transcripts ------------------------------------------------------------------------

    def load_messages(self, session_id: str,
                      before_turn: str | None = None) -> list[dict[str, Any]]:
        """A session's transcript in order, in the shape of §17.13 (only the messages
        before turn ``before_turn``'s first one, when given)."""
        ...

    def load_tail(self, session_id: str, limit: int) -> list[dict[str, Any]]:
        """The last ``limit`` messages of a session's transcript, in order (§17.13 shape),
        read without reading the rest (``GET /v1/sessions/<key>`` shows only a tail)."""
        ...

    def message_count(self, session_id: str) -> int:
        """How many transcript messages ``session_id`` has."""
        ...

    def turn_replies(self, turns: list[tuple[str, str, float | None]]
                     ) -> dict[tuple[str, str], str]:
        """``(session_id, token) -> content`` of the reply of each ``(session_id, token,
        marker start)`` turn that has one: its last final reply row, else a reply the
        transcript ends with (:func:`~hermes_actors.store.transcript.reply_after_marker`)."""
        ...

    # -- inbox, ledger, outbox --------------------------------------------------------------

    def pending_inbox(self) -> list[tuple[str, dict[str, Any]]]:
        """Unconsumed inbox events as ``(session_key, payload)`` in arrival order."""
        ...

    def ledger_rows(
        self, states: tuple[str, ...] | None = None, session_key: str | None = None
    ) -> list[dict[str, Any]]:
        """Ledger rows (every column) in creation order, optionally filtered."""
        ...

    def ledger_counts(self) -> dict[str, int]:
        """How many ledger rows are in each state (only states that have rows)."""
        ...

    def outbox_read(self, platform: str, chat_id: str | None, after: int,
                    limit: int) -> list[dict[str, Any]]:
        """The outbox rows of one chat with a cursor above ``after``, oldest first."""
        ...

    def outbox_head(self) -> int:
        """The highest outbox cursor, 0 when the outbox is empty."""
        ...

    # -- diagnostics and lifecycle ----------------------------------------------------------

    def rows(self, table: str) -> list[dict[str, Any]]:
        """Every row of one of :data:`DIAGNOSTIC_TABLES`, as stored (tests, ``db`` tools)."""
        ...

    def close(self) -> None:
        """Release the backend's resources (idempotent)."""
        ...


@runtime_checkable
class ShardReads(Protocol):
    """Reads a database of a cluster answers for some shards only (``cluster_shard`` in
    SQL) instead of for every session; ``shards`` is the cluster's shard count."""

    def shard_routing_rows(self, shards: int, wanted: list[int]) -> list[RoutingRow]:
        """The routing rows of the sessions of the ``wanted`` shards."""
        ...

    def shard_pending_inbox(self, shards: int, wanted: list[int]
                            ) -> list[tuple[str, dict[str, Any]]]:
        """``pending_inbox`` for the sessions of the ``wanted`` shards."""
        ...

    def shard_pending_rows(self, shards: int, wanted: list[int]
                           ) -> list[tuple[str, str, str]]:
        """``shard_pending_inbox`` unparsed: ``(session_key, event_id, payload text)``."""
        ...


@runtime_checkable
class DatabaseTools(Backend, Protocol):
    """What a database backend (SQLite, PostgreSQL) offers beyond :class:`Backend`: full-text
    search and the health checks and repairs of ``hermes-actors db check|rebuild-fts``. The
    files backend of degraded mode has none of them."""

    def search(self, query: str, limit: int = 20) -> list[dict[str, Any]]:
        """Transcript messages matching ``query`` (FTS5 syntax), each with ``id`` and
        ``session_id``, best match first; a malformed query raises ``StoreError``."""
        ...

    def check_fts(self) -> str:
        """The full-text index: ``"ok"``, ``"missing"`` or ``"corrupt"``."""
        ...

    def rebuild_fts(self) -> None:
        """Drop and rebuild the full-text index from ``messages`` (no message is touched)."""
        ...

    def detach_fts(self) -> None:
        """Drop the full-text index; messages stay, search is refused until a rebuild."""
        ...

    def integrity_check(self) -> str:
        """``"ok"``, or the database's first complaints."""
        ...

    def counts(self) -> dict[str, int]:
        """Row counts: ``sessions``, ``messages``, ``routing``, ``pending_deliveries``."""
        ...

    def session_row(self, session_id: str) -> dict[str, Any] | None:
        """The ``sessions`` row of ``session_id`` as a dict (``source`` decoded), or ``None``."""
        ...
