"""Deleting conversations (issue 39): an operator's ``DELETE /v1/admin/sessions/<key>`` and
retention's sweep of idle ones.

A delete must leave no live state that could write the conversation back, and must be all
or nothing on disk. So it runs in two steps:

1. the session's actor is taken out of the router (a message for the key arriving now is
   dropped: it belongs to the conversation being deleted) and told to :class:`Forget`:
   it drops its queue, stops its running turn as ``/stop`` does and its delegations; the
   delete waits for that turn's worker, and those of a ``/new`` or ``/status`` under way,
   to finish (they may still write the routing entry, transcript and ledger rows), stops
   the actor, then waits for the session's notices already queued (each records a
   ledger row);
2. under the gateway's dispatch lock, one store transaction deletes the routing entry,
   transcripts with their search index rows, inbox, ledger and outbox rows
   (:meth:`~hermes_actors.store.SessionStore.delete_sessions`); the cached agent is
   discarded and the supervisor forgets the session's restart count.

What the conversation still owed goes nowhere: its queued messages, the running turn's
message and undelivered ledger rows are deleted unanswered (the chat asked to be
forgotten; a reply to it after the delete would recreate what was deleted). The next
message to the key starts a fresh session (a new session id).

Rejected: deleting through a chat command submitted to the actor (as ``/new`` is): the
delete would then wait behind the queue it is meant to drop, and a turn's worker could
still write after the store's transaction.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Container, Iterable
from typing import Any

import pykka

from hermes_actors._green import spawn
from hermes_actors.errors import HermesActorsError
from hermes_actors.runtime.crash import DELETE_CRASH_POINTS, crashpoint
from hermes_actors.runtime.session_actor import Forget, GetStatistics

__all__ = ["DELETE_CRASH_POINTS", "RETENTION_BATCH", "ConversationBusy", "Deleter"]

log = logging.getLogger("hermes_actors.retention")

#: Conversations retention deletes at most per housekeeping pass (one transaction).
RETENTION_BATCH = 100
#: Seconds a delete waits for the running turn it stopped to end.
TURN_END_TIMEOUT = 30.0


class ConversationBusy(HermesActorsError):
    """The running turn did not end in time after it was stopped: nothing was deleted."""


class Deleter:
    """Deletes conversations of one gateway (see the module doc). ``gateway`` gives the
    router, services, store, supervisor and dispatch lock; ``deleting`` is the gateway's
    set of keys being deleted, which its dispatch consults."""

    def __init__(self, gateway: Any, deleting: set[str]) -> None:
        self._gw = gateway
        self._deleting = deleting
        #: The keys of ``deleting`` a retention pass deletes: a message for one spares it.
        self._sparable: set[str] = set()

    def delete(self, keys: Iterable[str], *, turn_timeout: float = TURN_END_TIMEOUT,
               only_idle: bool = False, still_idle: Callable[[], Container[str]] = tuple
               ) -> dict[str, dict[str, int]]:
        """Delete the conversations of ``keys``; the rows removed per key deleted (unknown
        keys are left out). Raises :class:`ConversationBusy` when a stopped turn did not
        end within ``turn_timeout`` seconds (that key and the ones after it are kept).
        ``only_idle`` (retention): a key whose actor runs or holds work is kept, and so is
        one a message arrives for meanwhile (:meth:`spare`) or that ``still_idle()``, asked
        just before the transaction, no longer names (a turn ran since the keys were
        picked)."""
        gw = self._gw
        keys = [k for k in dict.fromkeys(keys) if k not in self._deleting]
        if not keys:
            return {}
        with gw._lock:
            if gw._state != "running":  # a stop began: its actors and store are going
                return {}
            self._deleting.update(keys)
            if only_idle:
                self._sparable.update(keys)
        try:  # (``keys`` stays whole: the finally clears every key it marked)
            kept = [key for key in keys if self._forget_actor(key, turn_timeout, only_idle)]
            with gw._lock:  # no event is dispatched meanwhile (the set is consulted there)
                if only_idle and kept:  # a message since spared it, or a turn touched it
                    idle = still_idle()
                    kept = [key for key in kept if key in self._deleting and key in idle]
                removed = gw.store.delete_sessions(
                    kept, before_commit=lambda: crashpoint(DELETE_CRASH_POINTS[0]))
                crashpoint(DELETE_CRASH_POINTS[1])
        finally:
            with gw._lock:
                self._deleting.difference_update(keys)
                self._sparable.difference_update(keys)
        self._forget_memory(list(removed))
        return removed

    def spare(self, key: str) -> bool:
        """An event for ``key`` is being dispatched while it is being deleted (the caller
        holds the gateway's lock): ``True`` when a retention pass deletes it, which now
        keeps the conversation (the event is dispatched as usual); ``False`` when an
        operator deletes it (the event goes with the conversation)."""
        if key not in self._sparable:
            return False
        self._sparable.discard(key)
        self._deleting.discard(key)
        log.info("retention spared session_key=%s: a message arrived", key)
        return True

    def _forget_actor(self, key: str, timeout: float, only_idle: bool) -> bool:
        """Take ``key``'s actor out of the router, stop its turn and wait for the turn's
        worker, then stop the actor. ``False`` (nothing done) when ``only_idle`` and the
        actor is busy, or a message spared the key."""
        gw = self._gw
        router = gw._live_router
        if only_idle:
            stats = router.ask(key, GetStatistics())
            if stats is not None and (stats.running or stats.queue_depth):
                return False
        with gw._lock:  # (against a dispatch: an event told the actor has spared the key)
            if only_idle and key not in self._deleting:
                return False
            refs = router.remove_where(lambda k: k == key)
        for _, ref in refs:
            try:
                ended = ref.ask(Forget(), timeout=10)
            except (pykka.ActorDeadError, pykka.Timeout):
                ended = None
            if ended is not None and not ended.wait(timeout):
                # its turn goes on writing the conversation: nothing may be deleted. The
                # actor (out of the router: a later message starts a new one; the inbox
                # keeps what it had queued) stops once that turn has ended.
                spawn(functools.partial(_stop, ref, ended), "forgotten-actor")
                raise ConversationBusy(
                    f"the running turn of {key!r} did not end within {timeout:g} s after it "
                    "was stopped; nothing was deleted (try again)")
            _stop(ref)
        if not self._gw._live_services.notices.settle(key, timeout):
            raise ConversationBusy(
                f"a notice of {key!r} was still being sent {timeout:g} s after its actor "
                "stopped; nothing was deleted (try again)")
        return True

    def _forget_memory(self, keys: list[str]) -> None:
        """The cached agents and restart counts of deleted sessions."""
        gw = self._gw
        services = gw._live_services
        for key in keys:
            closed = threading.Event()
            try:
                services.cache.discard(key, on_done=closed.set).get(timeout=10)
                if not closed.wait(10):  # (an agent's close that hangs: the delete is done)
                    log.warning("the agent of deleted session_key=%s is still closing", key)
                gw._supervisor.turn_succeeded(key).get(timeout=10)
            except Exception:  # noqa: BLE001 - the delete is done; log and go on
                log.exception("after deleting session_key=%s", key)

    def sweep(self, days: float | None, *, batch: int = RETENTION_BATCH) -> int:
        """Retention: delete at most ``batch`` conversations idle longer than ``days``
        (``None``: none), oldest first; how many were deleted. One log line a batch."""
        if days is None:
            return 0
        store = self._gw.store
        keys = store.idle_session_keys(days, batch)
        if not keys:
            return 0
        try:
            removed = self.delete(keys, only_idle=True,
                                  still_idle=lambda: store.still_idle_keys(keys, days))
        except ConversationBusy as exc:  # a turn began since: the next sweep retries
            log.warning("retention: %s", exc)
            return 0
        messages = sum(counts.get("messages", 0) for counts in removed.values())
        log.info("retention deleted=%d conversations idle over %g days (messages=%d)",
                 len(removed), days, messages)
        return len(removed)


def _stop(ref: pykka.ActorRef, after: Any = None) -> None:
    """Stop ``ref`` (once ``after`` is set, when given)."""
    if after is not None:
        after.wait()
    try:
        ref.stop(block=True, timeout=10)
    except (pykka.ActorDeadError, pykka.Timeout):
        pass
