"""``EntryMap``: the store's routing entries in memory, read and parsed on first use.

A gateway with 100,000 stored sessions needs, at start, only the entries that carry a turn
marker or a resume flag; reading and parsing every row took seconds. So at start the map
holds every routing *key*, plus the JSON text of the rows that may need recovery (found
through the ``routing_recovery`` partial index). Any other entry is read from the database
(``fetch``) and parsed the first time something asks for it, then kept. Whether a row may
need recovery is a substring test on its text: the store writes every row with one encoder,
so an entry without a marker always contains ``"active_turn_token": null`` and
``"resume_pending": false``; a row written any other way simply counts as flagged, which
is safe.

Without a database (degraded mode) every text is in memory. A row that does not parse
(hand-edited, unsafe ids) is skipped at its first use with one warning and the rest keeps
working. Thread-safe: what a commit publishes always wins over a read or parse that raced
it, because the database is never older than memory.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping

from hermes_actors.model.entry import SessionEntry
from hermes_actors.store.backends.sqlite.schema import ROUTING_CLEAN_MARKS

__all__ = ["EntryMap", "NotFetched", "may_need_recovery"]

log = logging.getLogger("hermes_actors.store")

(_MARKER_KEY, _NO_MARKER), (_RESUME_KEY, _NO_RESUME) = ROUTING_CLEAN_MARKS


def may_need_recovery(text: str) -> bool:
    """Whether the entry JSON ``text`` might carry a turn marker or a resume flag (the
    rule of the ``routing_recovery`` index; a key seen twice counts as flagged, since
    free-form ``metadata`` may hold one)."""
    return (_NO_MARKER not in text or _NO_RESUME not in text
            or text.count(_MARKER_KEY) > 1 or text.count(_RESUME_KEY) > 1)


class NotFetched(Exception):  # noqa: N818 - a signal, not an error
    """``fetch`` could not read the row now (the database is being switched away from);
    the key is kept, and its text may have been filled in meanwhile."""


def _needs_recovery(entry: SessionEntry) -> bool:
    return entry.active_turn_token is not None or entry.resume_pending


class EntryMap:
    """``session_key -> SessionEntry`` (see the module docstring).

    ``parse(key, text)`` builds an entry or raises ``ValueError``; ``fetch(key)`` reads one
    row's text from the database (``None`` when it has none); ``fetch_all()`` reads every
    ``(key, text)`` row. Both are only called for keys whose text is not in memory.
    """

    def __init__(self, parse: Callable[[str, str], SessionEntry],
                 fetch: Callable[[str], str | None] = lambda key: None,
                 fetch_all: Callable[[], Iterable[tuple[str, str]]] = tuple) -> None:
        self._parse = parse
        self._fetch = fetch
        self._fetch_all = fetch_all
        self._lock = threading.Lock()
        self._keys: dict[str, None] = {}  # insertion-ordered set
        self._texts: dict[str, str] = {}
        self._parsed: dict[str, SessionEntry] = {}
        self._flagged: set[str] = set()

    def load(self, keys: dict[str, None], texts: Mapping[str, str],
             parsed: Mapping[str, SessionEntry] = {}) -> None:  # noqa: B006 - read only
        """Replace the contents: every key that exists (an ordered set the map takes over),
        the texts known so far (those the map cannot fetch must be among them), and
        entries already parsed."""
        flagged = {k for k, t in texts.items() if may_need_recovery(t)}
        flagged.difference_update(parsed)
        flagged.update(k for k, e in parsed.items() if _needs_recovery(e))
        for key in texts:
            if key not in keys:
                keys[key] = None
        with self._lock:
            self._keys = keys
            self._texts = dict(texts)
            self._parsed = dict(parsed)
            self._flagged = flagged

    @property
    def parsed(self) -> int:
        """How many entries have been parsed (or committed) so far."""
        return len(self._parsed)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def get(self, key: str) -> SessionEntry | None:
        """The entry of ``key`` (read and parsed now if it has not been), or ``None``."""
        entry = self._parsed.get(key)
        if entry is not None:
            return entry
        text = self._texts.get(key)
        if text is None:
            if key not in self._keys:
                return None
            try:
                fetched = self._fetch(key)
            except NotFetched:
                fetched = NotFetched
            with self._lock:
                if key not in self._keys:  # deleted meanwhile
                    return None
                text = self._texts.get(key)  # a commit (or a fill) came first
                if text is None:
                    if fetched is NotFetched:  # unreadable now: keep the key
                        return None
                    if fetched is None:  # the row is gone
                        del self._keys[key]
                        return None
                    text = self._texts[key] = fetched
                entry = self._parsed.get(key)
            if entry is not None:
                return entry
        try:
            entry = self._parse(key, text)
        except ValueError as exc:
            log.warning("skipping session entry %r: database row: %s", key, exc)
            with self._lock:
                if self._texts.get(key) is text:
                    del self._texts[key]
                    self._keys.pop(key, None)
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
            self._keys[key] = None
            self._texts[key] = text
            self._parsed[key] = entry
            if _needs_recovery(entry):
                self._flagged.add(key)
            else:
                self._flagged.discard(key)

    def pop(self, key: str) -> None:
        """Forget ``key``."""
        with self._lock:
            self._keys.pop(key, None)
            self._texts.pop(key, None)
            self._parsed.pop(key, None)
            self._flagged.discard(key)

    def texts(self) -> dict[str, str]:
        """Every ``session_key -> entry JSON text`` (what the mirror writes). Texts not in
        memory yet are read in one pass and kept (the next mirror write needs them again);
        a failing read raises the backend's error."""
        with self._lock:
            complete = len(self._keys) == len(self._texts)
        if not complete:
            self.fill(dict(self._fetch_all()))
        with self._lock:
            return {k: self._texts[k] for k in self._keys if k in self._texts}

    def fill(self, texts: Mapping[str, str]) -> int:
        """Take texts for keys whose text is not in memory (never over newer ones); returns
        how many keys still have none."""
        with self._lock:
            for key in self._keys:
                if key not in self._texts and key in texts:
                    self._texts[key] = texts[key]
            return len(self._keys) - len(self._texts)

    def values(self) -> list[SessionEntry]:
        """Every entry (reads and parses whatever has not been yet)."""
        with self._lock:
            keys = list(self._keys)
            missing = len(self._keys) - len(self._texts)
        if missing > 1:  # one pass over the table instead of a read per key
            try:
                self.fill(dict(self._fetch_all()))
            except Exception as exc:  # noqa: BLE001 - then row by row, as far as it goes
                log.warning("cannot read the routing rows in one pass (%s)", exc)
        return self._entries(keys)

    def _entries(self, keys: Iterable[str]) -> list[SessionEntry]:
        out = []
        for key in keys:
            entry = self.get(key)
            if entry is not None:
                out.append(entry)
        return out

    def flagged(self) -> list[SessionEntry]:
        """The entries that carry a turn marker or a resume flag, in load/commit order."""
        with self._lock:
            flagged = self._flagged
            keys = [k for k in self._keys if k in flagged]
        return [e for e in self._entries(keys) if _needs_recovery(e)]
