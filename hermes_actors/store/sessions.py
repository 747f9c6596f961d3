"""``SessionLifecycle``: the routing entries' life: §6's state machine, resets, suspension,
resume flags, turn markers (compare-and-swap), pruning, transcripts and usage (§5, §17.15).

Each change decides with a pure function from :mod:`~hermes_actors.store.lifecycle` under the
key's lock and commits through the :class:`~hermes_actors.store.core.StoreCore`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from hermes_actors.errors import StoreError
from hermes_actors.model.entry import SessionEntry, validate_session_id
from hermes_actors.model.ids import new_id
from hermes_actors.model.keys import build_session_key
from hermes_actors.model.source import SessionSource
from hermes_actors.model.timeutil import epoch
from hermes_actors.store import lifecycle
from hermes_actors.store.core import StoreCore
from hermes_actors.store.ops import (
    AddTokens,
    AppendMessage,
    DeleteConversations,
    EndSession,
    Op,
)
from hermes_actors.store.transcript import normalize_message

__all__ = ["SessionLifecycle"]

log = logging.getLogger("hermes_actors.store")


class SessionLifecycle:
    """The session methods of the store (its facade delegates here)."""

    def __init__(self, core: StoreCore,
                 has_active_processes: Callable[[str], bool] | None) -> None:
        self._core = core
        self._has_active_processes = has_active_processes

    # -- reading ----------------------------------------------------------------------------

    def session_key_for(self, source: SessionSource) -> str:
        """The session key of ``source`` under this store's configuration (§3)."""
        config = self._core.config
        return build_session_key(
            source,
            group_sessions_per_user=config.group_sessions_per_user,
            thread_sessions_per_user=config.thread_sessions_per_user,
            whatsapp_aliases=config.whatsapp.lid_aliases or None,
        )

    def load_transcript(self, session_id: str, *,
                        before_turn: str | None = None) -> list[dict[str, Any]]:
        """The transcript of ``session_id`` in order (§17.13 message dicts)."""
        sid = validate_session_id(session_id)
        return self._core.read(lambda backend: backend.load_messages(sid, before_turn))

    def load_transcript_tail(self, session_id: str, limit: int) -> list[dict[str, Any]]:
        """The last ``limit`` messages of ``session_id``'s transcript, in order, without
        reading the rest."""
        sid = validate_session_id(session_id)
        return self._core.read(lambda backend: backend.load_tail(sid, limit))

    def message_count(self, session_id: str) -> int:
        """How many transcript messages ``session_id`` has."""
        sid = validate_session_id(session_id)
        return self._core.read(lambda backend: backend.message_count(sid))

    # -- the state machine (§6) -------------------------------------------------------------

    def get_or_create_session(self, source: SessionSource, force_new: bool = False,
                              touch_activity: bool = True) -> SessionEntry:
        """The entry for ``source``'s key after §6: create, force a new session, rotate a
        suspended one, keep a resume-pending one unchanged, or touch ``updated_at``."""
        core = self._core
        key = self.session_key_for(source)
        entry = core.entries.get(key)
        if entry is not None and lifecycle.access_action(
                entry, force_new=force_new, touch_activity=touch_activity) in ("keep", "resume"):
            return entry  # nothing to write: an immutable snapshot needs no lock
        with core.key_lock(key):
            entry = core.entries.get(key)
            action = lifecycle.access_action(entry, force_new=force_new,
                                             touch_activity=touch_activity)
            now = core.now()
            if entry is None:
                new = lifecycle.fresh_entry(key, source, now)
                core.commit([core.create_op(new)], put=[new])
            elif action == "force_new":
                new = lifecycle.successor(entry, now, source)
                core.commit(self._cut(entry, new, "force_new"), put=[new])
            elif action == "rotate":
                new = lifecycle.successor(entry, now, source, was_auto_reset=True,
                                          auto_reset_reason="suspended")
                core.commit(self._cut(entry, new, "suspended"), put=[new])
            elif action == "touch":
                new = lifecycle.touched(entry, source, now)
                core.commit([], put=[new])
            else:
                new = entry
            return new

    def reset_session(self, key: str) -> SessionEntry | None:
        """``/new``/``/reset``: end the old session (``session_reset``), start a new one with
        ``is_fresh_reset`` and ``prev_session_id``. ``None`` for an unknown key."""
        core = self._core
        with core.key_lock(key):
            entry = core.entries.get(key)
            if entry is None:
                return None
            new = lifecycle.successor(entry, core.now(), None, is_fresh_reset=True)
            core.commit(self._cut(entry, new, "session_reset"), put=[new])
            return new

    def _cut(self, old: SessionEntry, new: SessionEntry, reason: str) -> list[Op]:
        """Operations of a session boundary: end ``old``'s row with ``reason``, start
        ``new``'s."""
        ended_at = epoch(new.created_at) if new.created_at else self._core.ts()
        return [EndSession(old.session_id, reason, ended_at), self._core.create_op(new)]

    def change(self, key: str, decide: Callable[[SessionEntry], SessionEntry | None]) -> bool:
        """Apply ``decide(entry)`` under the key lock: ``None`` refuses, the same entry is a
        no-op, anything else is committed. ``False`` for unknown keys and refusals."""
        core = self._core
        with core.key_lock(key):
            entry = core.entries.get(key)
            if entry is None:
                return False
            new = decide(entry)
            if new is None:
                return False
            if new != entry:
                core.commit([], put=[new])
            return True

    def suspend_session(self, key: str) -> bool:
        """Mark ``key`` suspended: its next access rotates to a new session id."""
        return self.change(key, lambda e: e.evolve(suspended=True))

    def unsuspend_session(self, key: str) -> bool:
        """Clear ``suspended`` (an operator's call): the next access keeps the session id.
        ``False`` for an unknown key."""
        return self.change(key, lambda e: e.evolve(suspended=False))

    def mark_resume_pending(self, key: str, reason: str) -> bool:
        """Set ``resume_pending`` with ``reason`` (replacing an older one: the caller states
        the newer cause) and ``last_resume_marked_at``; refused on a suspended entry."""
        if not isinstance(reason, str) or not reason:
            raise ValueError("a resume reason must be a non-empty string")
        now = self._core.now()

        def mark(entry: SessionEntry) -> SessionEntry | None:
            if entry.suspended:
                return None
            return entry.evolve(resume_pending=True, resume_reason=reason,
                                last_resume_marked_at=now)

        return self.change(key, mark)

    def clear_resume_pending(self, key: str) -> bool:
        """Clear ``resume_pending`` and its reason (after a successful turn)."""
        entry = self._core.entries.get(key)
        if entry is not None and not entry.resume_pending and entry.resume_reason is None:
            return True  # the common case after every turn: nothing to change, no lock
        return self.change(key, lambda e: e.evolve(resume_pending=False, resume_reason=None))

    def clear_resume_pending_many(self, keys: Iterable[str]) -> int:
        """:meth:`clear_resume_pending` for several keys in one commit; how many changed."""
        core = self._core

        def flagged(key: str) -> bool:
            entry = core.entries.get(key)
            return entry is not None and (entry.resume_pending or entry.resume_reason is not None)

        keys = [key for key in dict.fromkeys(keys) if flagged(key)]
        if not keys:
            return 0  # the common sweep: nothing to change, no pass over every lock
        with core.all_keys():
            changed = [entry.evolve(resume_pending=False, resume_reason=None)
                       for entry in (core.entries.get(key) for key in keys if flagged(key))
                       if entry is not None]
            if changed:
                core.commit([], put=changed)
        return len(changed)

    def mark_turn_active(self, key: str, *, internal: bool = False) -> str:
        """Durably mark a turn as running; returns its token (32 hex digits)."""
        token = new_id()
        now = self._core.now()
        marked = self.change(key, lambda e: e.evolve(
            active_turn_token=token, active_turn_started_at=now,
            active_turn_internal=bool(internal)))
        if not marked:
            raise StoreError(f"no session with key {key!r}")
        return token

    def clear_turn_active(self, key: str, token: str, *, carry: bool = False) -> bool:
        """Clear the turn marker only if it still holds ``token`` (compare-and-swap); with
        ``carry``, the turn's events stay owed (it ended without answering them)."""
        settle = lifecycle.carry_marker_events if carry else lifecycle.clear_turn_marker

        def clear(entry: SessionEntry) -> SessionEntry | None:
            if token is None or entry.active_turn_token != token:
                return None
            return settle(entry)

        return self.change(key, clear)

    def discard_active_turn_markers(self) -> int:
        """Clear every turn marker (after a clean shutdown); returns how many were set."""
        core = self._core
        with core.all_keys():
            # a turn a drain left running answered nothing: its events stay owed
            changed = [lifecycle.carry_marker_events(e) for e in core.entries.flagged()
                       if e.has_active_turn]
            if changed:
                core.commit([], put=changed)
            return len(changed)

    # -- pruning ----------------------------------------------------------------------------

    def _protected(self, key: str) -> bool:
        if self._has_active_processes is None:
            return False
        try:
            return bool(self._has_active_processes(key))
        except Exception as exc:  # noqa: BLE001 - fail closed: an unknown answer keeps it
            log.warning("has_active_processes_fn failed for %r (%s); keeping it", key, exc)
            return True

    def prune_stale_entries(self, max_age_days: float) -> int:
        """Drop routing entries idle for ``max_age_days`` (0 disables); transcripts stay.

        Kept: suspended entries, entries with a turn marker or a pending resume, and those
        ``has_active_processes_fn`` protects or cannot answer for (fail closed). The
        candidates are one indexed query, so a prune over 100,000 stored sessions parses
        only the old ones.
        """
        if not max_age_days or max_age_days <= 0:
            return 0
        core = self._core
        cutoff = core.ts() - float(max_age_days) * 86400.0
        rows = core.read(lambda backend: backend.routing_idle_before(cutoff))
        core.entries.fill(rows)  # one read: no row is fetched again key by key
        candidates = [e for e in (core.entries.get(row.session_key) for row in rows)
                      if e is not None and lifecycle.is_stale(e, cutoff)]
        # asked outside every lock: the callback may call back into the runtime
        doomed = [e for e in candidates if not self._protected(e.session_key)]
        if not doomed:
            return 0
        with core.all_keys():
            keys = [e.session_key for e in doomed if core.entries.get(e.session_key) is e]
            if keys:
                core.commit([], delete=keys)
        return len(keys)

    # -- deleting conversations (issue 39) ---------------------------------------------------

    def idle_keys(self, max_age_days: float, limit: int) -> list[str]:
        """At most ``limit`` keys idle for ``max_age_days`` (by their last activity, epoch
        seconds), oldest first, that retention may delete: nothing pending (a turn marker,
        a resume, a suspension), not protected by ``has_active_processes_fn``."""
        core = self._core
        cutoff = core.ts() - float(max_age_days) * 86400.0
        # the longest idle rows only, a few times the batch (some may be protected): a pass
        # over a large backlog reads a bounded number of rows, not every idle one
        bound = max(4 * limit, _IDLE_READ_FLOOR)
        rows = core.read(lambda backend: backend.routing_idle_before(cutoff, bound))
        core.entries.fill(rows)
        stale = [e for e in (core.entries.get(row.session_key) for row in rows)
                 if e is not None and lifecycle.is_stale(e, cutoff)]
        stale.sort(key=_last_activity)
        keys: list[str] = []
        for entry in stale:  # asked outside every lock: the callback may call back in
            if len(keys) >= limit:
                break
            if not self._protected(entry.session_key):
                keys.append(entry.session_key)
        return keys

    def still_idle(self, keys: Iterable[str], max_age_days: float) -> set[str]:
        """Those of ``keys`` still idle for ``max_age_days`` with nothing pending (their
        entries as of now: no database scan)."""
        core = self._core
        cutoff = core.ts() - float(max_age_days) * 86400.0
        return {key for key in keys
                if (entry := core.entries.get(key)) is not None
                and lifecycle.is_stale(entry, cutoff)}

    def delete_conversations(self, keys: Iterable[str], extra: Callable[[list[str]], list[Op]],
                             before_commit: Callable[[], None] | None = None
                             ) -> dict[str, dict[str, int]]:
        """Delete the conversations of ``keys`` whole, in one transaction (with ``extra(found
        keys)``'s ops): routing entry, every transcript of the key (search index rows
        with them), inbox, ledger and outbox rows. The removed rows by table, per key
        deleted (an unknown key is left out)."""
        core = self._core
        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}
        with core.key_lock(keys[0]) if len(keys) == 1 else core.all_keys():
            entries = [e for e in map(core.entries.get, keys) if e is not None]
            if not entries:
                return {}
            found = [e.session_key for e in entries]
            ops: list[Op] = [DeleteConversations((e.session_key,), _session_ids(e))
                             for e in entries]
            results = core.forget([*ops, *extra(found)], found, before_commit=before_commit)
        # an earlier degraded run's copies (best effort)
        core.transcripts.discard(sid for entry in entries for sid in _session_ids(entry))
        return dict(zip(found, results[:len(found)], strict=True))

    # -- transcripts and usage --------------------------------------------------------------

    def append_message(self, session_id: str, message: dict[str, Any], *,
                       turn_token: str | None = None, is_reply: bool = False
                       ) -> dict[str, Any]:
        """Append a transcript message (``ValueError`` when malformed); returns it as
        stored."""
        validate_session_id(session_id)
        msg = normalize_message(message, self._core.ts())
        self._core.apply([AppendMessage(session_id, msg, turn_token=turn_token,
                                        is_reply=is_reply)])
        return msg

    def update_session(self, key: str, last_prompt_tokens: int | None = None,
                       touch_activity: bool = True, *, input_tokens: int = 0,
                       output_tokens: int = 0) -> SessionEntry | None:
        """Record token usage and (unless ``touch_activity=False``) activity; ``None`` for
        an unknown key."""
        core = self._core
        with core.key_lock(key):
            entry = core.entries.get(key)
            if entry is None:
                return None
            new = entry
            if last_prompt_tokens is not None:
                new = replace(new, last_prompt_tokens=int(last_prompt_tokens))
            if touch_activity:
                new = new.evolve(updated_at=core.now())
            ops: list[Op] = []
            if input_tokens or output_tokens or last_prompt_tokens is not None:
                ops.append(AddTokens(entry.session_id, int(input_tokens), int(output_tokens),
                                     last_prompt_tokens))
            core.commit(ops, put=[new] if new != entry else [])
            return new


def _session_ids(entry: SessionEntry) -> tuple[str, ...]:
    """The sessions a delete names besides those its key finds: the current one and the
    one before it (a files backend has no ``sessions`` table to search by key)."""
    return tuple(dict.fromkeys(sid for sid in (entry.session_id, entry.prev_session_id)
                               if sid))


#: The fewest idle rows a retention pass reads (see :meth:`SessionLifecycle.idle_keys`).
_IDLE_READ_FLOOR = 400


def _last_activity(entry: SessionEntry) -> float:
    """Epoch seconds of the entry's last activity (0 when unknown)."""
    when = entry.updated_at or entry.created_at
    return epoch(when) if when is not None else 0.0
