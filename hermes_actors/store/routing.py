"""How a routing entry is stored: its flags as columns, the rest as JSON text (§5, §17.14).

A routing row is ``(session_key, entry, flags)``. The *flags* are what recovery, pruning and
"who is mid-turn" ask about, and what every turn changes: the turn marker (token, start,
internal), ``resume_pending``, ``suspended`` and the activity time ``updated_at``. They are
columns, so those questions are plain indexed queries in any SQL database, and a turn's
start and end write a handful of column values instead of rendering the entry again. The
*entry* text is ``SessionEntry.to_dict()`` without the flag fields: it changes only when the
conversation's identity does (a new session id, an origin, a reset, resume bookkeeping).

Reading overlays the flags on the text, so the columns win over anything an older build
left in the JSON (rows written before the flags were columns carry them in the text too).
Times in flags are epoch seconds; the entry holds aware UTC datetimes.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Mapping
from json.encoder import encode_basestring as _quote
from typing import Any, NamedTuple

from hermes_actors.model.entry import SessionEntry, validate_session_key
from hermes_actors.model.jsontext import to_json
from hermes_actors.model.timeutil import epoch, from_epoch, parse_timestamp

__all__ = [
    "FLAG_FIELDS",
    "NO_FLAGS",
    "RoutingFlags",
    "RoutingRow",
    "entry_text",
    "flags_from_data",
    "flags_of",
    "full_entry_text",
    "is_prunable",
    "longest_idle",
    "needs_recovery",
    "parse_row",
    "same_text",
]


class RoutingFlags(NamedTuple):
    """The column part of a routing row."""

    #: The durable in-flight turn marker's token (``None``: no turn is marked).
    active_turn_token: str | None = None
    #: When the marked turn started, epoch seconds.
    active_turn_started_at: float | None = None
    #: Whether the marked turn is an internal one.
    active_turn_internal: bool = False
    #: §6: keep the session id and auto-continue after a restart.
    resume_pending: bool = False
    #: §6: the next access rotates to a new session id.
    suspended: bool = False
    #: The last user activity, epoch seconds (``None`` when unknown).
    updated_at: float | None = None


#: The entry fields stored as columns (in :class:`RoutingFlags` order).
FLAG_FIELDS = RoutingFlags._fields
#: The flags of an entry with none set.
NO_FLAGS = RoutingFlags()
_FLAG_SET = frozenset(FLAG_FIELDS)
_text_values = operator.itemgetter(*(field.name for field in dataclasses.fields(SessionEntry)
                                     if field.name not in _FLAG_SET))
_TIMES = ("active_turn_started_at", "updated_at")


class RoutingRow(NamedTuple):
    """One stored routing row."""

    session_key: str
    #: The entry's JSON text without the flag fields.
    entry: str
    flags: RoutingFlags


def flags_of(entry: SessionEntry) -> RoutingFlags:
    """The flag columns of ``entry``."""
    started, updated = entry.active_turn_started_at, entry.updated_at
    return RoutingFlags(  # (``.timestamp()`` is what ``epoch`` does; twice a turn, inline)
        entry.active_turn_token,
        started.timestamp() if started is not None else None,
        bool(entry.active_turn_internal),
        bool(entry.resume_pending),
        bool(entry.suspended),
        updated.timestamp() if updated is not None else None,
    )


def entry_text(entry: SessionEntry) -> str:
    """The entry's JSON text without the flag fields."""
    data = entry.to_dict()
    for name in FLAG_FIELDS:
        del data[name]
    return to_json(data)


def same_text(old: SessionEntry, new: SessionEntry) -> bool:
    """Whether ``old`` and ``new`` differ at most in their flags (so ``old``'s text holds)."""
    # (an entry's instance dict holds exactly its fields: one C-level pick and compare of
    # the text fields, where a loop over the fields ran ~25 Python-level steps, twice a turn)
    return _text_values(old.__dict__) == _text_values(new.__dict__)


def _time(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    parsed = parse_timestamp(value) if value is not None else None
    return epoch(parsed) if parsed is not None else None


def flags_from_data(data: Mapping[str, Any]) -> RoutingFlags:
    """The flags of an entry dict (a ``to_dict()``, a mirror entry, an old row's JSON),
    read as tolerantly as ``SessionEntry.from_dict`` reads them (a malformed marker pair
    is no marker)."""
    token = data.get("active_turn_token")
    started = _time(data.get("active_turn_started_at"))
    if not (isinstance(token, str) and token and started is not None):
        token, started, internal = None, None, False
    else:
        internal = bool(data.get("active_turn_internal", False))
    return RoutingFlags(token, started, internal, bool(data.get("resume_pending", False)),
                        bool(data.get("suspended", False)), _time(data.get("updated_at")))


def needs_recovery(flags: RoutingFlags) -> bool:
    """Whether recovery must look at the row: a turn marker or a pending resume."""
    return flags.active_turn_token is not None or flags.resume_pending


def is_prunable(flags: RoutingFlags, cutoff: float) -> bool:
    """Whether pruning may consider the row: nothing pending (no marker, no resume, not
    suspended) and no activity since ``cutoff`` (or none known: the entry decides)."""
    return (not needs_recovery(flags) and not flags.suspended
            and (flags.updated_at is None or flags.updated_at < cutoff))


def longest_idle(rows: list[RoutingRow], limit: int) -> list[RoutingRow]:
    """At most ``limit`` of ``rows``, the longest idle first: by ``updated_at``, rows with
    none last (their entries decide, and they must not hold back dated ones), ties by key
    (as the SQL backends order them)."""
    return sorted(rows, key=lambda row: (row.flags.updated_at is None,
                                         row.flags.updated_at or 0.0, row.session_key))[:limit]


def parse_row(key: str, text: str | Mapping[str, Any], flags: RoutingFlags) -> SessionEntry:
    """The entry of a stored row (``ValueError`` when it is unusable or unsafe): the text's
    fields, then the flags over them."""
    import json

    validate_session_key(key)
    data = json.loads(text) if isinstance(text, str) else text
    if not isinstance(data, dict):
        raise ValueError("entry is not a JSON object")
    data = dict(data)
    stored_key = data.setdefault("session_key", key)
    if stored_key != key:
        raise ValueError(f"entry names another session key {stored_key!r}")
    data.update(flags._asdict())
    for name in _TIMES:
        if data[name] is not None:
            data[name] = from_epoch(data[name])
    try:
        return SessionEntry.from_dict(data)
    except TypeError as exc:
        raise ValueError(str(exc)) from None


def _iso_text(seconds: float) -> str:
    """The JSON string of an epoch time in ISO 8601 (UTC), as ``to_dict()`` renders it."""
    return '"' + from_epoch(seconds).isoformat() + '"'


def full_entry_text(text: str, flags: RoutingFlags) -> str:
    """The whole entry as JSON text (what ``sessions.json`` holds): the stored text with the
    flags written into it, as ``to_dict()`` would render them (times in ISO 8601).

    The flags' JSON is assembled by hand, the same text ``to_json`` gives (the mirror
    renders every row with this: 100,000 rows at every write; 2.5x faster than building
    and encoding a dict)."""
    token, started, internal, resume, suspended, updated = flags
    tail = "".join((
        '"active_turn_token": ', "null" if token is None else _quote(token),
        ', "active_turn_started_at": ',
        "null" if started is None else _iso_text(started),
        ', "active_turn_internal": ', "true" if internal else "false",
        ', "resume_pending": ', "true" if resume else "false",
        ', "suspended": ', "true" if suspended else "false",
        ', "updated_at": ', "null" if updated is None else _iso_text(updated),
        "}",
    ))
    body = text.rstrip()
    if not body.endswith("}"):
        raise ValueError("an entry text must be a JSON object")
    if body[:-1].rstrip().endswith("{"):
        return "{" + tail
    return body[:-1] + ", " + tail
