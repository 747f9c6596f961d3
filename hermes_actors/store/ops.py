"""Write operations as records, and the backend protocol that applies them.

The store never calls "insert this, then update that" on a database. It describes a change as
a short list of operations and hands the list to a backend, which applies it as ONE
transaction: a turn start (marker + user message + inbox consumption) is one list, a reset
(end old row + create new row + routing upsert) is another. This keeps three things simple:

* atomicity: every public store method is one ``apply`` call;
* retries: a failed transaction is re-run from the same records, in order (FTS repair);
* backends: SQLite (:class:`~hermes_actors.store.backends.sqlite.db.SessionDB`), the degraded in-memory/JSONL
  backend, and later PostgreSQL implement the same small protocol. Group commit would merge
  several lists into one transaction without changing any caller.

Times are epoch seconds taken from the store's clock, so backends never read a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "AcceptEvent",
    "AddTokens",
    "Backend",
    "ConsumeEvents",
    "CreateSession",
    "DeleteRouting",
    "EndSession",
    "LedgerClaim",
    "LedgerFinish",
    "LedgerPrune",
    "LedgerRecord",
    "OUTBOX_OPS",
    "Op",
    "OutboxAppend",
    "OutboxHead",
    "OutboxPrune",
    "OutboxRead",
    "PruneInbox",
    "PutRouting",
    "AppendMessage",
    "WithdrawEvent",
]

#: Ops are records built on the hot path (a turn builds about ten of them): plain dataclasses,
#: since a frozen one's ``__init__`` pays an ``object.__setattr__`` per field (``LedgerRecord``:
#: 1.0 → 0.37 µs). Nothing changes an op once built; treat them as immutable.
_record = dataclass


@_record
class CreateSession:
    """Insert a ``sessions`` row (ignored when the id exists)."""

    session_id: str
    session_key: str | None
    source: dict[str, Any] | None
    started_at: float
    parent_session_id: str | None = None


@_record
class EndSession:
    """Close a ``sessions`` row once (an already ended row keeps its first reason)."""

    session_id: str
    reason: str
    ended_at: float


@_record
class PutRouting:
    """Upsert one ``routing`` row: the whole entry of one session key (``entry``: JSON text,
    serialised by the store before any I/O so a bad value fails the call, not a backend)."""

    session_key: str
    entry: str
    updated_at: float


@_record
class DeleteRouting:
    """Remove routing rows (transcripts and ``sessions`` rows stay)."""

    session_keys: tuple[str, ...]


@_record
class AppendMessage:
    """Append one normalised transcript message and bump the session's ``message_count``."""

    session_id: str
    message: dict[str, Any]
    turn_token: str | None = None
    is_reply: bool = False


@_record
class AddTokens:
    """Add token usage to a ``sessions`` row; ``last_prompt_tokens`` replaces when given."""

    session_id: str
    input_tokens: int = 0
    output_tokens: int = 0
    last_prompt_tokens: int | None = None


@_record
class AcceptEvent:
    """Insert an inbound event into the durable inbox (idempotent by ``event_id``);
    ``payload`` is the JSON text of ``MessageEvent.to_dict()``. With an ``ingress_key``
    (``MessageEvent.ingress_key``) that an earlier event holds, nothing is inserted: the
    check and the insert are this one op. Returns the id of the event that holds the key
    (this one's when it was accepted)."""

    event_id: str
    session_key: str
    payload: str
    internal: bool
    received_at: float
    ingress_key: str | None = None


@_record
class WithdrawEvent:
    """Delete an unconsumed inbox event (a message refused after it was made durable:
    nothing of it stays, so a retry of it is accepted)."""

    event_id: str


@_record
class ConsumeEvents:
    """Mark inbox events consumed (already consumed ones keep their first reason)."""

    event_ids: tuple[str, ...]
    reason: str
    at: float


@_record
class PruneInbox:
    """Delete consumed inbox rows consumed before ``before``; returns the count."""

    before: float


@_record
class LedgerRecord:
    """Record a delivery obligation as ``pending`` (idempotent by ``obligation_id``)."""

    obligation_id: str
    session_key: str
    platform: str
    chat_id: str | None
    thread_id: str | None
    content: str
    kind: str
    at: float
    #: The inbound event ids this answers, space-separated (``None``: unknown).
    in_reply_to: str | None = None


@_record
class LedgerClaim:
    """Claim an obligation for one sending process; returns whether it was granted."""

    obligation_id: str
    owner_pid: int
    owner_started_at: float
    at: float


@_record
class LedgerFinish:
    """Record the outcome of an attempt; returns the resulting state or ``None`` if unknown."""

    obligation_id: str
    state: str
    error: str | None
    at: float


@_record
class LedgerPrune:
    """Delete ``delivered``/``abandoned`` rows last updated before ``before``; returns count."""

    before: float


# -- outbox (replies read over HTTP, §17.32) ---------------------------------------------------
# The reads are operations too, so the degraded backend (which has no SQL) answers them from
# memory through the same ``apply`` call; see :mod:`hermes_actors.store.outbox`.


@_record
class OutboxAppend:
    """Append a reply to the outbox; returns its cursor. ``floor`` is the highest cursor the
    caller has seen: a backend that numbers rows itself (degraded) continues above it."""

    session_key: str
    platform: str
    chat_id: str | None
    thread_id: str | None
    text: str
    kind: str
    created_at: float
    floor: int = 0
    #: The inbound event ids the reply answers, space-separated (``None``: unknown).
    in_reply_to: str | None = None


@_record
class OutboxRead:
    """The outbox rows of one chat with a cursor above ``after``, oldest first (a read)."""

    platform: str
    chat_id: str | None
    after: int
    limit: int


@_record
class OutboxHead:
    """The highest cursor in the outbox, 0 when empty (a read)."""


@_record
class OutboxPrune:
    """Delete outbox rows created before ``before``; returns the count."""

    before: float


#: The outbox operations, for backends that route them to one handler.
OUTBOX_OPS = (OutboxAppend, OutboxRead, OutboxHead, OutboxPrune)


Op = (
    CreateSession
    | EndSession
    | PutRouting
    | DeleteRouting
    | AppendMessage
    | AddTokens
    | AcceptEvent
    | WithdrawEvent
    | ConsumeEvents
    | PruneInbox
    | LedgerRecord
    | LedgerClaim
    | LedgerFinish
    | LedgerPrune
    | OutboxAppend
    | OutboxRead
    | OutboxHead
    | OutboxPrune
)


class Backend(Protocol):
    """What the store needs from a persistence backend (SQLite, degraded, PostgreSQL later)."""

    def apply(self, ops: list[Op]) -> list[Any]:
        """Apply ``ops`` as one transaction; one result per op (``None`` for most)."""
        ...

    def load_routing(self) -> list[tuple[str, str]]:
        """Every routing row as ``(session_key, entry JSON text)``."""
        ...

    def load_messages(self, session_id: str,
                      before_turn: str | None = None) -> list[dict[str, Any]]:
        """A session's transcript in order, in the shape of §17.13 (only the messages
        before turn ``before_turn``'s first one, when given)."""
        ...

    def message_count(self, session_id: str) -> int:
        """How many transcript messages ``session_id`` has."""
        ...

    def turn_reply(self, session_id: str, token: str) -> dict[str, Any] | None:
        """The last persisted final reply of the turn ``token`` in ``session_id``."""
        ...

    def turn_replies(self, turns: list[tuple[str, str, float | None]]
                     ) -> dict[tuple[str, str], str]:
        """``(session_id, token) -> content`` of the reply of each ``(session_id, token,
        marker start)`` turn that has one (``transcript.reply_after_marker``)."""
        ...

    def pending_inbox(self) -> list[tuple[str, dict[str, Any]]]:
        """Unconsumed inbox events as ``(session_key, payload)`` in arrival order."""
        ...

    def ledger_rows(
        self, states: tuple[str, ...] | None = None, session_key: str | None = None
    ) -> list[dict[str, Any]]:
        """Ledger rows (all columns) in creation order, optionally filtered."""
        ...

    def close(self) -> None:
        """Release the backend's resources."""
        ...
