"""``SessionStore``: session routing, transcripts, inbox, ledger, outbox and node state for
one home (§5, §6, §7, §8, §17.15): the facade the runtime uses.

It is built by composition: the plumbing (:class:`~hermes_actors.store.core.StoreCore`:
backend, entries in memory, key locks, commits, fail-over, the mirror) and one part per
concern, each a small class over the core: :class:`~hermes_actors.store.sessions.
SessionLifecycle` (§6's state machine, resume flags, markers, pruning),
:class:`~hermes_actors.store.turns.TurnRecords` (a turn's start, its reply, recovery's
settlement), :class:`~hermes_actors.store.inbox.Inbox`,
:class:`~hermes_actors.store.deliveries.DeliveryLedger`,
:class:`~hermes_actors.store.outbox.OutboxRecords` and
:class:`~hermes_actors.store.node.NodeRecords`. The methods below delegate to them and
keep the flat API §17.15 pins.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Container, Iterable
from typing import Any

from hermes_actors.cluster.shards import ShardSet
from hermes_actors.model.entry import SessionEntry
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.source import SessionSource
from hermes_actors.store.core import DEFAULT_MIRROR_INTERVAL, StoreCore, StoreStatistics
from hermes_actors.store.deliveries import DeliveryLedger, Owner
from hermes_actors.store.fencing import ShardFence
from hermes_actors.store.inbox import Inbox
from hermes_actors.store.node import NodeRecords
from hermes_actors.store.ops import Op, OutboxAppend
from hermes_actors.store.outbox import OutboxRecords
from hermes_actors.store.protocol import Backend
from hermes_actors.store.recovery import MarkerVerdict
from hermes_actors.store.sessions import SessionLifecycle
from hermes_actors.store.turns import MarkerSettlement, TurnRecords

__all__ = ["DEFAULT_MIRROR_INTERVAL", "SessionStore", "StoreStatistics"]


class SessionStore:
    """Session routing and transcripts for one home; thread-safe.

    ``SessionStore(sessions_dir, config=None, has_active_processes_fn=None, *, db=None,
    clock=None, mirror_interval=5.0)``: ``sessions_dir`` holds ``sessions.json`` (and JSONL
    transcripts in degraded mode), its parent is the home; with ``db=None`` the store opens
    the backend ``config.store`` names (SQLite: ``<home>/state.db``) and closes it in
    :meth:`close`, a given backend is used but never closed. ``clock`` is any object with
    ``time()`` and ``monotonic()``. ``has_active_processes_fn(key)`` protects an entry from
    pruning. ``on_outage(exc)`` hears, once, that a database server failed while running
    (:attr:`outage`).
    """

    def __init__(self, sessions_dir: str | os.PathLike[str], config: Any = None,
                 has_active_processes_fn: Callable[[str], bool] | None = None, *,
                 db: Backend | None = None, clock: Any = None,
                 mirror_interval: float | None = DEFAULT_MIRROR_INTERVAL,
                 on_outage: Callable[[BaseException], None] | None = None) -> None:
        from hermes_actors.config import GatewayConfig, require_config

        if require_config(config, "SessionStore") is None:
            config = GatewayConfig()
        self._core = StoreCore(sessions_dir, config, backend=db, clock=clock,
                               mirror_interval=mirror_interval, on_outage=on_outage)
        self._sessions = SessionLifecycle(self._core, has_active_processes_fn)
        self._turns = TurnRecords(self._core)
        self._inbox = Inbox(self._core)
        self._node = NodeRecords(self._core)
        self._ledger = DeliveryLedger(self._core, (self._node.node_id, self._node.boot_id))
        self._outbox = OutboxRecords(self._core, self._ledger.owner)
        # The turn path's delegations, bound to the parts that do the work (the methods of
        # the same names below document them; these instance attributes shadow them): each
        # was one Python frame more at every turn, ``ledger_record``'s passing a dozen
        # keywords on. The signatures are the parts' own, the same as the methods'.
        self.get = self._core.entries.get  # type: ignore[method-assign]
        self.session_key_for = self._sessions.session_key_for  # type: ignore[method-assign]
        self.clear_resume_pending = (  # type: ignore[method-assign]
            self._sessions.clear_resume_pending)
        self.begin_turn = self._turns.begin_turn  # type: ignore[method-assign]
        self.begin_first_turn = self._turns.begin_first_turn  # type: ignore[method-assign]
        self.accept_event = self._inbox.accept_event  # type: ignore[method-assign]
        self.ledger_record = self._ledger.ledger_record  # type: ignore[method-assign]
        self.ledger_finish_later = (  # type: ignore[method-assign]
            self._ledger.ledger_finish_later)

    # -- the store as a whole ---------------------------------------------------------------

    @property
    def config(self) -> Any:
        """The gateway configuration (key switches, WhatsApp aliases, mirror switch)."""
        return self._core.config

    @property
    def sessions_dir(self) -> Any:
        """The sessions directory (``sessions.json``, degraded-mode transcripts)."""
        return self._core.sessions_dir

    @property
    def backend(self) -> Backend:
        """The backend in use now (the files backend in degraded mode)."""
        return self._core.backend

    @property
    def db(self) -> Backend | None:
        """The canonical database (a ``SessionDB`` by default), or ``None`` in degraded
        mode (§17.12)."""
        return None if self._core.degraded else self._core.backend

    @property
    def degraded(self) -> bool:
        """Whether the store runs without its database (routing from ``sessions.json``)."""
        return self._core.degraded

    @property
    def outage(self) -> BaseException | None:
        """The failure that began an outage of the database server, or ``None`` (a store
        in an outage stays in it: its host replaces it once the server is back)."""
        return self._core.outage

    @property
    def node_id(self) -> str:
        """The id of the gateway node this store belongs to (stable per home)."""
        return self._node.node_id

    @property
    def boot_id(self) -> str:
        """This start's id: with ``node_id``, the sender identity of delivery claims."""
        return self._node.boot_id

    @property
    def ledger_owner(self) -> Owner:
        """``(node_id, boot_id)``: who this store claims ledger rows as."""
        return self._ledger.owner

    def get(self, key: str) -> SessionEntry | None:
        """The entry of ``key``, or ``None``."""
        return self._core.entries.get(key)

    def current_session_id(self, key: str) -> str | None:
        """The ``session_id`` the key routes to now, or ``None`` for an unknown key."""
        entry = self._core.entries.get(key)
        return entry.session_id if entry is not None else None

    def list_sessions(self) -> list[SessionEntry]:
        """Every routing entry (a snapshot; parses every entry not parsed yet)."""
        return self._core.entries.values()

    def flagged_sessions(self, belongs: Callable[[str], bool] | None = None
                         ) -> list[SessionEntry]:
        """The entries with a turn marker or a pending resume (recovery's work list); only
        these are parsed, so a start with 100,000 stored sessions does not parse them all.
        ``belongs(key)`` keeps only some keys (a cluster node's shard)."""
        return self._core.entries.flagged(belongs)

    @property
    def fence(self) -> ShardFence | None:
        """A cluster node's fence on its writes (:mod:`~hermes_actors.store.fencing`), or
        ``None`` (the default: nothing is fenced)."""
        return self._core.fence

    @fence.setter
    def fence(self, fence: ShardFence | None) -> None:
        self._core.fence = fence

    @property
    def announce(self) -> Callable[[str], Op] | None:
        """A cluster node's notice of a new inbox row: ``announce(session_key)`` gives the
        op (``NotifyShard``) that every accept carries in its transaction; ``None`` (the
        default): accepts carry nothing more."""
        return self._core.announce

    @announce.setter
    def announce(self, announce: Callable[[str], Op] | None) -> None:
        self._core.announce = announce

    @property
    def outbox_notice(self) -> Callable[[OutboxAppend], Op] | None:
        """A cluster node's notice of an outbox append: ``outbox_notice(append)`` gives the
        op (``NotifyOutbox``) that every append carries in its transaction, so that long
        polls of the chat on other nodes wake; ``None`` (the default): nothing more."""
        return self._core.outbox_notice

    @outbox_notice.setter
    def outbox_notice(self, notice: Callable[[OutboxAppend], Op] | None) -> None:
        self._core.outbox_notice = notice

    def stored_entries(self, key: str | None = None) -> list[SessionEntry]:
        """The routing entries (every one, or ``key``'s) as the database holds them now,
        read past memory (a cluster node serving another node's sessions' views)."""
        return self._core.stored_entries(key)

    def refresh_entries(self, belongs: Callable[[str], bool]) -> int:
        """Forget what memory holds of the keys ``belongs`` picks and take their routing
        rows from the database again (a cluster node gaining a shard: other nodes changed
        its sessions meanwhile). Returns how many rows were read."""
        return self._core.refresh_entries(belongs)

    def rows(self, table: str) -> list[dict[str, Any]]:
        """Every row of a table as the backend stores it (``protocol.DIAGNOSTIC_TABLES``):
        a diagnostic for tests and tools."""
        return self._core.read(lambda backend: backend.rows(table))

    def statistics(self) -> StoreStatistics:
        """Counts and flags describing the store now."""
        return self._core.statistics()

    def flush(self) -> bool:
        """Write ``sessions.json`` now if it has pending changes; ``True`` when up to date."""
        return self._core.flush()

    def close(self) -> None:
        """Flush the mirror and close the backends this store opened (idempotent)."""
        self._core.close()

    # -- SessionLifecycle --------------------------------------------------------
    def session_key_for(self, source: SessionSource) -> str:
        """The session key of ``source`` under this store's configuration (§3)."""
        return self._sessions.session_key_for(source)

    def load_transcript(self, session_id: str, *,
                        before_turn: str | None = None) -> list[dict[str, Any]]:
        """The transcript of ``session_id`` in order (§17.13 message dicts)."""
        return self._sessions.load_transcript(session_id, before_turn=before_turn)

    def load_transcript_tail(self, session_id: str, limit: int) -> list[dict[str, Any]]:
        """The last ``limit`` messages of ``session_id``'s transcript, in order, without
        reading the rest."""
        return self._sessions.load_transcript_tail(session_id, limit)

    def message_count(self, session_id: str) -> int:
        """How many transcript messages ``session_id`` has."""
        return self._sessions.message_count(session_id)

    def get_or_create_session(self, source: SessionSource, force_new: bool = False,
                              touch_activity: bool = True) -> SessionEntry:
        """The entry for ``source``'s key after §6: create, force a new session, rotate
        a suspended one, keep a resume-pending one unchanged, or touch ``updated_at``."""
        return self._sessions.get_or_create_session(source, force_new, touch_activity)

    def reset_session(self, key: str) -> SessionEntry | None:
        """``/new``/``/reset``: end the old session (``session_reset``), start a new one
        with ``is_fresh_reset`` and ``prev_session_id``. ``None`` for an unknown key."""
        return self._sessions.reset_session(key)

    def suspend_session(self, key: str) -> bool:
        """Mark ``key`` suspended: its next access rotates to a new session id."""
        return self._sessions.suspend_session(key)

    def unsuspend_session(self, key: str) -> bool:
        """Clear ``suspended``: the next access keeps the session id; ``False`` for an
        unknown key."""
        return self._sessions.unsuspend_session(key)

    def delete_session(self, key: str, *, before_commit: Callable[[], None] | None = None
                       ) -> dict[str, int] | None:
        """Delete ``key``'s conversation whole (issue 39): its routing entry, every transcript
        of the key with its search index rows, its inbox, ledger and outbox rows and its
        restart count, in one transaction that a crash leaves whole or undone; the next
        message starts a new session. The rows removed by table, ``None`` for an unknown
        key. The caller stops the session's actor first (``Gateway.delete_session``)."""
        return self.delete_sessions([key], before_commit=before_commit).get(key)

    def delete_sessions(self, keys: Iterable[str], *,
                        before_commit: Callable[[], None] | None = None
                        ) -> dict[str, dict[str, int]]:
        """:meth:`delete_session` of several keys in one transaction (retention's batch):
        the rows removed per key deleted (unknown keys are left out)."""
        def restart_counts(found: list[str]) -> list[Op]:
            return [self._node.session_restarts_op((key, 0) for key in found)]

        return self._sessions.delete_conversations(keys, restart_counts, before_commit)

    def idle_session_keys(self, max_age_days: float, limit: int) -> list[str]:
        """At most ``limit`` keys idle for ``max_age_days`` (last activity, by the store's
        clock), oldest first, with nothing pending (no turn marker, resume or suspension)
        and not protected by ``has_active_processes_fn``: retention's candidates."""
        return self._sessions.idle_keys(max_age_days, limit)

    def still_idle_keys(self, keys: Iterable[str], max_age_days: float) -> set[str]:
        """Those of ``keys`` (retention's candidates) still idle for ``max_age_days`` with
        nothing pending, as of now (a turn may have run since they were picked)."""
        return self._sessions.still_idle(keys, max_age_days)

    def mark_resume_pending(self, key: str, reason: str) -> bool:
        """Set ``resume_pending`` with ``reason`` (replacing an older one: the caller
        states the newer cause) and ``last_resume_marked_at``; refused on a suspended
        entry."""
        return self._sessions.mark_resume_pending(key, reason)

    def clear_resume_pending(self, key: str) -> bool:
        """Clear ``resume_pending`` and its reason (after a successful turn)."""
        return self._sessions.clear_resume_pending(key)

    def clear_resume_pending_many(self, keys: Iterable[str]) -> int:
        """:meth:`clear_resume_pending` for several keys in one commit; how many
        changed."""
        return self._sessions.clear_resume_pending_many(keys)

    def mark_turn_active(self, key: str, *, internal: bool = False) -> str:
        """Durably mark a turn as running; returns its token (32 hex digits)."""
        return self._sessions.mark_turn_active(key, internal=internal)

    def clear_turn_active(self, key: str, token: str, *, carry: bool = False) -> bool:
        """Clear the turn marker only if it still holds ``token`` (compare-and-swap); with
        ``carry``, the turn's events stay owed to the session's next answer."""
        return self._sessions.clear_turn_active(key, token, carry=carry)

    def discard_active_turn_markers(self) -> int:
        """Clear every turn marker (after a clean shutdown); returns how many were set."""
        return self._sessions.discard_active_turn_markers()

    def prune_stale_entries(self, max_age_days: float) -> int:
        """Drop routing entries idle for ``max_age_days`` (0 disables); transcripts
        stay."""
        return self._sessions.prune_stale_entries(max_age_days)

    def append_message(self, session_id: str, message: dict[str, Any], *,
                       turn_token: str | None = None, is_reply: bool = False
                       ) -> dict[str, Any]:
        """Append a transcript message (``ValueError`` when malformed); returns it as
        stored."""
        return self._sessions.append_message(
            session_id, message, turn_token=turn_token, is_reply=is_reply
        )

    def update_session(self, key: str, last_prompt_tokens: int | None = None,
                       touch_activity: bool = True, *, input_tokens: int = 0,
                       output_tokens: int = 0) -> SessionEntry | None:
        """Record token usage and (unless ``touch_activity=False``) activity; ``None``
        for an unknown key."""
        return self._sessions.update_session(
            key, last_prompt_tokens, touch_activity, input_tokens=input_tokens,
            output_tokens=output_tokens
        )

    # -- TurnRecords -------------------------------------------------------------
    def begin_turn(self, session_key: str, session_id: str, *,
                   user_message: dict[str, Any] | None = None, event_ids: Iterable[str] = (),
                   internal: bool = False, touch_activity: bool = False) -> str:
        """Start a turn in ONE transaction: set the durable turn marker (new token),
        append ``user_message`` tagged with the token, consume ``event_ids`` (reason
        ``turn``), and with ``touch_activity`` bump ``updated_at`` (a human turn is user
        activity)."""
        return self._turns.begin_turn(
            session_key, session_id, user_message=user_message, event_ids=event_ids,
            internal=internal, touch_activity=touch_activity
        )

    def begin_first_turn(self, session_key: str, source: SessionSource, *,
                         user_message: dict[str, Any] | None = None,
                         event_ids: Iterable[str] = (), internal: bool = False,
                         touch_activity: bool = False) -> tuple[str, SessionEntry]:
        """:meth:`begin_turn` for a key that has no entry yet (a session's first
        message): the session is created from ``source`` (§6 ``create``: a fresh entry
        and its ``sessions`` row) in the same transaction that starts its first turn."""
        return self._turns.begin_first_turn(
            session_key, source, user_message=user_message, event_ids=event_ids,
            internal=internal, touch_activity=touch_activity
        )

    def turn_replies(self, turns: Iterable[tuple[str, str] | tuple[str, str, float | None]]
                     ) -> dict[tuple[str, str], str]:
        """``(session_id, token) -> content`` of the persisted reply of each turn that
        has one, in one read (recovery judges 1,000 markers without 1,000 round trips)."""
        return self._turns.turn_replies(turns)

    def turn_reply(self, session_id: str, token: str) -> dict[str, Any] | None:
        """The persisted final reply of turn ``token`` as a message (``role``,
        ``content``), or ``None``."""
        return self._turns.turn_reply(session_id, token)

    def judge_interrupted_turns(self, now: float, max_age: float,
                                belongs: Callable[[str], bool] | None = None
                                ) -> list[tuple[SessionEntry, MarkerVerdict]]:
        """Every durable turn marker (of the keys ``belongs`` picks) with its verdict
        (:func:`judge_marker`), judged from the markers and the persisted replies alone
        (one read for all of them)."""
        return self._turns.judge_interrupted_turns(now, max_age, belongs)

    def settle_markers(self, settlements: Iterable[MarkerSettlement], *,
                       ledger_on: bool = True, also: Iterable[Op] = ()) -> int:
        """Settle recovered turn markers in ONE transaction: each marker still holding
        its token is cleared, marked ``resume_pending`` with the given reason (not on a
        suspended entry), and its owed answer recorded ``pending`` in the ledger (with
        ``ledger_on``); the ops ``also`` (a cluster node's restart counts) are part of it.
        Returns how many markers were cleared."""
        return self._turns.settle_markers(settlements, ledger_on=ledger_on, also=also)

    def recover_interrupted_turns(self, max_age_seconds: float) -> int:
        """After an unclean stop, settle every turn marker as the supervisor does: a
        reply already persisted is recorded as owed (``recovered``), a turn without one
        becomes ``resume_pending`` (``restart_interrupted`` unless a reason is pending),
        old or finalized markers are cleared. Returns the number marked for resume."""
        return self._turns.recover_interrupted_turns(max_age_seconds)

    # -- Inbox -------------------------------------------------------------------
    def accept_event(self, session_key: str, event: MessageEvent) -> str:
        """Persist an accepted inbound event before it is acknowledged (idempotent by
        id)."""
        return self._inbox.accept_event(session_key, event)

    def withdraw_event(self, event_id: str) -> bool:
        """Delete an unconsumed inbox event, leaving nothing of it (a message refused
        after it was made durable); False when it is unknown or already consumed."""
        return self._inbox.withdraw_event(event_id)

    def consume_events(self, event_ids: Iterable[str], reason: str) -> None:
        """Mark inbox events consumed (``turn``, ``command``, ``dropped``...); the first
        reason sticks."""
        return self._inbox.consume_events(event_ids, reason)

    def pending_inbox(self, shards: ShardSet | None = None) -> list[tuple[str, MessageEvent]]:
        """Unconsumed events as ``(session_key, event)`` in their original arrival
        order (of the sessions of ``shards`` only, when given: a cluster node)."""
        return self._inbox.pending_inbox(shards)

    def pending_events(self, shards: ShardSet, known: Container[str]
                       ) -> list[tuple[str, str, MessageEvent | None]]:
        """The unconsumed events of ``shards``' sessions in arrival order as
        ``(session_key, event_id, event)``; ``event`` is ``None`` (not parsed) for the ids
        in ``known``."""
        return self._inbox.pending_events(shards, known)

    def inbox_prune(self, max_age_days: float = 7) -> int:
        """Delete inbox rows consumed more than ``max_age_days`` ago; returns the count."""
        return self._inbox.inbox_prune(max_age_days)

    # -- DeliveryLedger ----------------------------------------------------------
    def ledger_record(
        self, *, session_key: str, platform: str, chat_id: str | None,
        thread_id: str | None, content: str, kind: str, token: str | None,
        clear_turn: bool = False, claim: bool = False, consume: tuple[str, ...] = (),
        consume_reason: str = "command", reply: tuple[str, dict[str, Any]] | None = None,
        in_reply_to: tuple[str, ...] = (),
    ) -> str | None:
        """Record an obligation as ``pending``; returns its id (same inputs → same id,
        one row)."""
        return self._ledger.ledger_record(
            session_key=session_key, platform=platform, chat_id=chat_id, thread_id=thread_id,
            content=content, kind=kind, token=token, clear_turn=clear_turn, claim=claim,
            consume=consume, consume_reason=consume_reason, reply=reply,
            in_reply_to=in_reply_to
        )

    def ledger_claim(self, obligation_id: str, *, owner: Owner | None = None) -> bool:
        """Move a ``pending``/``failed`` row (or one another boot was attempting) to
        ``attempting`` for ``owner`` (default: this store's sender); ``False`` for final
        rows, unknown ids and rows this owner is attempting already."""
        return self._ledger.ledger_claim(obligation_id, owner=owner)

    def ledger_claim_many(self, obligation_ids: Iterable[str], *,
                          owner: Owner | None = None) -> set[str]:
        """:meth:`ledger_claim` for several rows in one transaction; the ids granted."""
        return self._ledger.ledger_claim_many(obligation_ids, owner=owner)

    def ledger_release(self, obligation_id: str) -> bool:
        """Hand back this store's claim of a row nothing was sent under: ``pending`` again,
        the attempt not spent; ``False`` when this sender does not hold it."""
        return self._ledger.ledger_release(obligation_id)

    def ledger_reopen(self, obligation_id: str) -> str | None:
        """An operator's retry: a ``failed``/``abandoned`` row is ``pending`` again with its
        attempts reset, for the next ledger sweep; returns the state the row had (changed
        only from ``failed``/``abandoned``), ``None`` for an unknown id."""
        return self._ledger.ledger_reopen(obligation_id)

    def ledger_finish(self, obligation_id: str, state: str, *, error: str | None = None,
                      content: str | None = None) -> str | None:
        """End an attempt as ``delivered`` or ``failed`` (``abandoned`` after 3 attempts
        or 24 h); returns the stored state, or ``None`` for an unknown id. ``content``:
        what is still owed when only the first parts were sent."""
        return self._ledger.ledger_finish(obligation_id, state, error=error, content=content)

    def ledger_finish_later(self, obligation_id: str, state: str, *, error: str | None = None,
                            content: str | None = None, on_done: Callable[[], None]) -> None:
        """:meth:`ledger_finish` without waiting for the commit; ``on_done()`` once
        durable (or failed, logged). A crash before that commit leaves the row
        ``attempting``: redelivered once with the recovered prefix, as for a crash right
        after the send."""
        return self._ledger.ledger_finish_later(
            obligation_id, state, error=error, content=content, on_done=on_done
        )

    def ledger_retry(self, obligation_id: str, *, error: str | None,
                     content: str | None = None) -> bool:
        """Count a rate-limited try as a failed attempt and claim the row again, in one
        transaction (the row is never ``failed`` for a sweep meanwhile); ``False`` when
        the claim is refused."""
        return self._ledger.ledger_retry(obligation_id, error=error, content=content)

    def ledger_finish_many(self, outcomes: Iterable[tuple[str, bool, str | None]]) -> None:
        """End several attempts in one transaction: ``(obligation_id, delivered,
        error)``."""
        return self._ledger.ledger_finish_many(outcomes)

    def ledger_rows(self, states: Iterable[str] | str | None = None, *,
                    session_key: str | None = None) -> list[dict[str, Any]]:
        """Ledger rows (every column) oldest first, filtered by state(s) and key."""
        return self._ledger.ledger_rows(states, session_key=session_key)

    def ledger_counts(self) -> dict[str, int]:
        """Ledger rows per state (one grouped read: ``/metrics`` asks at every scrape)."""
        return self._ledger.ledger_counts()

    def ledger_prune(self, max_age_days: float = 7) -> int:
        """Delete ``delivered``/``abandoned`` rows untouched for ``max_age_days``; the
        count."""
        return self._ledger.ledger_prune(max_age_days)

    # -- OutboxRecords -----------------------------------------------------------
    def outbox_append(self, *, session_key: str, platform: str, chat_id: str | None,
                      thread_id: str | None, text: str, kind: str, floor: int = 0,
                      in_reply_to: tuple[str, ...] = (),
                      obligation_id: str | None = None) -> int | None:
        """Append a reply for a chat; returns its cursor (greater than every earlier
        one). ``in_reply_to`` names the inbound events it answers. With
        ``obligation_id``, the append ends that ledger row's attempt as ``delivered`` in
        the same transaction, and only while this sender holds its claim (else nothing
        changes: ``None``)."""
        return self._outbox.outbox_append(
            session_key=session_key, platform=platform, chat_id=chat_id, thread_id=thread_id,
            text=text, kind=kind, floor=floor, in_reply_to=in_reply_to,
            obligation_id=obligation_id,
        )

    def outbox_read(self, platform: str, chat_id: str | None, after: int = 0,
                    limit: int = 100) -> list[dict[str, Any]]:
        """Rows of one chat with a cursor above ``after``, oldest first (at most
        ``limit``, capped at :data:`MAX_READ`); each a dict of :data:`OUTBOX_COLUMNS`."""
        return self._outbox.outbox_read(platform, chat_id, after, limit)

    def outbox_head(self) -> int:
        """The highest cursor so far (0 when the outbox is empty)."""
        return self._outbox.outbox_head()

    def outbox_prune(self, max_age_days: float = 7) -> int:
        """Delete rows older than ``max_age_days``; returns the count."""
        return self._outbox.outbox_prune(max_age_days)

    # -- NodeRecords -------------------------------------------------------------
    def clean_shutdown(self) -> bool:
        """Whether the last run of this node ended with a graceful stop."""
        return self._node.clean_shutdown()

    def mark_clean_shutdown(self, info: dict[str, Any]) -> None:
        """The last act of a graceful stop (``info``: who stopped, when)."""
        return self._node.mark_clean_shutdown(info)

    def clear_clean_shutdown(self) -> None:
        """Forget the marker (once the start it allowed has discarded the turn markers)."""
        return self._node.clear_clean_shutdown()

    def restart_counts(self) -> dict[str, int]:
        """``session_key -> consecutive restarts it was mid-turn across`` (positive
        only)."""
        return self._node.restart_counts()

    def write_restart_counts(self, counts: dict[str, int]) -> None:
        """Replace the restart counts."""
        return self._node.write_restart_counts(counts)

    def session_restarts(self) -> dict[str, int]:
        """The per-session stuck-loop counts a cluster's nodes share (every node's, read
        from the database now; on a store of one node, the node's own counts)."""
        return self._node.session_restarts()

    def session_restarts_op(self, counts: Iterable[tuple[str, int]]) -> Op:
        """The op setting those counts (0 removes one), for a caller's transaction."""
        return self._node.session_restarts_op(counts)

    def write_session_restarts(self, counts: Iterable[tuple[str, int]]) -> None:
        """Set some sessions' shared stuck-loop counts (0 removes one) now."""
        return self._node.write_session_restarts(counts)

    def restart_boots(self) -> list[float]:
        """Epoch times of recent boots that had sessions to resume (the storm guard)."""
        return self._node.restart_boots()

    def write_restart_boots(self, boots: list[float]) -> None:
        """Replace the storm guard's boots."""
        return self._node.write_restart_boots(boots)

