"""``DegradedBackend``: keeps the gateway serving when ``state.db`` cannot be used (§5).

Routing lives in ``sessions.json`` (the store writes it on every change), transcripts are
appended to ``<session_id>.jsonl``, and the durable inbox and delivery ledger are kept in
memory: they follow the same rules as on SQLite but do not survive a crash, which is logged
once. When the store switched here after a write failure, the old database (if it can still
be read) keeps answering transcript reads, so earlier history stays visible.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from hermes_actors.errors import StoreError
from hermes_actors.store import ledger
from hermes_actors.store.backends.files.jsonl import JsonlTranscripts
from hermes_actors.store.ops import (
    OUTBOX_OPS,
    AcceptEvent,
    AddTokens,
    AppendMessage,
    ConsumeEvents,
    CreateSession,
    DeleteRouting,
    EndSession,
    LedgerClaim,
    LedgerFinish,
    LedgerPrune,
    LedgerRecord,
    Op,
    PruneInbox,
    PutRouting,
    WithdrawEvent,
)
from hermes_actors.store.outbox import MemoryOutbox
from hermes_actors.store.transcript import reply_after_marker

__all__ = ["DegradedBackend"]

log = logging.getLogger(__name__)

_COLUMNS = (
    "obligation_id", "session_key", "platform", "chat_id", "thread_id", "content", "kind",
    "state", "attempts", "owner_pid", "owner_started_at", "created_at", "updated_at",
    "last_error", "in_reply_to",
)  # fmt: skip


class DegradedBackend:
    """The :class:`~hermes_actors.store.ops.Backend` used without a working SQLite database."""

    def __init__(self, transcripts: JsonlTranscripts, previous: Any = None) -> None:
        self._transcripts = transcripts
        self._previous = previous
        self._lock = threading.Lock()
        self._inbox: dict[str, dict[str, Any]] = {}
        #: Ingress key → the event id holding it (``AcceptEvent``).
        self._ingress: dict[str, str] = {}
        self._seq = 0
        self._ledger: dict[str, dict[str, Any]] = {}
        self._warned_volatile = False
        self._outbox = MemoryOutbox()

    def _volatile(self) -> None:
        if not self._warned_volatile:
            self._warned_volatile = True
            log.warning(
                "degraded mode: the inbox and delivery ledger are kept in memory only and "
                "are not crash-safe until state.db works again"
            )

    def apply(self, ops: list[Op]) -> list[Any]:
        """Apply ``ops``: transcript lines are written first (the only I/O), then memory."""
        appends: dict[str, list[dict[str, Any]]] = {}
        for op in ops:
            if isinstance(op, AppendMessage):
                record = dict(op.message)
                if op.turn_token is not None:
                    record["turn_token"] = op.turn_token
                if op.is_reply:
                    record["is_reply"] = True
                appends.setdefault(op.session_id, []).append(record)
        try:
            for session_id, records in appends.items():
                self._transcripts.append(session_id, records)
        except OSError as exc:
            raise StoreError(f"cannot append to the transcript file: {exc}") from exc
        with self._lock:
            return [self._apply_one(op) for op in ops]

    def _apply_one(self, op: Op) -> Any:
        if isinstance(op, (CreateSession, EndSession, PutRouting, DeleteRouting, AddTokens)):
            return None  # routing is the store's sessions.json; no sessions table here
        if isinstance(op, AppendMessage):
            return None
        if isinstance(op, OUTBOX_OPS):
            return self._outbox.apply(op)
        if isinstance(op, (AcceptEvent, WithdrawEvent, ConsumeEvents, PruneInbox)):
            return self._inbox_op(op)
        return self._ledger_op(op)

    def _inbox_op(self, op: Op) -> Any:
        self._volatile()
        if isinstance(op, AcceptEvent):
            holder = self._ingress.get(op.ingress_key) if op.ingress_key else None
            if holder is not None and holder in self._inbox:
                return holder
            if op.event_id not in self._inbox:
                self._seq += 1
                self._inbox[op.event_id] = {
                    "seq": self._seq, "session_key": op.session_key, "payload": op.payload,
                    "consumed_at": None, "consumed_reason": None,
                    "ingress_key": op.ingress_key,
                }  # fmt: skip
                if op.ingress_key:
                    self._ingress[op.ingress_key] = op.event_id
            return op.event_id
        if isinstance(op, WithdrawEvent):
            row = self._inbox.get(op.event_id)
            if row is None or row["consumed_at"] is not None:
                return 0
            self._forget(op.event_id)
            return 1
        if isinstance(op, ConsumeEvents):
            count = 0
            for event_id in op.event_ids:
                row = self._inbox.get(event_id)
                if row is not None and row["consumed_at"] is None:
                    row["consumed_at"], row["consumed_reason"] = op.at, op.reason
                    count += 1
            return count
        assert isinstance(op, PruneInbox)
        old = [
            k for k, r in self._inbox.items()
            if r["consumed_at"] is not None and r["consumed_at"] < op.before
        ]  # fmt: skip
        for key in old:
            self._forget(key)
        return len(old)

    def _forget(self, event_id: str) -> None:
        row = self._inbox.pop(event_id)
        if row["ingress_key"]:
            self._ingress.pop(row["ingress_key"], None)

    def _ledger_op(self, op: Op) -> Any:
        self._volatile()
        if isinstance(op, LedgerRecord):
            if op.obligation_id not in self._ledger:
                row = dict.fromkeys(_COLUMNS)
                row.update(
                    obligation_id=op.obligation_id, session_key=op.session_key,
                    platform=op.platform, chat_id=op.chat_id, thread_id=op.thread_id,
                    content=op.content, kind=op.kind, state="pending", attempts=0,
                    created_at=op.at, updated_at=op.at, in_reply_to=op.in_reply_to,
                )  # fmt: skip
                self._ledger[op.obligation_id] = row
            return None
        if isinstance(op, LedgerClaim):
            row = self._ledger.get(op.obligation_id)
            if row is None or not ledger.claim_allowed(
                row["state"], row["owner_pid"], row["owner_started_at"],
                claimer_pid=op.owner_pid, claimer_started_at=op.owner_started_at,
            ):  # fmt: skip
                return False
            row.update(
                state="attempting",
                attempts=row["attempts"] + 1,
                owner_pid=op.owner_pid,
                owner_started_at=op.owner_started_at,
                updated_at=op.at,
            )
            return True
        if isinstance(op, LedgerFinish):
            row = self._ledger.get(op.obligation_id)
            if row is None:
                return None
            state = ledger.finish_state(
                op.state, attempts=row["attempts"], created_at=row["created_at"], now=op.at
            )
            row.update(state=state, last_error=op.error, updated_at=op.at)
            return state
        assert isinstance(op, LedgerPrune)
        old = [
            k for k, r in self._ledger.items()
            if r["state"] in ledger.FINAL_STATES and r["updated_at"] < op.before
        ]  # fmt: skip
        for key in old:
            del self._ledger[key]
        return len(old)

    # -- reads ------------------------------------------------------------------------------

    def load_routing(self) -> list[tuple[str, str]]:
        """Nothing: in degraded mode routing is read from ``sessions.json`` by the store."""
        return []

    def _previous_messages(self, session_id: str) -> list[dict[str, Any]]:
        if self._previous is None:
            return []
        try:
            return self._previous.load_messages(session_id)
        except StoreError:
            return []

    def load_messages(self, session_id: str,
                      before_turn: str | None = None) -> list[dict[str, Any]]:
        """The old database's transcript (if readable) followed by the JSONL lines (those
        before turn ``before_turn`` when given)."""
        return (self._previous_messages(session_id)
                + self._transcripts.load(session_id, before_turn=before_turn))

    def message_count(self, session_id: str) -> int:
        """How many transcript messages ``session_id`` has (old database and JSONL)."""
        return len(self.load_messages(session_id))

    def turn_reply(self, session_id: str, token: str) -> dict[str, Any] | None:
        """The turn's final reply from the JSONL file, else from the old database."""
        found = self._transcripts.turn_reply(session_id, token)
        if found is None and self._previous is not None:
            try:
                found = self._previous.turn_reply(session_id, token)
            except StoreError:
                found = None
        return found

    def turn_replies(self, turns: list[tuple[str, str, float | None]]
                     ) -> dict[tuple[str, str], str]:
        """``(session_id, token) -> content`` for each turn with a reply: its final reply
        line, else a reply the transcript ends with (``transcript.reply_after_marker``)."""
        found = {}
        for sid, token, started in turns:
            row = self.turn_reply(sid, token)
            if row is not None:
                found[(sid, token)] = row["content"]
                continue
            records = self._transcripts.records(sid)
            if records:
                reply = reply_after_marker(records[-1], token, started)
            elif self._previous is not None:
                try:
                    reply = self._previous.turn_replies([(sid, token, started)]).get(
                        (sid, token))
                except StoreError:
                    reply = None
            else:
                reply = None
            if reply is not None:
                found[(sid, token)] = reply
        return found

    def pending_inbox(self) -> list[tuple[str, dict[str, Any]]]:
        """Unconsumed in-memory inbox events in arrival order."""
        with self._lock:
            rows = sorted(self._inbox.values(), key=lambda r: r["seq"])
            pending = [(r["session_key"], r["payload"]) for r in rows if r["consumed_at"] is None]
        return [(key, json.loads(payload)) for key, payload in pending]

    def ledger_rows(
        self, states: tuple[str, ...] | None = None, session_key: str | None = None
    ) -> list[dict[str, Any]]:
        """In-memory ledger rows, oldest first, optionally filtered."""
        with self._lock:
            rows = [
                dict(r) for r in self._ledger.values()
                if (states is None or r["state"] in states)
                and (session_key is None or r["session_key"] == session_key)
            ]  # fmt: skip
        return sorted(rows, key=lambda r: (r["created_at"], r["obligation_id"]))

    def close(self) -> None:
        """Nothing to release (the store closes any database it opened)."""
