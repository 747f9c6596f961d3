"""``TurnRecords``: a turn's durable steps, and the settlement of interrupted ones (§7, §8).

A turn starts in ONE transaction (marker, user message, inbox consumption, activity bump);
a session's first message also creates the session in it. After a crash the markers left
behind are judged by :func:`~hermes_actors.store.recovery.judge_marker` from the stored
facts (:meth:`TurnRecords.judge_interrupted_turns`) and settled in one transaction
(:meth:`TurnRecords.settle_markers`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, NamedTuple

from hermes_actors.errors import StoreError
from hermes_actors.model.entry import SessionEntry, validate_session_id, validate_session_key
from hermes_actors.model.ids import new_id
from hermes_actors.model.source import SessionSource
from hermes_actors.model.timeutil import epoch
from hermes_actors.store import ledger, lifecycle
from hermes_actors.store.core import StoreCore
from hermes_actors.store.deliveries import ledger_record_op
from hermes_actors.store.ops import AppendMessage, ConsumeEvents, Op
from hermes_actors.store.recovery import RESTART_INTERRUPTED, MarkerVerdict, judge_marker
from hermes_actors.store.transcript import normalize_message

__all__ = ["MarkerSettlement", "SessionExistsError", "SessionGoneError", "SessionRotatedError",
           "TurnRecords"]


class MarkerSettlement(NamedTuple):
    """How recovery settles one durable turn marker (see ``settle_markers``)."""

    session_key: str
    #: The marker's token: only a marker still holding it is settled.
    token: str
    #: Mark the session resume-pending with this reason (``None``: clear only).
    resume_reason: str | None = None
    #: ``(target SessionSource, content, kind)`` owed to the chat, or ``None``.
    owed: tuple[Any, str, str] | None = None


class SessionRotatedError(StoreError):
    """The session key routes to another session id than the one a turn started in."""


class SessionExistsError(StoreError):
    """A session's first turn found that its key has an entry after all."""


class SessionGoneError(StoreError):
    """A turn's key has no entry any more (the prune of stale entries dropped it)."""


class TurnRecords:
    """The turn methods of the store (its facade delegates here)."""

    def __init__(self, core: StoreCore) -> None:
        self._core = core

    def begin_turn(self, session_key: str, session_id: str, *,
                   user_message: dict[str, Any] | None = None, event_ids: Iterable[str] = (),
                   internal: bool = False, touch_activity: bool = False) -> str:
        """Start a turn in ONE transaction: set the durable turn marker (new token), append
        ``user_message`` tagged with the token, consume ``event_ids`` (reason ``turn``), and
        with ``touch_activity`` bump ``updated_at`` (a human turn is user activity).

        Returns the token. Raises :class:`SessionGoneError` (a :class:`StoreError`) for an
        unknown key,
        :class:`SessionRotatedError` when the key no longer routes to ``session_id``
        (compare-and-swap: a turn never marks a session it did not start in), and
        ``ValueError`` for a malformed message (nothing is written then).
        """
        core = self._core
        validate_session_id(session_id)
        ids = tuple(event_ids)
        msg = None if user_message is None else normalize_message(user_message, core.ts())
        with core.key_lock(session_key):
            entry = core.entries.get(session_key)
            if entry is None:
                raise SessionGoneError(f"no session with key {session_key!r}")
            if entry.session_id != session_id:
                raise SessionRotatedError(
                    f"session {session_key!r} moved to {entry.session_id} (a /new or /reset) "
                    f"before the turn on {session_id} began")
            token, ops, marked = self._turn_start(entry, msg, ids, internal, touch_activity)
            core.commit(ops, put=[marked])
        return token

    def begin_first_turn(self, session_key: str, source: SessionSource, *,
                         user_message: dict[str, Any] | None = None,
                         event_ids: Iterable[str] = (), internal: bool = False,
                         touch_activity: bool = False) -> tuple[str, SessionEntry]:
        """:meth:`begin_turn` for a key that has no entry yet (a session's first message):
        the session is created from ``source`` (§6 ``create``: a fresh entry and its
        ``sessions`` row) in the same transaction that starts its first turn.

        Returns the token and the created entry as it was before the turn's marker. Raises
        :class:`SessionExistsError` when the key has an entry by then (nothing is written:
        the caller starts over on that entry) and ``ValueError`` for a malformed message.
        """
        core = self._core
        validate_session_key(session_key)
        ids = tuple(event_ids)
        msg = None if user_message is None else normalize_message(user_message, core.ts())
        with core.key_lock(session_key):
            if core.entries.get(session_key) is not None:
                raise SessionExistsError(f"session {session_key!r} was created meanwhile")
            now = core.now()
            fresh = lifecycle.fresh_entry(session_key, source, now)
            token, ops, marked = self._turn_start(fresh, msg, ids, internal, touch_activity, now)
            core.commit([core.create_op(fresh), *ops], put=[marked])
        return token, fresh

    def _turn_start(self, entry: SessionEntry, msg: dict[str, Any] | None,
                    ids: tuple[str, ...], internal: bool, touch_activity: bool,
                    now: datetime | None = None) -> tuple[str, list[Op], SessionEntry]:
        """A new turn token, the ops that start the turn, and ``entry`` with the marker."""
        token = new_id()
        now = now or self._core.now()
        # The turn answers its own events and takes up those still owed (an interrupted
        # turn's, a crashed one's): its answer names them all.
        marked = entry.evolve(
            active_turn_token=token,
            active_turn_started_at=now,
            active_turn_internal=bool(internal),
            active_turn_events=lifecycle.merge_ids(entry.owed_events, ids)
            if entry.owed_events else ids,
            owed_events=(),
            updated_at=now if touch_activity else entry.updated_at,
        )
        ops: list[Op] = []
        if msg is not None:
            ops.append(AppendMessage(entry.session_id, msg, turn_token=token))
        if ids:
            ops.append(ConsumeEvents(ids, "turn", self._core.ts()))
        return token, ops, marked

    # -- replies ----------------------------------------------------------------------------

    def turn_replies(self, turns: Iterable[tuple[str, str] | tuple[str, str, float | None]]
                     ) -> dict[tuple[str, str], str]:
        """``(session_id, token) -> content`` of the persisted reply of each turn that has
        one, in one read (recovery judges 1,000 markers without 1,000 round trips).

        An item may carry a third element, the marker's start (epoch seconds): then a reply
        the transcript ends with that no turn of the gateway recorded (an agent writing its
        own rows, a migrated store) counts too when it is not older than that start.
        """
        triples = [(validate_session_id(t[0]), t[1], t[2] if len(t) > 2 else None)
                   for t in turns]
        if not triples:
            return {}
        return self._core.read(lambda backend: backend.turn_replies(triples))

    def turn_reply(self, session_id: str, token: str) -> dict[str, Any] | None:
        """The persisted final reply of turn ``token`` as a message (``role``,
        ``content``), or ``None``."""
        content = self.turn_replies([(session_id, token)]).get((session_id, token))
        return None if content is None else {"role": "assistant", "content": content}

    # -- recovery ---------------------------------------------------------------------------

    def judge_interrupted_turns(self, now: float, max_age: float,
                                belongs: Callable[[str], bool] | None = None
                                ) -> list[tuple[SessionEntry, MarkerVerdict]]:
        """Every durable turn marker (of the keys ``belongs`` picks) with its verdict
        (:func:`judge_marker`), judged from the markers and the persisted replies alone
        (one read for all of them)."""
        marked = [e for e in self._core.entries.flagged(belongs)
                  if e.active_turn_token is not None]
        replies = self.turn_replies([
            (e.session_id, e.active_turn_token,
             epoch(e.active_turn_started_at) if e.active_turn_started_at else None)
            for e in marked if e.active_turn_token is not None])
        return [(e, judge_marker(e, replies.get((e.session_id, e.active_turn_token or "")),
                                 now, max_age)) for e in marked]

    def settle_markers(self, settlements: Iterable[MarkerSettlement], *,
                       ledger_on: bool = True, also: Iterable[Op] = ()) -> int:
        """Settle recovered turn markers in ONE transaction: each marker still holding its
        token is cleared, marked ``resume_pending`` with the given reason (not on a
        suspended entry), and its owed answer recorded ``pending`` in the ledger (with
        ``ledger_on``); ``also`` are more ops of the same transaction. Returns how many
        markers were cleared."""
        core = self._core
        now = core.now()
        ops: list[Op] = list(also)
        put = []
        with core.all_keys():
            for item in settlements:
                entry = core.entries.get(item.session_key)
                marked = entry is not None and entry.active_turn_token == item.token
                if item.owed is not None and ledger_on:
                    target, content, kind = item.owed
                    oid = ledger.obligation_id(item.session_key, item.token, content)
                    ops.append(ledger_record_op(
                        oid, item.session_key, target.platform, target.chat_id,
                        target.thread_id, content, kind, core.ts(),
                        entry.active_turn_events if entry is not None and marked else ()))
                if entry is None or not marked:
                    continue
                # an answer recorded names the turn's events; without one they stay owed
                new = lifecycle.clear_turn_marker(entry) if item.owed is not None \
                    else lifecycle.carry_marker_events(entry)
                if item.resume_reason is not None and not entry.suspended:
                    new = new.evolve(resume_pending=True, resume_reason=item.resume_reason,
                                     last_resume_marked_at=now)
                put.append(new)
            if ops or put:
                core.commit(ops, put=put)
        return len(put)

    def recover_interrupted_turns(self, max_age_seconds: float) -> int:
        """After an unclean stop, settle every turn marker as the supervisor does: a reply
        already persisted is recorded as owed (``recovered``), a turn without one becomes
        ``resume_pending`` (``restart_interrupted`` unless a reason is pending), old or
        finalized markers are cleared. Returns the number marked for resume."""
        settlements = []
        resumed = 0
        for entry, verdict in self.judge_interrupted_turns(self._core.ts(), max_age_seconds):
            owed = reason = None
            if verdict.action == "deliver" and entry.origin is not None:
                assert verdict.content is not None and verdict.kind is not None
                owed = (entry.origin, verdict.content, verdict.kind)
            elif verdict.action == "resume":
                reason = (entry.resume_reason if entry.resume_pending else None) \
                    or RESTART_INTERRUPTED
                resumed += 1
            assert entry.active_turn_token is not None
            settlements.append(MarkerSettlement(entry.session_key, entry.active_turn_token,
                                                reason, owed))
        self.settle_markers(settlements)
        return resumed
