"""``SupervisorActor``: crash recovery, restart counting, drain marking, ledger sweeps (§7).

One per gateway. Its mailbox serialises everything that touches the node's state (the
restart counts, the restart-storm boots and the clean-shutdown marker, kept by the store's
backend: ``NodeRecords``), so those never race. The decisions themselves are pure functions
(:mod:`hermes_actors.store.recovery`, :mod:`.recovery_rules`); this actor gathers the durable
facts, applies the verdicts through the store and the delivery, and keeps the statistics.

On a cluster node the stuck-loop counts are not the node's own but the database's, per
session (``SessionStore.session_restarts``, shared by every node): a session whose turn is
interrupted on node A, then on B, then on A again is suspended by whichever node recovers
it the third time. The node that recovers a shard reads its sessions' counts afresh and
writes the new ones in the transaction that settles their turn markers (fenced like it:
only the shard's owner counts); ``_counts`` then caches the counts of the sessions this node
recovered, for the reset after a successful turn.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, NamedTuple

from hermes_actors._green.actor import LightActor
from hermes_actors.errors import FencedError, StoreUnavailableError
from hermes_actors.runtime.crash import crashpoint
from hermes_actors.runtime.delivery import RECOVERED_PREFIX, Owed
from hermes_actors.runtime.ledger_sweep import sweep_ledger
from hermes_actors.runtime.recovery import RecoveryReport
from hermes_actors.runtime.recovery_rules import (
    auto_continue_candidates,
    latest_interrupted,
    next_restart_counts,
    record_boot,
)
from hermes_actors.store.recovery import RESTART_INTERRUPTED, marker_max_age
from hermes_actors.store.turns import MarkerSettlement

__all__ = ["SUSPENDED_NOTICE", "SupervisorActor", "SupervisorStatistics"]

log = logging.getLogger("hermes_actors.supervisor")

#: The final answer of the messages a session owed when the stuck-loop guard suspended it.
SUSPENDED_NOTICE = (
    "⚠️ This conversation was interrupted by {} restarts in a row and has been closed: "
    "your messages were not answered. Send them again to start a new session."
)


class SupervisorStatistics(NamedTuple):
    """A snapshot of the supervisor."""

    #: Sessions with a non-zero stuck-loop counter.
    counted_sessions: int
    #: Sessions suspended by the stuck-loop guard since start.
    suspensions: int
    #: Ledger rows delivered by sweeps since start.
    redelivered: int
    #: Sessions marked for resumption at a drain deadline.
    drain_timeouts: int
    #: The report of the last startup.
    last_report: RecoveryReport | None
    #: Session keys that were mid-turn at the last startup (their restart counter advanced).
    interrupted: tuple[str, ...] = ()


class SupervisorActor(LightActor):
    """See the module docstring."""

    use_daemon_thread = True

    def __init__(self, store: Any, config: Any, clock: Any, delivery: Any) -> None:
        super().__init__()
        self._store = store
        self._config = config
        self._clock = clock
        self._delivery = delivery
        #: Whether the counts are the cluster's, per session (see the module docstring).
        self._shared = bool(getattr(getattr(config, "cluster", None), "enabled", False))
        self._counts: dict[str, int] = {} if self._shared else store.restart_counts()
        self._suspensions = 0
        self._redelivered = 0
        self._drain_timeouts = 0
        self._report: RecoveryReport | None = None
        self._interrupted: tuple[str, ...] = ()

    # -- startup --------------------------------------------------------------------------

    def recover(self) -> tuple[RecoveryReport, list]:
        """Steps 1–4 of §7 and the auto-continue candidates (step 6 is dispatched by the
        gateway together with the inbox replay). Returns the report and the candidates."""
        store = self._store
        report = RecoveryReport(clean_shutdown=store.clean_shutdown())
        if report.clean_shutdown:
            store.discard_active_turn_markers()
            store.clear_clean_shutdown()  # only once the discard is durable
        else:
            report.recovered_replies = self._recover_unclean_sessions()
        report.redelivered = self.sweep_ledger()
        report.suspended = self._suspend_stuck()
        report_candidates = self._auto_continue_candidates()
        self._report = report
        return report, report_candidates

    def _recover_unclean_sessions(self, belongs: Callable[[str], bool] | None = None) -> int:
        store = self._store
        max_age = marker_max_age(self._config.agent.timeout)
        waiting = _waiting(store, belongs)
        verdicts = store.judge_interrupted_turns(self._clock.time(), max_age, belongs)
        # Count first: a crash during recovery must not forget that these were mid-turn.
        mid_turn = [e.session_key for e, v in verdicts if v.action != "expire"]
        also = []
        if self._shared and belongs is not None:
            # the cluster's counts of these sessions, counted in the settlement's transaction
            stored = {k: n for k, n in store.session_restarts().items() if belongs(k)}
            ours = next_restart_counts(stored, mid_turn, waiting)
            changes = [(k, ours.get(k, 0)) for k in sorted({*stored, *ours})
                       if ours.get(k, 0) != stored.get(k, 0)]
            if changes:
                also.append(store.session_restarts_op(changes))
            self._counts = {**{k: n for k, n in self._counts.items() if not belongs(k)},
                            **ours}
            self._interrupted = latest_interrupted(self._interrupted, mid_turn)
        elif belongs is None:
            self._write_counts(next_restart_counts(self._counts, mid_turn, waiting))
            self._interrupted = tuple(mid_turn)
        else:  # one shard's sessions: the other sessions' counts are not this pass's
            others = {k: n for k, n in self._counts.items() if not belongs(k)}
            ours = next_restart_counts(self._counts, mid_turn, waiting)
            self._write_counts({**others, **ours})
            self._interrupted = latest_interrupted(self._interrupted, mid_turn)
        settlements, unrecorded = [], []
        for entry, verdict in verdicts:
            owed = reason = None
            if verdict.action == "deliver" and entry.origin is not None:
                owed = (entry.origin, verdict.content, verdict.kind)
                unrecorded.append(owed)
            elif verdict.action == "resume":
                # An existing, more specific reason is kept; the mark time is refreshed so
                # this fresh interruption passes the freshness test.
                reason = (entry.resume_reason if entry.resume_pending else None) \
                    or RESTART_INTERRUPTED
            settlements.append(MarkerSettlement(entry.session_key, entry.active_turn_token,
                                                reason, owed))
        # One transaction: owed answers recorded (the sweep delivers them), markers cleared,
        # resumable sessions flagged.
        store.settle_markers(settlements, ledger_on=self._delivery.ledger_enabled, also=also)
        crashpoint("during_recovery")
        if not self._delivery.ledger_enabled:  # nothing durable to sweep: send them now
            for target, content, kind in unrecorded:
                text = RECOVERED_PREFIX + content if kind == "recovered" else content
                self._delivery.attempt(Owed(None, claimed=True, kind=kind), target, text)
        return sum(kind == "recovered" for _, _, kind in unrecorded)

    def _suspend_stuck(self, belongs: Callable[[str], bool] | None = None) -> list[str]:
        threshold = self._config.stuck_loop_threshold
        stuck = sorted(k for k, n in self._counts.items()
                       if n >= threshold and (belongs is None or belongs(k)))
        for key in stuck:
            if self._store.suspend_session(key):
                self._suspensions += 1
                log.warning("session suspended after %d interrupted restarts key=%s",
                            self._counts[key], key)
                self._answer_suspended(key)
        if stuck and self._shared:
            self._counts = {k: n for k, n in self._counts.items() if k not in stuck}
            self._store.write_session_restarts((k, 0) for k in stuck)
        elif stuck:
            self._write_counts({k: n for k, n in self._counts.items() if k not in stuck})
        return stuck

    def _answer_suspended(self, key: str) -> None:
        """The messages a suspended session still owed an answer get a final notice."""
        entry = self._store.get(key)
        if entry is None or not entry.owed_events or entry.origin is None:
            return
        text = SUSPENDED_NOTICE.format(self._counts[key])
        try:
            self._delivery.send_owed(key, entry.origin, text, "notice",
                                     f"suspended:{entry.session_id}",
                                     in_reply_to=entry.owed_events)
        except (FencedError, StoreUnavailableError) as exc:
            log.warning("suspension notice not sent session_key=%s error=%s", key, exc)

    def _auto_continue_candidates(self) -> list:
        agent = self._config.agent
        candidates = auto_continue_candidates(
            self._store.flagged_sessions(), self._clock.time(), agent.auto_continue_freshness,
            self._delivery.can_send,
        )
        if not candidates:
            return []
        storm = self._config.restart_storm
        boots, is_storm = record_boot(self._store.restart_boots(), self._clock.time(),
                                      storm.window_seconds, storm.max_restarts)
        self._store.write_restart_boots(boots)
        if is_storm:
            log.warning("restart storm: %d boots with resumable sessions within %gs; "
                        "auto-continue skipped (flags kept)", len(boots), storm.window_seconds)
            return []
        return candidates

    def recover_shard(self, belongs: Callable[[str], bool]) -> tuple[RecoveryReport, list]:
        """A cluster node gained a shard: the steps of :meth:`recover` for the sessions
        ``belongs`` picks, always as after a crash (their previous owner may have died:
        nobody's clean-shutdown marker speaks for them), without the restart-storm guard (a
        node gains many shards at once; the stuck-loop counts still apply)."""
        report = RecoveryReport(clean_shutdown=False)
        report.recovered_replies = self._recover_unclean_sessions(belongs)
        report.redelivered = self.sweep_ledger(belongs)
        # only this pass's sessions: a count kept from an earlier tenure of another shard
        # is not this node's to act on now (its writes there would be fenced)
        report.suspended = self._suspend_stuck(belongs)
        agent = self._config.agent
        candidates = auto_continue_candidates(
            self._store.flagged_sessions(belongs), self._clock.time(),
            agent.auto_continue_freshness, self._delivery.can_send)
        return report, candidates

    # -- while running --------------------------------------------------------------------

    def sweep_ledger(self, belongs: Callable[[str], bool] | None = None) -> int:
        """:func:`~.ledger_sweep.sweep_ledger` as a step of recovery, counted."""
        sent = sweep_ledger(self._store, self._delivery, belongs)
        self._redelivered += sent
        return sent

    def count_redelivered(self, sent: int) -> None:
        """A sweep run outside this mailbox (housekeeping's) delivered ``sent`` rows."""
        self._redelivered += sent

    def turn_succeeded(self, session_key: str) -> None:
        """A successful turn resets the session's stuck-loop counter."""
        if session_key not in self._counts:
            return
        if not self._shared:
            self._write_counts({k: n for k, n in self._counts.items() if k != session_key})
            return
        del self._counts[session_key]
        try:
            self._store.write_session_restarts([(session_key, 0)])
        except FencedError:  # the shard is another node's now: its recovery counts
            pass

    def drain_finished(self, interrupted: list[str], reason: str) -> None:
        """At stop: mark sessions interrupted at the drain deadline and count the restart."""
        for key in interrupted:
            try:
                self._store.mark_resume_pending(key, reason)
            except FencedError:  # a cluster node lost the shard meanwhile: its new owner
                continue         # judges the session's marker
        self._drain_timeouts += len(interrupted)
        crashpoint("during_drain")
        if not self._shared:  # a session still waiting to resume keeps its count
            self._write_counts(next_restart_counts(self._counts, interrupted,
                                                   _waiting(self._store)))
            return
        # a handover (or the stop) of some shards: only these sessions' counts change
        stored = self._store.session_restarts()
        counts = [(key, stored.get(key, 0) + 1) for key in dict.fromkeys(interrupted)]
        try:
            self._store.write_session_restarts(counts)
        except FencedError:  # lost meanwhile: the new owner judges their markers
            return
        self._counts.update(counts)

    def write_clean_shutdown(self) -> None:
        """The last act of a graceful stop."""
        self._store.mark_clean_shutdown({"pid": os.getpid(), "at": self._clock.time()})

    def counted_keys(self) -> frozenset[str]:
        """Session keys with a stuck-loop counter (turn workers report their successes)."""
        return frozenset(self._counts)

    def statistics(self) -> SupervisorStatistics:
        """A snapshot record."""
        return SupervisorStatistics(
            counted_sessions=len(self._counts),
            suspensions=self._suspensions,
            redelivered=self._redelivered,
            drain_timeouts=self._drain_timeouts,
            last_report=self._report,
            interrupted=self._interrupted,
        )

    def _write_counts(self, counts: dict[str, int]) -> None:
        self._counts = dict(counts)
        self._store.write_restart_counts(self._counts)


def _waiting(store: Any, belongs: Callable[[str], bool] | None = None) -> list[str]:
    """Sessions flagged to resume whose turn has not run again (no marker): they keep
    their stuck-loop count (``next_restart_counts``)."""
    return [e.session_key for e in store.flagged_sessions(belongs)
            if e.resume_pending and e.active_turn_token is None]
