"""The session lifecycle as pure decisions: §6's state machine, recovery and pruning rules.

These functions take entries and times and return decisions or new entries; the store does
the locking and the I/O. So the rules can be read (and tested) in one place:

* :func:`access_action` — what ``get_or_create_session`` does, in §6's order;
* :func:`fresh_entry` / :func:`successor` — the entries those actions produce;
* :func:`is_stale` — whether pruning may consider an entry at all.

No rule here looks at idle time or time of day to end a conversation: only an explicit
reset, a suspension or ``force_new`` gives a key a new ``session_id``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from hermes_actors.model.entry import SessionEntry, new_session_id
from hermes_actors.model.source import SessionSource, origin_of
from hermes_actors.model.timeutil import epoch

__all__ = [
    "ACCESS_ACTIONS",
    "access_action",
    "carry_marker_events",
    "clear_turn_marker",
    "merge_ids",
    "settle_owed",
    "fresh_entry",
    "origin_of",
    "is_stale",
    "successor",
    "touched",
]

#: ``create``: no entry; ``force_new``: caller asked; ``rotate``: suspended; ``resume``: keep
#: as is (resume pending); ``touch``: bump ``updated_at``; ``keep``: return unchanged.
ACCESS_ACTIONS = ("create", "force_new", "rotate", "resume", "touch", "keep")

def access_action(entry: SessionEntry | None, *, force_new: bool, touch_activity: bool) -> str:
    """§6 in order: missing or forced → new; suspended → rotate (beats resume); resume
    pending → unchanged (the flag is cleared only by a successful turn); else touch/keep."""
    if entry is None:
        return "create"
    if force_new:
        return "force_new"
    if entry.suspended:
        return "rotate"
    if entry.resume_pending:
        return "resume"
    return "touch" if touch_activity else "keep"


def _source_fields(source: SessionSource | None) -> dict[str, Any]:
    if source is None:
        return {}
    return {
        "origin": origin_of(source),
        "display_name": source.description,
        "platform": source.platform,
        "chat_type": source.chat_type,
    }


def fresh_entry(
    session_key: str, source: SessionSource | None, now: datetime, **flags: Any
) -> SessionEntry:
    """A new entry with a new ``session_id``, created and updated ``now``."""
    return SessionEntry(
        session_key=session_key,
        session_id=new_session_id(now),
        created_at=now,
        updated_at=now,
        **_source_fields(source),
        **flags,
    )


def successor(
    entry: SessionEntry, now: datetime, source: SessionSource | None = None, **flags: Any
) -> SessionEntry:
    """The entry that replaces ``entry``: new id, ``prev_session_id`` set, all flags reset
    (suspension, resume, turn marker), origin from ``source`` or kept from ``entry``."""
    new = fresh_entry(entry.session_key, source, now, prev_session_id=entry.session_id, **flags)
    if source is None and entry.origin is not None:
        new = replace(
            new,
            origin=entry.origin,
            display_name=entry.display_name,
            platform=entry.platform,
            chat_type=entry.chat_type,
        )
    return new


def touched(entry: SessionEntry, source: SessionSource, now: datetime) -> SessionEntry:
    """``entry`` with ``updated_at`` bumped and its origin refreshed from ``source``."""
    return replace(entry, updated_at=now, **_source_fields(source))


def clear_turn_marker(entry: SessionEntry) -> SessionEntry:
    """``entry`` without its durable turn marker."""
    return entry.evolve(
        active_turn_token=None, active_turn_started_at=None, active_turn_internal=False
    )


def carry_marker_events(entry: SessionEntry) -> SessionEntry:
    """``entry`` without its turn marker, the marked turn's events owed from now on (the
    turn ended, or was found after a restart, without an answer to them): the session's
    next turn answers them too, or a final notice does."""
    return clear_turn_marker(entry).evolve(
        owed_events=merge_ids(entry.owed_events, entry.active_turn_events))


def settle_owed(entry: SessionEntry, answered: tuple[str, ...]) -> SessionEntry | None:
    """``entry`` with the ``answered`` events no longer owed, or ``None`` when none was."""
    if not entry.owed_events or not answered:
        return None
    left = tuple(e for e in entry.owed_events if e not in answered)
    return None if len(left) == len(entry.owed_events) else entry.evolve(owed_events=left)


def merge_ids(*groups: tuple[str, ...]) -> tuple[str, ...]:
    """The event ids of ``groups`` in order, each once."""
    return tuple(dict.fromkeys(e for group in groups for e in group))


def is_stale(entry: SessionEntry, cutoff: float) -> bool:
    """Whether pruning may drop ``entry``: last activity before ``cutoff`` (epoch), and
    nothing about it still pending (suspension, a turn marker, a resume to run).

    Entries without any timestamp are kept: their age is unknown.
    """
    if entry.suspended or entry.active_turn_token is not None or entry.resume_pending:
        return False
    when = entry.updated_at or entry.created_at
    return when is not None and epoch(when) < cutoff
