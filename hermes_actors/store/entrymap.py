"""``EntryMap``: the store's routing entries in memory, parsed from their JSON text on demand.

A gateway with 100,000 stored sessions needs, at start, only the entries that carry a turn
marker or a resume flag; parsing every row into a :class:`SessionEntry` took seconds. So
the map keeps each committed row's JSON text (which the ``sessions.json`` mirror reuses
verbatim) and parses an entry the first time something asks for it. Entries that *may*
need recovery are indexed by a substring test on that text: the store writes every row
with one encoder, so an entry without a marker always contains ``"active_turn_token":
null`` and ``"resume_pending": false``; a row written any other way simply counts as
flagged and is parsed at start, which is safe.

A row that no longer parses (hand-edited database, unsafe ids) is skipped at its first
access with one warning, as loading did before, and the rest keeps working. Thread-safe:
a parse publishes its entry only if the text it parsed is still the current one, so a
commit racing a lazy parse always wins.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from hermes_actors.model.entry import SessionEntry

__all__ = ["EntryMap", "may_need_recovery"]

log = logging.getLogger("hermes_actors.store")

_NO_MARKER = '"active_turn_token": null'
_NO_RESUME = '"resume_pending": false'


def may_need_recovery(text: str) -> bool:
    """Whether the entry JSON ``text`` might carry a turn marker or a resume flag."""
    return _NO_MARKER not in text or _NO_RESUME not in text


def _needs_recovery(entry: SessionEntry) -> bool:
    return entry.active_turn_token is not None or entry.resume_pending


class EntryMap:
    """``session_key -> SessionEntry`` over committed JSON texts (see the module docstring).

    ``parse(key, text)`` builds an entry or raises ``ValueError``.
    """

    def __init__(self, parse: Callable[[str, str], SessionEntry]) -> None:
        self._parse = parse
        self._lock = threading.Lock()
        self._texts: dict[str, str] = {}
        self._parsed: dict[str, SessionEntry] = {}
        self._flagged: set[str] = set()

    def load(self, texts: dict[str, str], parsed: dict[str, SessionEntry]) -> None:
        """Replace the contents: ``texts`` for every key (the map takes the dict over),
        ``parsed`` entries where known."""
        # may_need_recovery() inlined: this runs over every stored row at start
        no_marker, no_resume = _NO_MARKER, _NO_RESUME
        flagged = {k for k, t in texts.items() if no_marker not in t or no_resume not in t}
        flagged.difference_update(parsed)
        flagged.update(k for k, e in parsed.items() if _needs_recovery(e))
        with self._lock:
            self._texts = texts
            self._parsed = dict(parsed)
            self._flagged = flagged

    def __len__(self) -> int:
        return len(self._texts)

    @property
    def parsed(self) -> int:
        """How many entries have been parsed (or committed) so far."""
        return len(self._parsed)

    def __contains__(self, key: object) -> bool:
        return key in self._texts

    def get(self, key: str) -> SessionEntry | None:
        """The entry of ``key`` (parsed now if it has not been), or ``None``."""
        entry = self._parsed.get(key)
        if entry is not None:
            return entry
        text = self._texts.get(key)
        if text is None:
            return None
        try:
            entry = self._parse(key, text)
        except ValueError as exc:
            log.warning("skipping session entry %r: database row: %s", key, exc)
            with self._lock:
                if self._texts.get(key) is text:
                    del self._texts[key]
                    self._flagged.discard(key)
                return self._parsed.get(key)
        with self._lock:
            if self._texts.get(key) is not text:  # a commit replaced it meanwhile
                return self._parsed.get(key)
            self._parsed[key] = entry
        return entry

    def put(self, key: str, entry: SessionEntry, text: str) -> None:
        """Publish a committed entry and its JSON text."""
        with self._lock:
            self._texts[key] = text
            self._parsed[key] = entry
            if _needs_recovery(entry):
                self._flagged.add(key)
            else:
                self._flagged.discard(key)

    def pop(self, key: str) -> None:
        """Forget ``key``."""
        with self._lock:
            self._texts.pop(key, None)
            self._parsed.pop(key, None)
            self._flagged.discard(key)

    def texts(self) -> dict[str, str]:
        """A snapshot ``session_key -> entry JSON text`` (what the mirror writes)."""
        with self._lock:
            return dict(self._texts)

    def _entries(self, keys: Iterable[str]) -> list[SessionEntry]:
        out = []
        for key in keys:
            entry = self.get(key)
            if entry is not None:
                out.append(entry)
        return out

    def values(self) -> list[SessionEntry]:
        """Every entry (parses whatever has not been parsed yet)."""
        with self._lock:
            keys = list(self._texts)
        return self._entries(keys)

    def flagged(self) -> list[SessionEntry]:
        """The entries that carry a turn marker or a resume flag, in load/commit order."""
        with self._lock:
            flagged = self._flagged
            keys = [k for k in self._texts if k in flagged]
        return [e for e in self._entries(keys) if _needs_recovery(e)]
