"""Write operations as records: what a backend applies (see :mod:`~hermes_actors.store.protocol`).

The store never calls "insert this, then update that" on a database. It describes a change as
a short list of operations and hands the list to a backend, which applies it as ONE
transaction: a turn start (marker + user message + inbox consumption) is one list, a reset
(end old row + create new row + routing upsert) is another. This keeps three things simple:

* atomicity: every public store method is one ``apply`` call;
* retries: a failed transaction is re-run from the same records, in order (FTS repair);
* backends: SQLite (:class:`~hermes_actors.store.backends.sqlite.db.SessionDB`), the files
  backend of degraded mode, and later PostgreSQL apply the same records; SQLite's group
  commit merges several callers' lists into one transaction without changing any caller.

Every field is positional and of a plain built-in type: the SQLite writer process receives
op lists as pickled ``(code, *fields)`` tuples.

Times are epoch seconds taken from the store's clock, so backends never read a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "AcceptEvent",
    "AddTokens",
    "ConsumeEvents",
    "CONVERSATION_TABLES",
    "CreateSession",
    "DeleteConversations",
    "DeleteRouting",
    "EndSession",
    "FenceShard",
    "LedgerClaim",
    "LedgerFinish",
    "LedgerPrune",
    "LedgerRecord",
    "LedgerRelease",
    "LedgerReopen",
    "ListId",
    "NodeValue",
    "NotifyOutbox",
    "NotifyShard",
    "Op",
    "OutboxAppend",
    "OutboxPrune",
    "PruneInbox",
    "PutRouting",
    "AppendMessage",
    "SetRoutingFlags",
    "SetSessionRestarts",
    "WithdrawEvent",
]

# Ops are records built on the hot path (a turn builds about ten of them): plain dataclasses,
# since a frozen one's ``__init__`` pays an ``object.__setattr__`` per field (``LedgerRecord``:
# 1.0 → 0.37 µs). Nothing changes an op once built; treat them as immutable.


@dataclass
class CreateSession:
    """Insert a ``sessions`` row (ignored when the id exists)."""

    session_id: str
    session_key: str | None
    source: dict[str, Any] | None
    started_at: float
    parent_session_id: str | None = None


@dataclass
class EndSession:
    """Close a ``sessions`` row once (an already ended row keeps its first reason)."""

    session_id: str
    reason: str
    ended_at: float


@dataclass
class PutRouting:
    """Upsert one ``routing`` row: the entry of one session key (``entry``: its JSON text
    without the flags, serialised by the store before any I/O so a bad value fails the call,
    not a backend) and its flag columns (:class:`~hermes_actors.store.routing.RoutingFlags`,
    times in epoch seconds)."""

    session_key: str
    entry: str
    active_turn_token: str | None
    active_turn_started_at: float | None
    active_turn_internal: bool
    resume_pending: bool
    suspended: bool
    updated_at: float | None


@dataclass
class SetRoutingFlags:
    """Set the flag columns of an existing ``routing`` row; its entry text stays (a turn's
    start and end, an activity bump)."""

    session_key: str
    active_turn_token: str | None
    active_turn_started_at: float | None
    active_turn_internal: bool
    resume_pending: bool
    suspended: bool
    updated_at: float | None


@dataclass
class DeleteRouting:
    """Remove routing rows (transcripts and ``sessions`` rows stay)."""

    session_keys: tuple[str, ...]


#: The tables :class:`DeleteConversations` counts its removals in (the search index rows go
#: with ``messages``).
CONVERSATION_TABLES = ("routing", "sessions", "messages", "inbox", "deliveries", "outbox")


@dataclass
class DeleteConversations:
    """Delete conversations whole (an operator's delete, retention): for each of
    ``session_keys`` its routing row and its inbox, delivery ledger and outbox rows; and the
    transcript of every session of those keys and of ``session_ids`` (its ``sessions`` row,
    its messages and, with them, their full-text index rows). One transaction with the
    rest of its list, like every op. Returns the rows removed, by table
    (:data:`CONVERSATION_TABLES`; the files backend counts transcript files as
    ``sessions``)."""

    session_keys: tuple[str, ...]
    session_ids: tuple[str, ...]


@dataclass
class AppendMessage:
    """Append one normalised transcript message and bump the session's ``message_count``."""

    session_id: str
    message: dict[str, Any]
    turn_token: str | None = None
    is_reply: bool = False


@dataclass
class AddTokens:
    """Add token usage to a ``sessions`` row; ``last_prompt_tokens`` replaces when given."""

    session_id: str
    input_tokens: int = 0
    output_tokens: int = 0
    last_prompt_tokens: int | None = None


@dataclass
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


@dataclass
class WithdrawEvent:
    """Delete an unconsumed inbox event (a message refused after it was made durable:
    nothing of it stays, so a retry of it is accepted)."""

    event_id: str


@dataclass
class ConsumeEvents:
    """Mark inbox events consumed (already consumed ones keep their first reason)."""

    event_ids: tuple[str, ...]
    reason: str
    at: float


@dataclass
class PruneInbox:
    """Delete consumed inbox rows consumed before ``before``; returns the count."""

    before: float


@dataclass
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


@dataclass
class LedgerClaim:
    """Claim an obligation for one sender, a gateway boot named by its node id and boot id;
    returns whether it was granted (:func:`~hermes_actors.store.ledger.claim_allowed`)."""

    obligation_id: str
    owner_node: str
    owner_boot: str
    at: float


@dataclass
class LedgerRelease:
    """Hand back a claim nothing was sent under (the adapter dropped after the claim): an
    ``attempting`` row this sender owns loses the attempt and its owner and is ``pending``
    again, or ``failed`` when it had been attempted before
    (:func:`~hermes_actors.store.ledger.released_state`); returns whether it was handed back."""

    obligation_id: str
    owner_node: str
    owner_boot: str
    at: float


@dataclass
class LedgerReopen:
    """An operator's retry: a ``failed`` or ``abandoned`` row is ``pending`` again with no
    attempts, no owner and no error, for the next sweep to send. Returns the state the row
    had (it changed only when that was ``failed`` or ``abandoned``), ``None`` for an
    unknown id."""

    obligation_id: str
    at: float


@dataclass
class LedgerFinish:
    """Record the outcome of an attempt; returns the resulting state or ``None`` if unknown.
    ``content`` (an attempt that is not ``delivered``): what is still owed, when the send
    delivered only the first parts of the text; it replaces the row's content, so a later
    send carries only the rest. ``owner_node``/``owner_boot``: the sender whose attempt
    ended; a row another sender claimed since (a cluster node paused between its claim and
    its send, whose row the shard's new owner took over and delivered) is left as it is
    (``None``: that outcome would undo the new owner's, and a sweep would send it again)."""

    obligation_id: str
    state: str
    error: str | None
    at: float
    content: str | None = None
    owner_node: str | None = None
    owner_boot: str | None = None


@dataclass
class LedgerPrune:
    """Delete ``delivered``/``abandoned`` rows last updated before ``before``; returns count."""

    before: float


# -- outbox (replies read over HTTP, §17.32) ---------------------------------------------------


@dataclass
class OutboxAppend:
    """Append a reply to the outbox; returns its cursor. ``floor`` is the highest cursor the
    caller has seen: a backend that numbers rows itself (degraded) continues above it.

    With an ``obligation_id`` the append is also the outcome of that ledger row's attempt
    (the durable outbox is exactly once, §7): the row is appended only while the ledger row
    is ``attempting`` for the sender ``owner_node``/``owner_boot``, and the same op marks
    the ledger row ``delivered``; otherwise (another sender claimed it since, it is final,
    unknown, or not claimed) nothing changes and the result is ``None``. So a crash leaves
    either both (the row and ``delivered``) or neither (an ``attempting`` row, redelivered
    by a sweep), and a sender that lost its claim appends nothing."""

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
    #: The row's cursor when it already has one (degraded mode's, imported from its
    #: journal): kept as it is, never numbered anew (drawn above the clock, it is above
    #: every cursor a database handed out), and the backend's numbering continues above
    #: it; ``None``: the backend numbers it.
    cursor: int | None = None
    #: The ledger row whose attempt this append ends (``None``: a plain append).
    obligation_id: str | None = None
    #: The sender that must hold that row's claim (with ``obligation_id``).
    owner_node: str | None = None
    owner_boot: str | None = None


@dataclass
class OutboxPrune:
    """Delete outbox rows created before ``before``; returns the count."""

    before: float


# -- the cluster's fencing token (docs/cluster.md) ---------------------------------------------


@dataclass
class FenceShard:
    """Go on only while ``owner`` holds ``shard`` under ``epoch`` and the lease has not
    expired: the lease row is share-locked until the transaction ends (so no new tenure can
    commit meanwhile), and the whole list fails with
    :class:`~hermes_actors.errors.FencedError` when there is no such row. Placed first in a
    list by :class:`~hermes_actors.store.fencing.ShardFence`; only a cluster node adds it."""

    shard: int
    owner: str
    epoch: int


@dataclass
class NotifyShard:
    """Tell the nodes listening on ``shard``'s inbox channel, once the transaction commits,
    that its inbox has a new row (PostgreSQL ``NOTIFY``; only a cluster node adds it, next
    to an ``AcceptEvent``). ``origin`` (the payload) names the accepting node's process,
    which reads the inbox after its own accepts and so skips its own notices."""

    shard: int
    origin: str = ""


@dataclass
class NotifyOutbox:
    """Tell the other nodes, once the transaction commits, that the outbox of ``platform``'s
    chat ``chat_id`` has a new row, so that their long polls of that chat wake (PostgreSQL
    ``NOTIFY``; only a cluster node adds it, next to an ``OutboxAppend``). ``origin`` names
    the sending node's process, whose own waiters were woken by the append itself."""

    platform: str
    chat_id: str | None
    origin: str


# -- the node's own state (§7: restart counting, the clean-shutdown marker) ------------------


@dataclass
class NodeValue:
    """Set (``value``: JSON text) or, with ``None``, delete one named value of a node's state:
    ``clean_shutdown``, ``restart_counts``, ``restart_storm``, ``imported_journal``."""

    node_id: str
    name: str
    value: str | None


@dataclass
class SetSessionRestarts:
    """Set the stuck-loop counts of some sessions (§7 step 4): ``counts`` holds
    ``(session_key, consecutive restarts)`` pairs, 0 removing the session's count; other
    sessions' counts stay. The counts are the store's, per session: a database of a cluster
    (PostgreSQL, table ``session_restarts``) shares them between every node, so that the node
    recovering a shard counts restarts a session was interrupted across on any node; a
    store of one node (SQLite, the files) keeps them in the ``restart_counts`` value of
    ``node_id``'s state, in the format of §5. Only a cluster node writes them this way."""

    node_id: str
    counts: tuple[tuple[str, int], ...]
    at: float


@dataclass
class ListId:
    """The id of the op list it opens (the ops after it, up to the next ``ListId``): a
    backend that keeps its data in the home applies them only if it never applied a list
    of this id, and records the id in the same transaction (SQLite: ``applied_lists``;
    result ``True``, or ``False`` for a replay, whose ops are skipped with ``None``
    results). So a list replayed after an unknown outcome (the database writer died after
    its COMMIT, before its answer; the list was then applied again in degraded mode and
    journaled) is applied once. ``at`` (epoch seconds) dates the id for pruning."""

    list_id: str
    at: float


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
    | LedgerRelease
    | LedgerReopen
    | LedgerFinish
    | LedgerPrune
    | OutboxAppend
    | OutboxPrune
    | NodeValue
    | SetRoutingFlags
    | FenceShard
    | NotifyShard
    | NotifyOutbox
    | SetSessionRestarts
    | ListId
    | DeleteConversations
)
