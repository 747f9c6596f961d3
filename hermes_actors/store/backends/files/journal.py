"""The ``sessions`` rows' changes made in degraded mode, kept for the database (§5).

The files backend has no ``sessions`` table, so the changes a database would make there (a
session's creation, its end with a reason, its token counts) are appended to one journal,
``<sessions_dir>/sessions.journal``: one JSON object per line, fsync'ed per write like the
transcripts. The first line names the journal (``{"journal": "<id>"}``); the next start
with a working database applies the journal in one transaction together with that name
(node value ``imported_journal``), so a crash before the file is set aside
(``sessions.journal.imported``) cannot add the same tokens twice.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from hermes_actors.model.ids import new_id
from hermes_actors.model.jsontext import to_json
from hermes_actors.store.backends.files.jsonl import append_lines, read_lines
from hermes_actors.store.ops import AddTokens, CreateSession, EndSession

__all__ = ["IMPORTED_JOURNAL", "JOURNAL_NAME", "JournalOp", "SessionJournal"]

#: The journal's file name in the sessions directory.
JOURNAL_NAME = "sessions.journal"
#: The node value naming the last journal a database applied.
IMPORTED_JOURNAL = "imported_journal"

JournalOp = CreateSession | EndSession | AddTokens

_KINDS: dict[str, type[JournalOp]] = {"create": CreateSession, "end": EndSession,
                                      "tokens": AddTokens}
_NAMES = {kind: name for name, kind in _KINDS.items()}


def _line(op: JournalOp) -> str:
    return to_json({"op": _NAMES[type(op)], **vars(op)})


def _op(record: dict[str, Any]) -> JournalOp | None:
    name = record.pop("op", None)
    kind = _KINDS.get(name) if isinstance(name, str) else None
    if kind is None:
        return None
    try:
        return kind(**record)
    except TypeError:  # fields of another version: not this journal's
        return None


class SessionJournal:
    """The journal file of one sessions directory (thread-safe appends)."""

    def __init__(self, directory: Path) -> None:
        #: The journal's path.
        self.path = directory / JOURNAL_NAME
        self._lock = threading.Lock()
        self._named = False

    def append(self, ops: list[JournalOp]) -> None:
        """Append ``ops`` durably; ``OSError`` when the disk refuses."""
        lines = [_line(op) for op in ops]
        with self._lock:
            if not self._named:
                if self.path.exists() and self.read()[0] is None:  # its first write was torn
                    self.path.replace(self.path.with_name(self.path.name + ".torn"))
                if not self.path.exists():
                    lines.insert(0, to_json({"journal": new_id()}))
            append_lines(self.path, "".join(line + "\n" for line in lines).encode())
            self._named = True

    def read(self) -> tuple[str | None, list[JournalOp]]:
        """The journal's name and its readable ops, in order (``(None, [])`` without a file
        or a name line)."""
        records = read_lines(self.path)
        if not records or not isinstance(records[0].get("journal"), str):
            return None, []
        ops = [op for op in map(_op, records[1:]) if op is not None]
        return records[0]["journal"], ops

    def retire(self) -> None:
        """Set the applied journal aside (``sessions.journal.imported``)."""
        self.path.replace(self.path.with_name(self.path.name + ".imported"))
