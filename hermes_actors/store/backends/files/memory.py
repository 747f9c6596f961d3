"""The files backend's inbox, delivery ledger and outbox: tables in memory.

They follow the same rules as their SQL tables (:mod:`hermes_actors.store.ledger` decides
claims and outcomes for both), but do not survive a crash; the backend says so once. Call
them under the backend's lock.
"""

from __future__ import annotations

import json
import time
from typing import Any

from hermes_actors.store import ledger
from hermes_actors.store.ops import (
    AcceptEvent,
    ConsumeEvents,
    LedgerClaim,
    LedgerFinish,
    LedgerPrune,
    LedgerRecord,
    LedgerRelease,
    LedgerReopen,
    OutboxAppend,
    OutboxPrune,
    PruneInbox,
    WithdrawEvent,
)
from hermes_actors.store.protocol import OUTBOX_COLUMNS

__all__ = ["CURSOR_FLOOR_MAX", "LEDGER_COLUMNS", "MemoryInbox", "MemoryLedger", "MemoryOutbox",
           "clock_floor"]

#: The highest clock floor (2**52, the year 2112 in microseconds): a clock set centuries
#: ahead still leaves every cursor below 2**53, exact as a JavaScript number.
CURSOR_FLOOR_MAX = 2**52
#: The wall clock the floor reads (the system's: a store's test clock must not lower it).
_wall_clock = time.time

#: The columns of a ledger row (as the SQL table has them).
LEDGER_COLUMNS = (
    "obligation_id", "session_key", "platform", "chat_id", "thread_id", "content", "kind",
    "state", "attempts", "owner_node", "owner_boot", "created_at", "updated_at",
    "last_error", "in_reply_to",
)  # fmt: skip


class MemoryInbox:
    """The durable inbox's rules, in memory."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        #: Ingress key -> the event id holding it (``AcceptEvent``).
        self._ingress: dict[str, str] = {}
        self._seq = 0

    def apply(self, op: Any) -> Any:
        """Apply one inbox operation; the results the SQL backends give."""
        if isinstance(op, AcceptEvent):
            holder = self._ingress.get(op.ingress_key) if op.ingress_key else None
            if holder is not None and holder in self.rows:
                return holder
            if op.event_id not in self.rows:
                self._seq += 1
                self.rows[op.event_id] = {
                    "seq": self._seq, "event_id": op.event_id, "session_key": op.session_key,
                    "payload": op.payload, "internal": 1 if op.internal else 0,
                    "received_at": op.received_at, "consumed_at": None,
                    "consumed_reason": None, "ingress_key": op.ingress_key,
                }  # fmt: skip
                if op.ingress_key:
                    self._ingress[op.ingress_key] = op.event_id
            return op.event_id
        if isinstance(op, WithdrawEvent):
            row = self.rows.get(op.event_id)
            if row is None or row["consumed_at"] is not None:
                return 0
            self._forget(op.event_id)
            return 1
        if isinstance(op, ConsumeEvents):
            count = 0
            for event_id in op.event_ids:
                row = self.rows.get(event_id)
                if row is not None and row["consumed_at"] is None:
                    row["consumed_at"], row["consumed_reason"] = op.at, op.reason
                    count += 1
            return count
        assert isinstance(op, PruneInbox)
        old = [k for k, r in self.rows.items()
               if r["consumed_at"] is not None and r["consumed_at"] < op.before]
        for key in old:
            self._forget(key)
        return len(old)

    def delete_keys(self, keys: frozenset[str]) -> int:
        """Drop every row of the session keys ``keys`` (``DeleteConversations``)."""
        gone = [event_id for event_id, row in self.rows.items() if row["session_key"] in keys]
        for event_id in gone:
            self._forget(event_id)
        return len(gone)

    def _forget(self, event_id: str) -> None:
        row = self.rows.pop(event_id)
        if row["ingress_key"]:
            self._ingress.pop(row["ingress_key"], None)

    def pending(self) -> list[tuple[str, dict[str, Any]]]:
        """Unconsumed events in arrival order, as ``(session_key, payload)``."""
        rows = sorted(self.rows.values(), key=lambda r: r["seq"])
        return [(r["session_key"], json.loads(r["payload"])) for r in rows
                if r["consumed_at"] is None]


class MemoryLedger:
    """The delivery ledger's rules, in memory."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}

    def apply(self, op: Any) -> Any:
        """Apply one ledger operation; the results the SQL backends give."""
        if isinstance(op, LedgerRecord):
            if op.obligation_id not in self.rows:
                row: dict[str, Any] = dict.fromkeys(LEDGER_COLUMNS)
                row.update(
                    obligation_id=op.obligation_id, session_key=op.session_key,
                    platform=op.platform, chat_id=op.chat_id, thread_id=op.thread_id,
                    content=op.content, kind=op.kind, state="pending", attempts=0,
                    created_at=op.at, updated_at=op.at, in_reply_to=op.in_reply_to,
                )  # fmt: skip
                self.rows[op.obligation_id] = row
            return None
        if isinstance(op, LedgerClaim):
            claimed = self.rows.get(op.obligation_id)
            if claimed is None or not ledger.claim_allowed(
                    claimed["state"], claimed["owner_node"], claimed["owner_boot"],
                    claimer_node=op.owner_node, claimer_boot=op.owner_boot):
                return False
            claimed.update(state="attempting", attempts=claimed["attempts"] + 1,
                           owner_node=op.owner_node, owner_boot=op.owner_boot,
                           updated_at=op.at)
            return True
        if isinstance(op, LedgerRelease):
            held = self.rows.get(op.obligation_id)
            if held is None or (held["state"], held["owner_node"], held["owner_boot"]) != (
                    "attempting", op.owner_node, op.owner_boot):
                return False
            held.update(state=ledger.released_state(held["attempts"]),
                        attempts=held["attempts"] - 1, owner_node=None, owner_boot=None,
                        updated_at=op.at)
            return True
        if isinstance(op, LedgerReopen):
            reopened = self.rows.get(op.obligation_id)
            if reopened is None:
                return None
            state = reopened["state"]
            if state in ledger.REOPENABLE_STATES:
                reopened.update(state="pending", attempts=0, owner_node=None, owner_boot=None,
                                last_error=None, updated_at=op.at)
            return state
        if isinstance(op, LedgerFinish):
            finished = self.rows.get(op.obligation_id)
            if finished is None or (op.owner_node is not None
                                    and finished["owner_node"] is not None
                                    and (finished["owner_node"], finished["owner_boot"])
                                    != (op.owner_node, op.owner_boot)):
                return None  # unknown, or another sender's claim since
            state = ledger.finish_state(op.state, attempts=finished["attempts"],
                                        created_at=finished["created_at"], now=op.at)
            finished.update(state=state, last_error=op.error, updated_at=op.at)
            if op.content is not None:
                finished["content"] = op.content
            return state
        assert isinstance(op, LedgerPrune)
        old = [k for k, r in self.rows.items()
               if r["state"] in ledger.FINAL_STATES and r["updated_at"] < op.before]
        for key in old:
            del self.rows[key]
        return len(old)

    def delete_keys(self, keys: frozenset[str]) -> int:
        """Drop every row of the session keys ``keys`` (``DeleteConversations``)."""
        gone = [oid for oid, row in self.rows.items() if row["session_key"] in keys]
        for oid in gone:
            del self.rows[oid]
        return len(gone)

    def delivered_by(self, op: OutboxAppend) -> bool:
        """An outbox append that ends its ledger row's attempt (``op.obligation_id``): the
        row is marked ``delivered`` when it is ``attempting`` for ``op``'s sender, and
        whether it was (the append goes ahead only then)."""
        row = self.rows.get(op.obligation_id or "")
        if row is None or (row["state"], row["owner_node"], row["owner_boot"]) != (
                "attempting", op.owner_node, op.owner_boot):
            return False
        row.update(state="delivered", last_error=None, updated_at=op.created_at)
        return True

    def select(self, states: tuple[str, ...] | None, session_key: str | None
               ) -> list[dict[str, Any]]:
        """Rows oldest first, optionally filtered (copies)."""
        rows = [dict(r) for r in self.rows.values()
                if (states is None or r["state"] in states)
                and (session_key is None or r["session_key"] == session_key)]
        return sorted(rows, key=lambda r: (r["created_at"], r["obligation_id"]))

    def counts(self) -> dict[str, int]:
        """Rows per state."""
        out: dict[str, int] = {}
        for row in self.rows.values():
            out[row["state"]] = out.get(row["state"], 0) + 1
        return out


def clock_floor() -> int:
    """The wall clock in microseconds since the epoch (at most :data:`CURSOR_FLOOR_MAX`):
    the floor of degraded mode's outbox cursors.

    Why: a degraded start may not be able to read the database at all (a corrupt header),
    so it cannot ask for the highest cursor handed out there, yet its rows keep their
    cursors when the next start imports them. A database numbers its rows one by one
    (``AUTOINCREMENT``, an identity column), from 1 or from the highest row imported
    from an earlier degraded run, which was itself numbered from that run's clock: it
    would have to hand out more than one cursor a microsecond, on average, since that
    run to reach the clock (this store commits far fewer than a million rows a second).
    So a cursor drawn above the clock is above every cursor the database handed out
    before, and the database's own numbering continues above the imported rows. 1.7e15
    today, 2**53 in the year 2255: JSON numbers stay exact in JavaScript clients.
    """
    return min(int(_wall_clock() * 1_000_000), CURSOR_FLOOR_MAX)


class MemoryOutbox:
    """The outbox, in memory. Cursors continue above the highest one known (read back from
    the journal, the failed database's head, ``OutboxAppend.floor``: the highest a caller
    has seen) and above ``floor`` (:func:`clock_floor` in degraded mode), so that they are
    never below a cursor a database handed out, even one this run could not read."""

    def __init__(self, floor: int = 0) -> None:
        self.rows: list[dict[str, Any]] = []
        self._last = 0
        self._floor = int(floor)

    def apply(self, op: Any) -> Any:
        """Apply one outbox operation; the results the SQL backends give."""
        if isinstance(op, OutboxAppend):
            cursor = (int(op.cursor) if op.cursor is not None
                      else max(self._last, self._floor, int(op.floor)) + 1)
            self._last = max(self._last, cursor)
            self.rows.append(dict(zip(OUTBOX_COLUMNS, (
                cursor, op.session_key, op.platform, op.chat_id, op.thread_id, op.text,
                op.kind, op.created_at, op.in_reply_to,
            ), strict=True)))  # fmt: skip
            return cursor
        assert isinstance(op, OutboxPrune)
        kept = [r for r in self.rows if r["created_at"] >= op.before]
        pruned = len(self.rows) - len(kept)
        self.rows = kept
        return pruned

    def delete_keys(self, keys: frozenset[str]) -> int:
        """Drop every row of the session keys ``keys`` (``DeleteConversations``); the
        numbering goes on above the highest cursor handed out."""
        kept = [r for r in self.rows if r["session_key"] not in keys]
        gone = len(self.rows) - len(kept)
        self.rows = kept
        return gone

    def reserve(self, floor: int) -> int:
        """Draw the cursor of the next append (above ``floor``) before it is applied."""
        self._last = max(self._last, self._floor, int(floor)) + 1
        return self._last

    def reserve_above(self, cursor: int) -> None:
        """Number every later append above ``cursor`` (a head the database reached)."""
        self._last = max(self._last, int(cursor))

    def read(self, platform: str, chat_id: str | None, after: int, limit: int
             ) -> list[dict[str, Any]]:
        """One chat's rows after ``after``, oldest first."""
        found = [dict(r) for r in self.rows
                 if r["platform"] == platform and r["chat_id"] == chat_id
                 and r["cursor"] > after]
        return found[:limit]

    def head(self) -> int:
        """The highest cursor so far (handed out, read back or the failed database's; the
        clock floor is not one: 0 before any)."""
        return self._last
