"""Which routing entries a store starts with: database rows first, then the mirror (§5).

Pure: takes the rows and the mirror's parsed content, returns the entries plus what to do
about the rest, so the store (and the read-only CLI) apply one rule:

* every database row that parses is an entry;
* a mirror entry the database lacks is added, and listed in ``from_mirror`` so the store
  writes it back (this is how a lost ``routing`` table is rebuilt);
* when the mirror was written in degraded mode it is newer than the database, so its
  entries win (``mirror_wins``);
* anything malformed or unsafe (path traversal in ids) is skipped and reported in
  ``skipped`` with the reason; the rest still loads.

The store itself parses database rows lazily (:mod:`~hermes_actors.store.entrymap`), so at
start it only needs :func:`mirror_additions`; :func:`merge_entries` is the whole rule, for
the CLI.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any, NamedTuple

from hermes_actors.model.entry import SessionEntry, validate_session_key
from hermes_actors.store.routing import RoutingRow, parse_row

__all__ = ["LoadResult", "merge_entries", "mirror_additions", "parse_entry"]


class LoadResult(NamedTuple):
    """The outcome of :func:`merge_entries`."""

    #: ``session_key -> SessionEntry`` to serve.
    entries: dict[str, SessionEntry]
    #: Keys whose entry came from the mirror (to be written back to the database).
    from_mirror: list[str]
    #: ``(key, reason)`` for every entry that was skipped.
    skipped: list[tuple[str, str]]


def parse_entry(key: str, data: Any) -> SessionEntry:
    """An entry from stored data under ``key``; ``ValueError`` when unusable or unsafe."""
    validate_session_key(key)
    if isinstance(data, str):
        data = json.loads(data)
    if not isinstance(data, dict):
        raise ValueError("entry is not a JSON object")
    data = dict(data)
    stored_key = data.setdefault("session_key", key)
    if stored_key != key:
        raise ValueError(f"entry names another session key {stored_key!r}")
    try:
        return SessionEntry.from_dict(data)
    except TypeError as exc:
        raise ValueError(str(exc)) from None


def mirror_additions(
    db_rows: Mapping[str, Any],
    mirror: Mapping[str, Any],
    *,
    mirror_wins: bool = False,
    winners: Collection[str] | None = None,
) -> tuple[dict[str, SessionEntry], list[tuple[str, str]]]:
    """The mirror entries to put over ``db_rows`` (``key -> stored data``), parsed, and the
    ``(key, reason)`` of mirror entries skipped. Database rows are parsed only where a
    winning mirror entry has to be compared with one. With ``mirror_wins`` and ``winners``
    (the keys degraded mode wrote), only those entries win over a database row."""
    added: dict[str, SessionEntry] = {}
    skipped: list[tuple[str, str]] = []
    for key, data in mirror.items():
        if str(key).startswith("_") or (key in db_rows and not (
                mirror_wins and (winners is None or key in winners))):
            continue
        try:
            entry = parse_entry(key, data)
        except ValueError as exc:
            skipped.append((key, f"sessions.json: {exc}"))
            continue
        if key in db_rows:
            try:
                if _parse_stored(key, db_rows[key]) == entry:
                    continue
            except ValueError:
                pass
        added[key] = entry
    return added, skipped


def _parse_stored(key: str, stored: Any) -> SessionEntry:
    """The entry of a database row (a :class:`RoutingRow`) or of raw stored data."""
    if isinstance(stored, RoutingRow):
        return parse_row(key, stored.entry, stored.flags)
    return parse_entry(key, stored)


def merge_entries(
    db_rows: Iterable[RoutingRow],
    mirror: Mapping[str, Any],
    *,
    mirror_wins: bool = False,
    winners: Collection[str] | None = None,
) -> LoadResult:
    """Merge database rows and mirror entries by the rules in the module docstring."""
    rows = {row.session_key: row for row in db_rows}
    entries: dict[str, SessionEntry] = {}
    skipped: list[tuple[str, str]] = []
    for key, data in rows.items():
        try:
            entries[key] = _parse_stored(key, data)
        except ValueError as exc:
            skipped.append((key, f"database row: {exc}"))
    # a database row that does not parse loses to a usable mirror entry
    usable = {k: v for k, v in rows.items() if k in entries}
    added, mirror_skipped = mirror_additions(usable, mirror, mirror_wins=mirror_wins,
                                             winners=winners)
    entries.update(added)
    return LoadResult(entries, list(added), skipped + mirror_skipped)
