"""``OutboxRecords``: the durable outbox: replies to chats that are read over HTTP (§17.32).

The HTTP adapter cannot push a reply to a client, so it appends the reply here and clients
read it by cursor (``GET /v1/outbox``). A cursor is global, strictly increasing and never
reused (SQLite: the row's ``AUTOINCREMENT`` key), so "everything after cursor N" is exact
across restarts and prunes. Degraded mode draws its cursors above the clock in microseconds
(above every cursor the database handed out, even one it could not read) and the next start
imports its rows under those cursors, the database numbering later rows above them: a
client resuming after a cursor it read in degraded mode reads nothing twice, misses nothing.
Appends and prunes are operations; reads are backend reads.

A reply the delivery ledger owes is appended together with its ledger row's outcome, in one
transaction (``outbox_append(obligation_id=...)``): the outbox is exactly once. A crash
leaves either the row and a ``delivered`` ledger row, or neither (the ledger row still
``attempting``, redelivered once); and the append is refused, appending nothing, when the
ledger row is not claimed by this store's sender (a cluster node whose shard moved on).
"""

from __future__ import annotations

from typing import Any

from hermes_actors.store.core import StoreCore
from hermes_actors.store.deliveries import Owner
from hermes_actors.store.ops import Op, OutboxAppend, OutboxPrune
from hermes_actors.store.protocol import OUTBOX_COLUMNS

__all__ = ["MAX_READ", "OUTBOX_COLUMNS", "OutboxRecords"]

#: The most rows one read returns.
MAX_READ = 1000
_DAY = 86400.0


class OutboxRecords:
    """The outbox methods of the store (its facade delegates here)."""

    def __init__(self, core: StoreCore, owner: Owner) -> None:
        self._core = core
        #: ``(node id, boot id)``: the sender whose ledger claims an append may end.
        self._owner = owner

    def outbox_append(self, *, session_key: str, platform: str, chat_id: str | None,
                      thread_id: str | None, text: str, kind: str, floor: int = 0,
                      in_reply_to: tuple[str, ...] = (),
                      obligation_id: str | None = None) -> int | None:
        """Append a reply for a chat; returns its cursor (greater than every earlier one).
        ``in_reply_to`` names the inbound events it answers.

        With ``obligation_id`` the append ends that ledger row's attempt, in the same
        transaction: the row becomes ``delivered``. It is done only while this store's
        sender holds the row's claim (``attempting``); otherwise nothing is appended or
        changed and ``None`` is returned."""
        if not isinstance(text, str):
            raise ValueError("outbox text must be a string")
        op = OutboxAppend(
            session_key=session_key,
            platform=str(platform),
            chat_id=None if chat_id is None else str(chat_id),
            thread_id=None if thread_id is None else str(thread_id),
            text=text,
            kind=str(kind),
            created_at=self._core.ts(),
            floor=int(floor),
            in_reply_to=" ".join(in_reply_to) or None,
        )
        if obligation_id is not None:
            op.obligation_id = obligation_id
            op.owner_node, op.owner_boot = self._owner
        notice = self._core.outbox_notice
        ops: list[Op] = [op] if notice is None else [op, notice(op)]  # notice: the nodes
        cursor = self._core.apply(ops)[0]
        return None if cursor is None else int(cursor)

    def outbox_read(self, platform: str, chat_id: str | None, after: int = 0,
                    limit: int = 100) -> list[dict[str, Any]]:
        """Rows of one chat with a cursor above ``after``, oldest first (at most ``limit``,
        capped at :data:`MAX_READ`); each a dict of :data:`OUTBOX_COLUMNS`."""
        limit = max(1, min(int(limit), MAX_READ))
        chat = None if chat_id is None else str(chat_id)
        return self._core.read(
            lambda backend: backend.outbox_read(str(platform), chat, int(after), limit))

    def outbox_head(self) -> int:
        """The highest cursor so far (0 when the outbox is empty)."""
        return int(self._core.read(lambda backend: backend.outbox_head()) or 0)

    def outbox_prune(self, max_age_days: float = 7) -> int:
        """Delete rows older than ``max_age_days``; returns the count."""
        before = self._core.ts() - max_age_days * _DAY
        return int(self._core.apply([OutboxPrune(before)])[0] or 0)
