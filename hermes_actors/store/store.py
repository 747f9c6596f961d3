"""``SessionStore``: session routing and transcripts for one home (§5, §6, §17.15).

The public methods are the session lifecycle: §6's state machine in
:meth:`SessionStore.get_or_create_session`, explicit resets, suspension, resume flags,
durable turn markers (compare-and-swap), recovery and pruning passes, transcripts and usage.
Each decides with a pure function from :mod:`~hermes_actors.store.lifecycle` under the
key's lock and commits through :class:`~hermes_actors.store.core.StoreCore`. The methods the
runtime calls around a turn (inbox, turn start, ledger) come from
:class:`~hermes_actors.store.runtime_api.RuntimeStoreMethods`.
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
from hermes_actors.store.core import DEFAULT_MIRROR_INTERVAL, StoreCore, StoreStatistics
from hermes_actors.store.ops import AddTokens, AppendMessage, EndSession
from hermes_actors.store.runtime_api import RuntimeStoreMethods
from hermes_actors.store.transcript import normalize_message

__all__ = ["DEFAULT_MIRROR_INTERVAL", "SessionStore", "StoreStatistics"]

log = logging.getLogger("hermes_actors.store")


class SessionStore(RuntimeStoreMethods, StoreCore):
    """Session routing and transcripts for one home; thread-safe.

    ``SessionStore(sessions_dir, config=None, has_active_processes_fn=None, *, db=None,
    clock=None, mirror_interval=5.0)``: ``sessions_dir`` holds ``sessions.json`` (and JSONL
    transcripts in degraded mode); with ``db=None`` the store opens
    ``SessionDB(<sessions_dir>/../state.db)`` and closes it in :meth:`close`, a given ``db``
    is used but never closed. ``clock`` is any object with ``time()`` and ``monotonic()``.
    ``has_active_processes_fn(key)`` protects an entry from pruning.
    """

    # -- reading ----------------------------------------------------------------------------

    def session_key_for(self, source: SessionSource) -> str:
        """The session key of ``source`` under this store's configuration (§3)."""
        return build_session_key(
            source,
            group_sessions_per_user=self.config.group_sessions_per_user,
            thread_sessions_per_user=self.config.thread_sessions_per_user,
            whatsapp_aliases=self.config.whatsapp.lid_aliases or None,
        )

    def get(self, key: str) -> SessionEntry | None:
        """The entry of ``key``, or ``None``."""
        return self._entries.get(key)

    def current_session_id(self, key: str) -> str | None:
        """The ``session_id`` the key routes to now, or ``None`` for an unknown key."""
        entry = self._entries.get(key)
        return entry.session_id if entry is not None else None

    def list_sessions(self) -> list[SessionEntry]:
        """Every routing entry (a snapshot; parses every entry not parsed yet)."""
        return self._entries.values()

    def flagged_sessions(self) -> list[SessionEntry]:
        """The entries with a turn marker or a pending resume (recovery's work list); only
        these are parsed, so a start with 100,000 stored sessions does not parse them all."""
        return self._entries.flagged()

    def load_transcript(self, session_id: str, *,
                        before_turn: str | None = None) -> list[dict[str, Any]]:
        """The transcript of ``session_id`` in order (§17.13 message dicts); with
        ``before_turn`` (a turn token) only what was written before that turn began."""
        sid = validate_session_id(session_id)
        if before_turn is None:
            return self._backend.load_messages(sid)
        return self._backend.load_messages(sid, before_turn=before_turn)

    def message_count(self, session_id: str) -> int:
        """How many transcript messages ``session_id`` has (``/status``)."""
        return self._backend.message_count(validate_session_id(session_id))

    # -- the state machine (§6) -------------------------------------------------------------

    def get_or_create_session(
        self, source: SessionSource, force_new: bool = False, touch_activity: bool = True
    ) -> SessionEntry:
        """The entry for ``source``'s key after §6: create, force a new session, rotate a
        suspended one, keep a resume-pending one unchanged, or touch ``updated_at``."""
        key = self.session_key_for(source)
        entry = self._entries.get(key)
        if entry is not None and lifecycle.access_action(
                entry, force_new=force_new, touch_activity=touch_activity) in ("keep", "resume"):
            return entry  # nothing to write: an immutable snapshot needs no lock
        with self._key_lock(key):
            entry = self._entries.get(key)
            action = lifecycle.access_action(
                entry, force_new=force_new, touch_activity=touch_activity
            )
            now = self._now()
            if action == "create":
                new = lifecycle.fresh_entry(key, source, now)
                self._commit([self._create_op(new)], put=[new])
            elif action == "force_new":
                new = lifecycle.successor(entry, now, source)
                self._commit(self._cut(entry, new, "force_new"), put=[new])
            elif action == "rotate":
                new = lifecycle.successor(
                    entry, now, source, was_auto_reset=True, auto_reset_reason="suspended"
                )
                self._commit(self._cut(entry, new, "suspended"), put=[new])
            elif action == "touch":
                new = lifecycle.touched(entry, source, now)
                self._commit([], put=[new])
            else:
                new = entry
            return new

    def reset_session(self, key: str) -> SessionEntry | None:
        """``/new``/``/reset``: end the old session (``session_reset``), start a new one with
        ``is_fresh_reset`` and ``prev_session_id``. ``None`` for an unknown key."""
        with self._key_lock(key):
            entry = self._entries.get(key)
            if entry is None:
                return None
            now = self._now()
            new = lifecycle.successor(entry, now, None, is_fresh_reset=True)
            self._commit(self._cut(entry, new, "session_reset"), put=[new])
            return new

    def _cut(self, old: SessionEntry, new: SessionEntry, reason: str) -> list[Any]:
        """Operations of a session boundary: end ``old``'s row with ``reason``, start ``new``'s."""
        ended_at = epoch(new.created_at) if new.created_at else self._ts()
        return [EndSession(old.session_id, reason, ended_at), self._create_op(new)]

    def _change(self, key: str, decide: Callable[[SessionEntry], SessionEntry | None]) -> bool:
        """Apply ``decide(entry)`` under the key lock: ``None`` refuses, the same entry is a
        no-op, anything else is committed. ``False`` for unknown keys and refusals."""
        with self._key_lock(key):
            entry = self._entries.get(key)
            if entry is None:
                return False
            new = decide(entry)
            if new is None:
                return False
            if new != entry:
                self._commit([], put=[new])
            return True

    def suspend_session(self, key: str) -> bool:
        """Mark ``key`` suspended: its next access rotates to a new session id."""
        return self._change(key, lambda e: replace(e, suspended=True))

    def mark_resume_pending(self, key: str, reason: str) -> bool:
        """Set ``resume_pending`` with ``reason`` (replacing an older one: the caller states
        the newer cause) and ``last_resume_marked_at``; refused on a suspended entry."""
        if not isinstance(reason, str) or not reason:
            raise ValueError("a resume reason must be a non-empty string")
        now = self._now()

        def mark(entry: SessionEntry) -> SessionEntry | None:
            if entry.suspended:
                return None
            return replace(
                entry, resume_pending=True, resume_reason=reason, last_resume_marked_at=now
            )

        return self._change(key, mark)

    def clear_resume_pending(self, key: str) -> bool:
        """Clear ``resume_pending`` and its reason (after a successful turn)."""
        entry = self._entries.get(key)
        if entry is not None and not entry.resume_pending and entry.resume_reason is None:
            return True  # the common case after every turn: nothing to change, no lock
        return self._change(key, lambda e: replace(e, resume_pending=False, resume_reason=None))

    def _resume_flagged(self, key: str) -> bool:
        entry = self._entries.get(key)
        return entry is not None and (entry.resume_pending or entry.resume_reason is not None)

    def clear_resume_pending_many(self, keys: Iterable[str]) -> int:
        """:meth:`clear_resume_pending` for several keys in one commit; how many changed."""
        flagged = [key for key in dict.fromkeys(keys) if self._resume_flagged(key)]
        if not flagged:
            return 0  # the common sweep: nothing to change, no pass over every lock
        with self._all_keys():
            changed = []
            for key in flagged:
                entry = self._entries.get(key)
                if entry is not None and (entry.resume_pending or entry.resume_reason):
                    changed.append(replace(entry, resume_pending=False, resume_reason=None))
            if changed:
                self._commit([], put=changed)
        return len(changed)

    def mark_turn_active(self, key: str, *, internal: bool = False) -> str:
        """Durably mark a turn as running; returns its token (32 hex digits)."""
        token = new_id()
        now = self._now()

        def mark(entry: SessionEntry) -> SessionEntry:
            return replace(
                entry,
                active_turn_token=token,
                active_turn_started_at=now,
                active_turn_internal=bool(internal),
            )

        if not self._change(key, mark):
            raise StoreError(f"no session with key {key!r}")
        return token

    def clear_turn_active(self, key: str, token: str) -> bool:
        """Clear the turn marker only if it still holds ``token`` (compare-and-swap)."""

        def clear(entry: SessionEntry) -> SessionEntry | None:
            if token is None or entry.active_turn_token != token:
                return None
            return lifecycle.clear_turn_marker(entry)

        return self._change(key, clear)

    # -- bulk passes ------------------------------------------------------------------------

    def _bulk(self, decide: Callable[[SessionEntry], SessionEntry | None]) -> list[SessionEntry]:
        """Apply ``decide`` to every flagged entry (marker or resume flag) in one commit."""
        with self._all_keys():
            changed = []
            for entry in self._entries.flagged():
                new = decide(entry)
                if new is not None and new != entry:
                    changed.append(new)
            if changed:
                self._commit([], put=changed)
            return changed

    def recover_interrupted_turns(self, max_age_seconds: float) -> int:
        """After an unclean stop: markers younger than ``max_age_seconds`` become
        ``resume_pending`` (reason ``restart_interrupted`` unless one is already pending),
        older ones are cleared; suspended/finalized entries only lose the marker. Returns
        the number marked for resume."""
        now, ts = self._now(), self._ts()
        resumed = 0

        def decide(entry: SessionEntry) -> SessionEntry | None:
            nonlocal resumed
            action = lifecycle.recovery_action(entry, ts, max_age_seconds)
            if action == "resume":
                resumed += 1
                return lifecycle.resumed(entry, now)
            if action == "clear":
                return lifecycle.clear_turn_marker(entry)
            return None

        self._bulk(decide)
        return resumed

    def discard_active_turn_markers(self) -> int:
        """Clear every turn marker (after a clean shutdown); returns how many were set."""
        return len(
            self._bulk(lambda e: lifecycle.clear_turn_marker(e) if e.has_active_turn else None)
        )

    def _protected(self, key: str) -> bool:
        if self._has_active_processes is None:
            return False
        try:
            return bool(self._has_active_processes(key))
        except Exception as exc:  # fail closed: an unknown answer keeps the entry
            log.warning("has_active_processes_fn failed for %r (%s); keeping it", key, exc)
            return True

    def _idle_entries(self, cutoff: float) -> list[SessionEntry]:
        """Entries that may be idle since ``cutoff``: asked of the database, so a prune over
        100,000 stored sessions parses only the old ones (else every entry)."""
        db = self.db
        if db is None:
            return self.list_sessions()
        try:
            rows = db.routing_idle_before(cutoff)
        except StoreError:
            return self.list_sessions()
        self._entries.fill(dict(rows))  # one read: no row is fetched again key by key
        return [e for e in (self._entries.get(key) for key, _ in rows) if e is not None]

    def prune_stale_entries(self, max_age_days: float) -> int:
        """Drop routing entries idle for ``max_age_days`` (0 disables); transcripts stay.

        Kept: suspended entries, entries with a turn marker or a pending resume, and those
        ``has_active_processes_fn`` protects or cannot answer for (fail closed).
        """
        if not max_age_days or max_age_days <= 0:
            return 0
        cutoff = self._ts() - float(max_age_days) * 86400.0
        candidates = [e for e in self._idle_entries(cutoff) if lifecycle.is_stale(e, cutoff)]
        # asked outside every lock: the callback may call back into the runtime
        doomed = [e for e in candidates if not self._protected(e.session_key)]
        if not doomed:
            return 0
        with self._all_keys():
            keys = [e.session_key for e in doomed if self._entries.get(e.session_key) is e]
            if keys:
                self._commit([], delete=keys)
        return len(keys)

    # -- transcripts and usage --------------------------------------------------------------

    def append_message(
        self,
        session_id: str,
        message: dict[str, Any],
        *,
        turn_token: str | None = None,
        is_reply: bool = False,
    ) -> dict[str, Any]:
        """Append a transcript message (``ValueError`` when malformed); returns it as stored."""
        validate_session_id(session_id)
        msg = normalize_message(message, self._ts())
        self._apply([AppendMessage(session_id, msg, turn_token=turn_token, is_reply=is_reply)])
        return msg

    def update_session(
        self,
        key: str,
        last_prompt_tokens: int | None = None,
        touch_activity: bool = True,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
    ) -> SessionEntry | None:
        """Record token usage and (unless ``touch_activity=False``) activity; ``None`` for an
        unknown key."""
        with self._key_lock(key):
            entry = self._entries.get(key)
            if entry is None:
                return None
            new = entry
            if last_prompt_tokens is not None:
                new = replace(new, last_prompt_tokens=int(last_prompt_tokens))
            if touch_activity:
                new = replace(new, updated_at=self._now())
            ops = []
            if input_tokens or output_tokens or last_prompt_tokens is not None:
                ops.append(
                    AddTokens(
                        entry.session_id, int(input_tokens), int(output_tokens), last_prompt_tokens
                    )
                )
            self._commit(ops, put=[new] if new != entry else [])
            return new
