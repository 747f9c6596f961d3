"""``FilesBackend``: the store on plain files, when the database cannot be used (§5).

Degraded mode: routing lives in ``sessions.json`` (written after every change, marked with
``_degraded_since`` so the next start with a working database knows it is newer),
transcripts are appended to ``<session_id>.jsonl`` (fsync'ed per write), the node's state
in the home's files (:mod:`~hermes_actors.store.backends.files.node_files`), and the inbox,
delivery ledger and outbox are kept in memory
(:mod:`~hermes_actors.store.backends.files.memory`), following the same rules as on a
database. What a database would change in those tables and in ``sessions`` is journaled
(:mod:`~hermes_actors.store.backends.files.journal`): accepted messages wait for the next
start, replies owed are still owed after it, the outbox's rows keep their cursors (drawn
above the clock in microseconds, so above any a database handed out: see
:func:`~hermes_actors.store.backends.files.memory.clock_floor`), and the next start with a
database applies it all. When the store switched here after a failure,
the old database (``previous``, if it can still be read) keeps answering transcript reads,
so earlier history stays visible.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from hermes_actors.errors import StoreError, StoreRejectedError
from hermes_actors.model.ids import new_id
from hermes_actors.model.jsontext import to_json
from hermes_actors.store.backends.files.journal import DegradedJournal
from hermes_actors.store.backends.files.jsonl import JsonlTranscripts
from hermes_actors.store.backends.files.memory import (
    MemoryInbox,
    MemoryLedger,
    MemoryOutbox,
    clock_floor,
)
from hermes_actors.store.backends.files.mirror import (
    MIRROR_NAME,
    MirrorWriter,
    mirror_chunks,
    read_mirror,
)
from hermes_actors.store.backends.files.node_files import (
    read_home_files,
    read_node_id_file,
    write_home_file,
    write_node_id_file,
)
from hermes_actors.store.ops import (
    CONVERSATION_TABLES,
    AcceptEvent,
    AddTokens,
    AppendMessage,
    ConsumeEvents,
    CreateSession,
    DeleteConversations,
    DeleteRouting,
    EndSession,
    LedgerClaim,
    LedgerFinish,
    LedgerPrune,
    LedgerRecord,
    LedgerRelease,
    LedgerReopen,
    ListId,
    NodeValue,
    Op,
    OutboxAppend,
    OutboxPrune,
    PruneInbox,
    PutRouting,
    SetRoutingFlags,
    SetSessionRestarts,
    WithdrawEvent,
)
from hermes_actors.store.protocol import DIAGNOSTIC_TABLES, Backend
from hermes_actors.store.restarts import merged_restart_counts, parse_restart_counts
from hermes_actors.store.routing import (
    FLAG_FIELDS,
    RoutingFlags,
    RoutingRow,
    flags_from_data,
    is_prunable,
    longest_idle,
    needs_recovery,
)
from hermes_actors.store.transcript import reply_after_marker

__all__ = ["FilesBackend"]

log = logging.getLogger(__name__)

_INBOX_OPS = (AcceptEvent, WithdrawEvent, ConsumeEvents, PruneInbox)
_LEDGER_OPS = (LedgerRecord, LedgerClaim, LedgerRelease, LedgerReopen, LedgerFinish,
               LedgerPrune)
_NO_TABLE = (CreateSession, EndSession, AddTokens, AppendMessage, ListId)
_ROUTING_OPS = (PutRouting, SetRoutingFlags, DeleteRouting, DeleteConversations)
#: Every operation this backend applies; anything else refuses the whole list up front
#: (memory changes cannot be rolled back, so nothing may fail half-way).
_KNOWN = frozenset((*_INBOX_OPS, *_LEDGER_OPS, *_NO_TABLE, *_ROUTING_OPS, NodeValue,
                    SetSessionRestarts, OutboxAppend, OutboxPrune))


def _row_from_data(key: str, data: dict[str, Any]) -> RoutingRow:
    rest = {k: v for k, v in data.items() if k not in FLAG_FIELDS}
    return RoutingRow(key, to_json(rest), flags_from_data(data))


class FilesBackend:
    """The :class:`~hermes_actors.store.protocol.Backend` on files (see the module doc).

    ``home`` is the gateway's home (``<home>/sessions`` holds ``sessions.json``);
    ``transcripts`` the JSONL transcript directory. ``rows`` seeds the routing (a switch
    from a failed database hands over every row); without them, ``sessions.json`` is read.
    ``node_id`` is the node's id when the caller knows it (else ``<home>/node_id``).
    ``since`` is when degraded mode began (ISO time, written as ``_degraded_since``).
    """

    #: The backend's kind (``Backend.kind``): the only degraded one.
    kind = "files"
    #: Whether the data lives in the home (``Backend.local``).
    local = True

    def __init__(self, home: str | Path, transcripts: JsonlTranscripts, *,
                 previous: Backend | None = None, node_id: str | None = None,
                 rows: list[RoutingRow] | None = None, since: str | None = None) -> None:
        self._home = Path(home)
        self._transcripts = transcripts
        self._previous = previous
        self._lock = threading.Lock()
        #: Held from drawing outbox cursors until their rows are in memory.
        self._outbox_order = threading.Lock()
        self._since = since
        self._routing: dict[str, tuple[str, RoutingFlags]] = {}
        #: The keys whose routing this mode wrote (``_degraded_changed`` in the mirror).
        self._changed: set[str] = set()
        path = transcripts.directory / MIRROR_NAME
        if rows is None:
            mirror = read_mirror(path, now=time.time())  # (names a corrupt file's copy)
            self._since = mirror.degraded_since or since
            if mirror.degraded_since is not None:  # degraded mode goes on: so do its changes
                self._changed.update(mirror.changed if mirror.changed is not None
                                     else mirror.entries)
            for key, data in mirror.entries.items():
                if isinstance(data, dict):
                    row = _row_from_data(str(key), data)
                    self._routing[row.session_key] = (row.entry, row.flags)
        else:
            self._routing = {row.session_key: (row.entry, row.flags) for row in rows}
        self._mirror = MirrorWriter(path, self._mirror_document, interval=None)
        if rows is not None:
            self._mirror.mark_dirty()  # sessions.json is canonical from now on
            self._mirror.flush()
        self._node_id = node_id or read_node_id_file(self._home) or self._new_node_id()
        self._inbox = MemoryInbox()
        self._ledger = MemoryLedger()
        # cursors above the clock: above every cursor a database handed out, even one this
        # run cannot read (memory.clock_floor), so the next start imports them unchanged
        self._outbox = MemoryOutbox(clock_floor())
        self._journal = DegradedJournal(self._home)
        deletes: list[DeleteConversations] = []
        for op in self._journal.read()[1]:  # an earlier degraded run's (not imported yet)
            self._apply_to_memory(op)
            if isinstance(op, DeleteConversations):
                deletes.append(op)
        if deletes:  # a delete cut short by a crash after its journal line: finished now
            for op in deletes:
                try:
                    self._remove_transcripts(op)
                except OSError as exc:
                    log.warning("cannot remove a deleted conversation's transcript: %s", exc)
                self._apply_one(op)
            self._mirror.mark_dirty()
            self._mirror.flush()
        if previous is not None:  # and above the failed database's rows (a clock set back)
            try:
                self._outbox.reserve_above(previous.outbox_head())
            except StoreError as exc:
                log.warning("cannot read the outbox head of the failed database (%s)", exc)
        self._warned_volatile = False
        self._closed = False

    def _new_node_id(self) -> str:
        node = new_id()
        try:
            write_node_id_file(self._home, node)
        except OSError as exc:
            log.warning("cannot keep the node id in %s (%s)", self._home, exc)
        return node

    def _mirror_document(self) -> Callable[[], Iterable[bytes]]:
        with self._lock:
            rows, changed = dict(self._routing), frozenset(self._changed)
        return functools.partial(mirror_chunks, rows, self._since, changed)

    def _volatile(self) -> None:
        if not self._warned_volatile:
            self._warned_volatile = True
            log.warning("degraded mode: the inbox, delivery ledger and outbox are kept "
                        "in memory and journaled in the home until the database works again")

    # -- writes -----------------------------------------------------------------------------

    def apply(self, ops: list[Op]) -> list[Any]:
        """Apply ``ops``: transcript lines and node files are written first (the I/O), then
        memory; ``sessions.json`` is rewritten when routing changed. A list with an
        operation this backend does not know is refused whole."""
        if self._closed:
            raise StoreError("the files backend is closed")
        unknown = [type(op).__name__ for op in ops if type(op) not in _KNOWN]
        if unknown:
            raise StoreError(f"the files backend cannot apply {', '.join(unknown)}")
        if any(type(op) is OutboxAppend and op.cursor is None for op in ops):
            # cursors drawn first, so the journal can hold them; and the rows reach memory
            # in the order of their cursors (a reader past one never finds a lower one)
            with self._outbox_order:
                with self._lock:
                    ops = [dataclasses.replace(op, cursor=self._outbox.reserve(op.floor))
                           if type(op) is OutboxAppend and op.cursor is None else op
                           for op in ops]
                return self._apply(ops)
        return self._apply(ops)

    def _apply(self, ops: list[Op]) -> list[Any]:
        appends: dict[str, list[dict[str, Any]]] = {}
        for op in ops:
            if isinstance(op, PutRouting):
                _check_text(op.session_key, op.entry)
            if isinstance(op, AppendMessage):
                record = dict(op.message)
                if op.turn_token is not None:
                    record["turn_token"] = op.turn_token
                if op.is_reply:
                    record["is_reply"] = True
                appends.setdefault(op.session_id, []).append(record)
        try:
            # transcripts first: a reply whose list is cut by a crash here is in the
            # transcript, where the turn marker's recovery finds and delivers it once; its
            # ledger line would have it redelivered while the marker ran the turn again
            for session_id, records in appends.items():
                self._transcripts.append(session_id, records)
            for op in ops:
                if isinstance(op, NodeValue):
                    write_home_file(self._home, op.name, op.value)
                elif isinstance(op, SetSessionRestarts):  # one node: its restart_counts
                    current = read_home_files(self._home).get("restart_counts")
                    write_home_file(self._home, "restart_counts",
                                    merged_restart_counts(current, op.counts))
            # the journal last: a write that failed before it is not imported later
            self._journal.append(ops)
            # a delete's files after its journal line: a crash in between is finished by
            # the next start (the journal's replay, or its import into a database)
            removed = [self._remove_transcripts(op) for op in ops
                       if isinstance(op, DeleteConversations)]
        except OSError as exc:
            raise StoreError(f"cannot write the degraded-mode files: {exc}") from exc
        except UnicodeError as exc:  # a lone surrogate: refused, as SQLite refuses it
            raise StoreRejectedError(
                f"write rejected by the degraded-mode files: {exc}") from exc
        with self._lock:
            results = [self._apply_one(op) for op in ops]
        for index, op in enumerate(ops):
            if isinstance(op, DeleteConversations):
                results[index]["sessions"], results[index]["messages"] = removed.pop(0)
        if any(isinstance(op, _ROUTING_OPS) for op in ops):
            self._mirror.mark_dirty()
            self._mirror.flush()
        return results

    def _apply_one(self, op: Op) -> Any:
        if isinstance(op, PutRouting):
            self._changed.add(op.session_key)
            self._routing[op.session_key] = (op.entry, RoutingFlags(
                op.active_turn_token, op.active_turn_started_at, op.active_turn_internal,
                op.resume_pending, op.suspended, op.updated_at))
            return None
        if isinstance(op, SetRoutingFlags):
            stored = self._routing.get(op.session_key)
            if stored is None:
                return 0
            self._changed.add(op.session_key)
            self._routing[op.session_key] = (stored[0], RoutingFlags(
                op.active_turn_token, op.active_turn_started_at, op.active_turn_internal,
                op.resume_pending, op.suspended, op.updated_at))
            return 1
        if isinstance(op, DeleteRouting):
            return sum(self._routing.pop(key, None) is not None for key in op.session_keys)
        if isinstance(op, DeleteConversations):
            counts = self._apply_to_memory(op)
            counts["routing"] = sum(self._routing.pop(key, None) is not None
                                    for key in op.session_keys)
            self._changed.difference_update(op.session_keys)
            return counts
        if isinstance(op, (*_NO_TABLE, NodeValue, SetSessionRestarts)):
            return None  # no sessions table: the journal, transcripts, node files hold it
        self._volatile()
        return self._apply_to_memory(op)

    def _apply_to_memory(self, op: Op) -> Any:
        """An operation of the inbox, the ledger or the outbox on its memory table (any
        other, read back from the journal, has none)."""
        if isinstance(op, _INBOX_OPS):
            return self._inbox.apply(op)
        if isinstance(op, _LEDGER_OPS):
            return self._ledger.apply(op)
        if isinstance(op, OutboxAppend) and op.obligation_id is not None:
            # the outcome of a ledger row's attempt: appended only while its claim holds
            return self._outbox.apply(op) if self._ledger.delivered_by(op) else None
        if isinstance(op, (OutboxAppend, OutboxPrune)):
            return self._outbox.apply(op)
        if isinstance(op, DeleteConversations):
            keys = frozenset(op.session_keys)
            counts = dict.fromkeys(CONVERSATION_TABLES, 0)
            counts.update(inbox=self._inbox.delete_keys(keys),
                          deliveries=self._ledger.delete_keys(keys),
                          outbox=self._outbox.delete_keys(keys))
            return counts
        return None

    def _remove_transcripts(self, op: DeleteConversations) -> tuple[int, int]:
        """Delete the transcript files of ``op``'s sessions: how many files held lines, and
        how many messages they held."""
        files = messages = 0
        for session_id in op.session_ids:
            count = self._transcripts.remove(session_id)
            files += count > 0
            messages += count
        return files, messages

    def apply_later(self, ops: list[Op], callback: Callable[[bool, Any], None]) -> None:
        """:meth:`apply`, then ``callback(ok, results_or_error)`` (nothing to wait for)."""
        try:
            results = self.apply(ops)
        except Exception as exc:  # noqa: BLE001 - reported to the callback
            callback(False, exc)
            return
        callback(True, results)

    # -- identity ---------------------------------------------------------------------------

    def node_id(self) -> str:
        """The node's id (kept in ``<home>/node_id``)."""
        return self._node_id

    def node_values(self, node_id: str) -> dict[str, str]:
        """The node's state values, read from the home's files (one node per home)."""
        return read_home_files(self._home) if node_id == self._node_id else {}

    def session_restarts(self, node_id: str) -> dict[str, int]:
        """The node's stuck-loop counts (``restart_counts.json``: one node per home)."""
        return parse_restart_counts(self.node_values(node_id).get("restart_counts"))

    # -- routing ----------------------------------------------------------------------------

    def _rows(self, keep: Callable[[RoutingFlags], bool] = lambda flags: True
              ) -> list[RoutingRow]:
        with self._lock:
            return [RoutingRow(key, text, flags) for key, (text, flags) in self._routing.items()
                    if keep(flags)]

    def routing_keys(self) -> dict[str, None]:
        """Every routing key."""
        with self._lock:
            return dict.fromkeys(self._routing)

    def routing_rows(self) -> list[RoutingRow]:
        """Every routing row."""
        return self._rows()

    def routing_row(self, session_key: str) -> RoutingRow | None:
        """One routing row, or ``None``."""
        with self._lock:
            stored = self._routing.get(session_key)
        return RoutingRow(session_key, *stored) if stored is not None else None

    def routing_flagged(self) -> list[RoutingRow]:
        """Rows with a turn marker or a pending resume."""
        return self._rows(needs_recovery)

    def routing_idle_before(self, cutoff: float, limit: int | None = None
                            ) -> list[RoutingRow]:
        """Pruning's candidates (``routing.is_prunable``; ``limit``: the longest idle first,
        at most that many)."""
        rows = self._rows(lambda flags: is_prunable(flags, cutoff))
        return rows if limit is None else longest_idle(rows, limit)

    # -- transcripts ------------------------------------------------------------------------

    def _previous_messages(self, session_id: str, before_turn: str | None = None
                           ) -> tuple[list[dict[str, Any]], bool]:
        """The old database's transcript (those before turn ``before_turn`` when given), and
        whether that turn began there (then no JSONL line comes before it)."""
        if self._previous is None:
            return [], False
        try:
            messages = self._previous.load_messages(session_id, before_turn)
            began = (before_turn is not None
                     and len(messages) < self._previous.message_count(session_id))
        except StoreError:
            return [], False
        return messages, began

    def load_messages(self, session_id: str,
                      before_turn: str | None = None) -> list[dict[str, Any]]:
        """The old database's transcript (if readable) followed by the JSONL lines; with
        ``before_turn`` only the messages before that turn's first one, wherever it is."""
        messages, began = self._previous_messages(session_id, before_turn)
        if began:  # the turn began before the fail-over
            return messages
        return messages + self._transcripts.load(session_id, before_turn=before_turn)

    def load_tail(self, session_id: str, limit: int) -> list[dict[str, Any]]:
        """The last ``limit`` messages: the JSONL file's last lines (the file is read
        whole, as every read of it is), preceded by the old database's own tail when the
        file has fewer (only that many rows are read there)."""
        if limit <= 0:
            return []
        recent = self._transcripts.tail(session_id, limit)
        if len(recent) < limit and self._previous is not None:
            try:
                recent = self._previous.load_tail(session_id, limit - len(recent)) + recent
            except StoreError:
                pass
        return recent

    def message_count(self, session_id: str) -> int:
        """How many transcript messages ``session_id`` has (old database and JSONL)."""
        return len(self.load_messages(session_id))

    def turn_replies(self, turns: list[tuple[str, str, float | None]]
                     ) -> dict[tuple[str, str], str]:
        """Each turn's final reply line, else a reply the transcript ends with; the old
        database answers for transcripts without JSONL lines."""
        found = {}
        for sid, token, started in turns:
            records = self._transcripts.records(sid)
            reply = next((r["content"] for r in reversed(records)
                          if r.get("turn_token") == token and r.get("is_reply")), None)
            if reply is None and records:
                reply = reply_after_marker(records[-1], token, started)
            if reply is None and not records and self._previous is not None:
                try:
                    reply = self._previous.turn_replies([(sid, token, started)]).get(
                        (sid, token))
                except StoreError:
                    reply = None
            if reply is not None:
                found[(sid, token)] = reply
        return found

    # -- inbox, ledger, outbox --------------------------------------------------------------

    def pending_inbox(self) -> list[tuple[str, dict[str, Any]]]:
        """Unconsumed in-memory inbox events in arrival order."""
        with self._lock:
            return self._inbox.pending()

    def ledger_rows(self, states: tuple[str, ...] | None = None,
                    session_key: str | None = None) -> list[dict[str, Any]]:
        """In-memory ledger rows, oldest first, optionally filtered."""
        with self._lock:
            return self._ledger.select(states, session_key)

    def ledger_counts(self) -> dict[str, int]:
        """In-memory ledger rows per state."""
        with self._lock:
            return self._ledger.counts()

    def outbox_read(self, platform: str, chat_id: str | None, after: int,
                    limit: int) -> list[dict[str, Any]]:
        """One chat's in-memory outbox rows after ``after``."""
        with self._lock:
            return self._outbox.read(platform, chat_id, after, limit)

    def outbox_head(self) -> int:
        """The highest outbox cursor so far."""
        with self._lock:
            return self._outbox.head()

    # -- diagnostics and lifecycle ----------------------------------------------------------

    def rows(self, table: str) -> list[dict[str, Any]]:
        """Every row of a diagnostic table, as this backend keeps it."""
        if table not in DIAGNOSTIC_TABLES:
            raise ValueError(f"not a diagnostic table: {table!r}")
        with self._lock:
            if table == "routing":
                return [{"session_key": k, "entry": text, **flags._asdict()}
                        for k, (text, flags) in self._routing.items()]
            if table == "inbox":
                return sorted((dict(r) for r in self._inbox.rows.values()),
                              key=lambda r: r["seq"])
            if table == "deliveries":
                return self._ledger.select(None, None)
            if table == "outbox":
                return [dict(r) for r in self._outbox.rows]
        if table == "messages":
            return [{"session_id": sid, **m} for sid in self._transcripts.session_ids()
                    for m in self._transcripts.records(sid)]
        if table == "node_state":
            return [{"node_id": self._node_id, "name": name, "value": value}
                    for name, value in sorted(read_home_files(self._home).items())]
        return []  # no sessions table on files

    def close(self) -> None:
        """Write ``sessions.json`` if a write is still owed (the store closes any database
        it opened)."""
        self._closed = True
        self._mirror.close(flush=True)


def _check_text(session_key: str, text: str) -> None:
    """Refuse an entry ``sessions.json`` could not hold (a lone surrogate in a name): once in
    memory, it would stop every later rewrite of the file."""
    try:
        (session_key + text).encode("utf-8")
    except UnicodeError as exc:
        raise StoreRejectedError(f"write rejected by the degraded-mode files: {exc}") from None
