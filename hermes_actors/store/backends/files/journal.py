"""``DegradedJournal``: what degraded mode changes besides routing and transcripts (§5, §8).

The files backend keeps the inbox, the delivery ledger and the outbox in memory and has no
``sessions`` table. So every change it makes there is also appended to one journal,
``<home>/degraded.journal``, fsync'ed before memory changes (one JSON object a line, like
the transcripts):
- an event accepted, consumed or withdrawn: an accepted message outlives the process, and
  what degraded mode consumed (events the failed database may still hold unconsumed) is
  not replayed and answered again;
- a ledger row recorded, claimed, released or finished: a reply owed is still owed after a
  crash, and one delivered is not sent again;
- an outbox row, with the cursor degraded mode drew for it: its replies can still be read,
  under the cursors clients read them at (the import keeps them; drawn above the clock in
  microseconds, they are above every cursor the database handed out, see
  :func:`~hermes_actors.store.backends.files.memory.clock_floor`), and no cursor a client
  saw is handed out again;
- a session created, ended (with its reason) or charged tokens;
- the housekeeping prunes of the three tables, so that a degraded run read back holds
  what a database would, not every row since degraded mode began;
- the id of each op list (``ListId``) before its ops, when it has any of the above: a
  list the database committed before its writer died unanswered, then applied here
  again, is skipped at the import (the database recorded its id), so it counts once.

A degraded start reads the journal back into memory. The next start with a working
database applies it, in order, in one transaction that also records the journal's name
(its first line, ``{"journal": "<id>"}``) and how many of its operations are applied now
as the node value ``imported_journal`` (``["<id>", <count>]``), then sets the file aside as
``degraded.journal.imported``: a crash between the two applies nothing twice (token counts
add up), and what a degraded run appended to the journal after such a crash is applied by
the next import (the operations past the count).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hermes_actors.model.ids import new_id
from hermes_actors.model.jsontext import to_json
from hermes_actors.store.backends.files.jsonl import append_lines, read_lines
from hermes_actors.store.ops import (
    AcceptEvent,
    AddTokens,
    ConsumeEvents,
    CreateSession,
    DeleteConversations,
    EndSession,
    LedgerClaim,
    LedgerFinish,
    LedgerPrune,
    LedgerRecord,
    LedgerRelease,
    LedgerReopen,
    ListId,
    Op,
    OutboxAppend,
    OutboxPrune,
    PruneInbox,
    WithdrawEvent,
)

__all__ = ["IMPORTED_JOURNAL", "JOURNALED", "JOURNAL_NAME", "DegradedJournal", "applied_count",
           "import_marker"]

log = logging.getLogger(__name__)

#: The journal's file name in the home.
JOURNAL_NAME = "degraded.journal"
#: The node value naming the last journal a database applied.
IMPORTED_JOURNAL = "imported_journal"

_TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    AcceptEvent, ConsumeEvents, WithdrawEvent, PruneInbox, LedgerRecord, LedgerClaim,
    LedgerRelease, LedgerReopen, LedgerFinish, LedgerPrune, OutboxAppend, OutboxPrune, CreateSession,
    EndSession, AddTokens, ListId, DeleteConversations)}
#: The operations journaled.
JOURNALED: tuple[type, ...] = tuple(_TYPES.values())


def _line(op: Op) -> str:
    return to_json({"op": type(op).__name__, **dataclasses.asdict(op)})


def _op(record: dict[str, Any]) -> Op | None:
    name = record.pop("op", None)
    kind = _TYPES.get(name) if isinstance(name, str) else None
    try:
        if kind is None:
            raise TypeError(f"no operation {name!r}")
        # (JSON has no tuples: a list is one, e.g. ConsumeEvents.event_ids)
        op: Op = kind(**{k: tuple(v) if isinstance(v, list) else v
                         for k, v in record.items()})
    except TypeError:
        log.warning("skipping an unreadable line of the degraded-mode journal: %r", record)
        return None
    return op


def import_marker(name: str, count: int) -> str:
    """The ``imported_journal`` value: journal ``name`` applied up to ``count`` operations."""
    return to_json([name, count])


def applied_count(marker: str | None, name: str, total: int) -> int:
    """How many of journal ``name``'s ``total`` operations the database applied, by its
    ``imported_journal`` value ``marker`` (an older build's, the bare name: all of them)."""
    if marker is None:
        return 0
    try:
        value = json.loads(marker)
    except ValueError:
        return 0
    if value == name:
        return total
    if (isinstance(value, list) and len(value) == 2 and value[0] == name
            and isinstance(value[1], int)):
        return min(value[1], total)
    return 0


class DegradedJournal:
    """The journal file of one home (thread-safe appends)."""

    def __init__(self, home: str | Path) -> None:
        #: The journal's path.
        self.path = Path(home) / JOURNAL_NAME
        self._lock = threading.Lock()
        self._named = False

    def append(self, ops: Iterable[Op]) -> None:
        """Append the journaled ones of ``ops`` durably; ``OSError`` when the disk refuses,
        ``UnicodeError`` for a text no file can hold."""
        ops = [op for op in ops if isinstance(op, JOURNALED)]
        if all(type(op) is ListId for op in ops):  # nothing journaled but the list's id
            return
        lines = [_line(op) for op in ops]
        data = "".join(line + "\n" for line in lines).encode()
        with self._lock:
            if not self._named:
                if self.path.exists() and self.read()[0] is None:  # its first write was torn
                    self.path.replace(self.path.with_name(self.path.name + ".torn"))
                if not self.path.exists():
                    data = (to_json({"journal": new_id()}) + "\n").encode() + data
            append_lines(self.path, data)
            self._named = True

    def read(self) -> tuple[str | None, list[Op]]:
        """The journal's name and its readable operations, in order (``(None, [])``
        without a file or a name line)."""
        records = read_lines(self.path)
        if not records or not isinstance(records[0].get("journal"), str):
            return None, []
        ops = [op for op in map(_op, records[1:]) if op is not None]
        return records[0]["journal"], ops

    def retire(self) -> None:
        """Set the applied journal aside (``degraded.journal.imported``)."""
        self.path.replace(self.path.with_name(self.path.name + ".imported"))
