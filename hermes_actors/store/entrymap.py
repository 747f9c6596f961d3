"""``EntryMap``: the store's routing entries in memory, read and parsed on first use.

A gateway with 100,000 stored sessions needs, at start, only the entries that carry a turn
marker or a resume flag; reading and parsing every row took seconds. So at start the map
holds every routing *key*, plus the rows recovery needs (the backend's indexed
``routing_flagged`` query). Any other entry is read from the backend (``fetch``) and parsed
the first time something asks for it, then kept. A row is its entry text and its flag
columns (:mod:`~hermes_actors.store.routing`); the map keeps both, so the mirror can be
written without serialising any entry again.

A row that does not parse (hand-edited, unsafe ids) is skipped at its first use with one
warning and the rest keeps working. Thread-safe: what a commit publishes always wins over a
read or parse that raced it, because the backend is never older than memory.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping

from hermes_actors._green import brief_lock, let_others_run
from hermes_actors.model.entry import SessionEntry
from hermes_actors.store.routing import (
    RoutingFlags,
    RoutingRow,
    flags_of,
    needs_recovery,
    parse_row,
)

__all__ = ["FILL_PIECE", "EntryMap", "NotFetched", "RowsSnapshot", "Stored"]

log = logging.getLogger("hermes_actors.store")

#: A row as the map keeps it: ``(entry text, flags)``.
Stored = tuple[str, RoutingFlags]


#: Rows taken into the map between two yields of a long fill.
FILL_PIECE = 5_000


class RowsSnapshot(Mapping[str, Stored]):
    """The map's rows at one moment, in key order (:meth:`EntryMap.rows`): a key list and
    a row dict copied at once, ordered and filtered only as they are read."""

    def __init__(self, keys: list[str], rows: dict[str, Stored]) -> None:
        self._keys = keys
        self._rows = rows

    def __getitem__(self, key: str) -> Stored:
        return self._rows[key]

    def __iter__(self) -> Iterator[str]:
        rows = self._rows
        return (key for key in self._keys if key in rows)

    def __len__(self) -> int:
        return sum(1 for key in self._keys if key in self._rows)


class NotFetched(Exception):  # noqa: N818 - a signal, not an error
    """``fetch`` could not read the row now (the backend is being switched away from);
    the key is kept, and its row may have been filled in meanwhile."""


class EntryMap:
    """``session_key -> SessionEntry`` (see the module docstring).

    ``fetch(key)`` reads one row from the backend (``None`` when it has none, or raises
    :class:`NotFetched`); ``fetch_all()`` reads every row. Both are only called for keys
    whose row is not in memory.
    """

    def __init__(self, fetch: Callable[[str], RoutingRow | None] = lambda key: None,
                 fetch_all: Callable[[], Iterable[RoutingRow]] = tuple) -> None:
        self._fetch = fetch
        self._fetch_all = fetch_all
        self._lock = brief_lock()
        self._keys: dict[str, None] = {}  # insertion-ordered set
        self._rows: dict[str, Stored] = {}
        self._parsed: dict[str, SessionEntry] = {}
        self._flagged: set[str] = set()

    def load(self, keys: dict[str, None], rows: Iterable[RoutingRow],
             parsed: Mapping[str, tuple[SessionEntry, str]] = {}) -> None:  # noqa: B006
        """Replace the contents: every key that exists (an ordered set the map takes over),
        the rows known so far (those the map cannot fetch must be among them), and entries
        already parsed with their text."""
        stored = {row.session_key: (row.entry, row.flags) for row in rows}
        flagged = {key for key, (_, flags) in stored.items() if needs_recovery(flags)}
        for key, (entry, text) in parsed.items():
            stored[key] = (text, flags_of(entry))
            flagged.discard(key)
            if needs_recovery(stored[key][1]):
                flagged.add(key)
        for key in stored:
            if key not in keys:
                keys[key] = None
        with self._lock:
            self._keys = keys
            self._rows = stored
            self._parsed = {key: entry for key, (entry, _) in parsed.items()}
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
        stored = self._rows.get(key)
        if stored is None:
            if key not in self._keys:
                return None
            try:
                fetched: RoutingRow | None | type[NotFetched] = self._fetch(key)
            except NotFetched:
                fetched = NotFetched
            with self._lock:
                if key not in self._keys:  # deleted meanwhile
                    return None
                stored = self._rows.get(key)  # a commit (or a fill) came first
                if stored is None:
                    if fetched is NotFetched:  # unreadable now: keep the key
                        return None
                    if fetched is None:  # the row is gone
                        del self._keys[key]
                        return None
                    assert isinstance(fetched, RoutingRow)
                    stored = self._rows[key] = (fetched.entry, fetched.flags)
                entry = self._parsed.get(key)
            if entry is not None:
                return entry
        try:
            entry = parse_row(key, *stored)
        except ValueError as exc:
            log.warning("skipping session entry %r: database row: %s", key, exc)
            with self._lock:
                if self._rows.get(key) is stored:
                    del self._rows[key]
                    self._keys.pop(key, None)
                    self._flagged.discard(key)
                return self._parsed.get(key)
        with self._lock:
            if self._rows.get(key) is not stored:  # a commit replaced it meanwhile
                return self._parsed.get(key)
            self._parsed[key] = entry
        return entry

    def text_of(self, key: str) -> str | None:
        """The stored entry text of ``key`` when it is in memory."""
        stored = self._rows.get(key)
        return stored[0] if stored is not None else None

    def put(self, key: str, entry: SessionEntry, text: str, flags: RoutingFlags) -> None:
        """Publish a committed entry with its text and flags."""
        with self._lock:
            self._keys[key] = None
            self._rows[key] = (text, flags)
            self._parsed[key] = entry
            if needs_recovery(flags):
                self._flagged.add(key)
            else:
                self._flagged.discard(key)

    def pop(self, key: str) -> None:
        """Forget ``key``."""
        with self._lock:
            self._keys.pop(key, None)
            self._rows.pop(key, None)
            self._parsed.pop(key, None)
            self._flagged.discard(key)

    def rows(self) -> Mapping[str, Stored]:
        """Every ``session_key -> (text, flags)`` (what the mirror writes): a snapshot that
        later changes do not touch, safe to read from another thread. Rows not in memory
        yet are read in one pass and kept (the next mirror write needs them again); a
        failing read raises the backend's error."""
        with self._lock:
            complete = len(self._keys) == len(self._rows)
        if not complete:
            rows = list(self._fetch_all())
            for start in range(0, len(rows), FILL_PIECE):  # in pieces: this runs in the hub
                self.fill(rows[start:start + FILL_PIECE])
                let_others_run()
        with self._lock:  # two C-level copies: the hub is held for milliseconds only
            return RowsSnapshot(list(self._keys), dict(self._rows))

    def fill(self, rows: Iterable[RoutingRow]) -> int:
        """Take rows for keys whose row is not in memory (never over newer ones); returns
        how many keys still have none."""
        with self._lock:
            for row in rows:
                key = row.session_key
                if key in self._keys and key not in self._rows:
                    self._rows[key] = (row.entry, row.flags)
            return len(self._keys) - len(self._rows)

    def missing(self) -> int:
        """How many keys have no row in memory."""
        with self._lock:
            return len(self._keys) - len(self._rows)

    def values(self) -> list[SessionEntry]:
        """Every entry (reads and parses whatever has not been yet)."""
        with self._lock:
            keys = list(self._keys)
            missing = len(self._keys) - len(self._rows)
        if missing > 1:  # one pass over the table instead of a read per key
            try:
                self.fill(self._fetch_all())
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

    def replace_where(self, belongs: Callable[[str], bool], rows: Iterable[RoutingRow]) -> int:
        """Make ``rows`` the whole truth about the keys ``belongs`` picks: those keys are
        forgotten (parsed entries too), then every row of ``rows`` is taken (another writer
        changed them meanwhile: a cluster node gaining a shard). Returns how many rows."""
        taken = 0
        with self._lock:
            for key in [k for k in self._keys if belongs(k)]:
                del self._keys[key]
                self._rows.pop(key, None)
                self._parsed.pop(key, None)
                self._flagged.discard(key)
            for row in rows:
                key = row.session_key
                self._keys[key] = None
                self._rows[key] = (row.entry, row.flags)
                if needs_recovery(row.flags):
                    self._flagged.add(key)
                taken += 1
        return taken

    def flagged(self, belongs: Callable[[str], bool] | None = None) -> list[SessionEntry]:
        """The entries that carry a turn marker or a resume flag, in load/commit order
        (those of the keys ``belongs`` picks, when given)."""
        with self._lock:
            flagged = self._flagged
            keys = [k for k in self._keys if k in flagged and (belongs is None or belongs(k))]
        return [e for e in self._entries(keys)
                if e.active_turn_token is not None or e.resume_pending]

