"""What degraded mode left behind, moved into the database at the next start with a working
one (§5): the journal of inbox, ledger, outbox and ``sessions`` changes, and the JSONL
transcripts.

Both imports are idempotent: the journal's marker (a node value written in the same
transaction as the changes it covers) counts what was applied, and a transcript's records
are compared with the rows the database already has. A failed import is logged and retried
at the next start; it never stops this one.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from pathlib import Path

from hermes_actors.errors import StoreError
from hermes_actors.model.entry import validate_session_id
from hermes_actors.model.events import MessageEvent
from hermes_actors.store.backends.files.journal import (
    IMPORTED_JOURNAL,
    DegradedJournal,
    applied_count,
    import_marker,
)
from hermes_actors.store.backends.files.jsonl import SUFFIX, JsonlTranscripts
from hermes_actors.store.ops import (
    AcceptEvent,
    AppendMessage,
    ConsumeEvents,
    NodeValue,
    Op,
    OutboxAppend,
)
from hermes_actors.store.protocol import Backend
from hermes_actors.store.transcript import normalize_message

__all__ = ["import_degraded_journal", "import_jsonl_transcripts"]

log = logging.getLogger("hermes_actors.store")


def import_degraded_journal(backend: Backend, home: Path, node_id: str) -> list[Op]:
    """Apply what degraded mode journaled (inbox, ledger, outbox and ``sessions``
    changes), once (see :mod:`~hermes_actors.store.backends.files.journal`); the ops of the
    journal imported now (none when there was nothing to import or the import failed)."""
    journal = DegradedJournal(home)
    try:
        name, ops = journal.read()
        if name is None:
            return []
        done = applied_count(backend.node_values(node_id).get(IMPORTED_JOURNAL),
                             name, len(ops))
        if done < len(ops):  # (a degraded run after a crash may have appended more)
            _check_outbox_cursors(backend, ops[done:])
            # the marker first: a list at the end whose id the database has (ListId)
            # is skipped, with nothing after it
            backend.apply([NodeValue(node_id, IMPORTED_JOURNAL, import_marker(name, len(ops))),
                           *_onto_held_events(backend, ops[done:])])
        journal.retire()
        log.warning("imported %d changes of degraded mode from %s", len(ops) - done,
                    journal.path)
        return ops[done:]
    except (StoreError, OSError) as exc:
        log.warning("cannot import %s: %s", journal.path, exc)
        return []


def _check_outbox_cursors(backend: Backend, ops: list[Op]) -> None:
    """Say so loudly if degraded mode's outbox cursors are not all above the database's:
    drawn above the clock, they are unless the clock was set back (or a copy of an old
    database came back). They are imported unchanged all the same: never numbered anew (a
    reader would read a reply twice); one a row here already has fails the import, which is
    then retried at every start."""
    cursors = [op.cursor for op in ops if type(op) is OutboxAppend and op.cursor is not None]
    if not cursors:
        return
    head = backend.outbox_head()
    if min(cursors) <= head:
        log.error("degraded mode's outbox cursors (from %d) are not above the database's "
                  "highest (%d): was the clock set back? Clients may miss those replies",
                  min(cursors), head)


def _onto_held_events(backend: Backend, ops: list[Op]) -> list[Op]:
    """A message degraded mode accepted whose ingress key an unconsumed event of the
    database holds (accepted before the failure, then retried by its client or redelivered
    by its platform) is that event: its consumption in degraded mode (it was answered)
    consumes the database's copy too, which is otherwise replayed and answered a second
    time."""
    keys = {op.ingress_key for op in ops if isinstance(op, AcceptEvent) and op.ingress_key}
    if not keys:
        return ops
    holders = {}
    for _, payload in backend.pending_inbox():
        try:
            event = MessageEvent.from_dict(payload)
        except (KeyError, TypeError, ValueError):
            continue
        if event.ingress_key in keys:
            holders[event.ingress_key] = event.event_id
    same = {op.event_id: holders[op.ingress_key] for op in ops
            if isinstance(op, AcceptEvent) and op.ingress_key in holders}
    return [dataclasses.replace(op, event_ids=tuple(same.get(i, i) for i in op.event_ids))
            if isinstance(op, ConsumeEvents) and same.keys() & set(op.event_ids) else op
            for op in ops]


def import_jsonl_transcripts(backend: Backend, transcripts: JsonlTranscripts,
                             ts: Callable[[], float]) -> None:
    """Move transcripts written in degraded mode into the database (idempotent); ``ts()``
    stamps a record without a timestamp."""
    for session_id in transcripts.session_ids():
        try:
            validate_session_id(session_id)
            have = {
                (m["role"], m["content"], m["timestamp"])
                for m in backend.load_messages(session_id)
            }
            ops: list[Op] = []
            for record in transcripts.records(session_id):
                msg = normalize_message(record, ts())
                if (msg["role"], msg["content"], msg["timestamp"]) not in have:
                    ops.append(AppendMessage(session_id, msg, record.get("turn_token"),
                                             bool(record.get("is_reply"))))
            if ops:
                backend.apply(ops)
            path = transcripts.path(session_id)
            os.replace(path, path.with_name(path.name + ".imported"))
            log.warning("imported %d messages of %s from %s", len(ops), session_id, path)
        except (StoreError, ValueError, OSError) as exc:
            log.warning("cannot import transcript %s%s: %s", session_id, SUFFIX, exc)
