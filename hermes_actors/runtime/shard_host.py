"""``ShardHost``: a gateway serving the shards its :class:`LeaseManager` holds.

A cluster node accepts any message (durable in the shared inbox before the answer), but runs
session actors only for the shards it owns. This module is the seam between the leases and
the gateway: it hears the :class:`~hermes_actors.cluster.events.ShardListener` callbacks
(on the manager's greenlet, where nothing may block) and hands them to one worker, which

* on ``gained``: runs the gateway's recovery restricted to the shard (turn markers, the
  ledger, the inbox in arrival order, auto-continue: the supervisor's own code, given a key
  filter), then marks the shard *serving*;
* polls the inbox of the serving shards every ``poll_interval`` seconds and dispatches
  what another node accepted for them;
* on ``lost``: stops the shard's actors at once (the fence refuses whatever they still
  try to write); on ``handover``: drains them, then reports ``done``.

**Order.** Per session, events are dispatched in the inbox's arrival order. A node never
dispatches an event straight from its ``POST``: an accepted event of a serving shard makes
the node read the unconsumed inbox (:meth:`accepted`, :meth:`catch_up`) and dispatch
everything of its shards not dispatched yet, oldest first, so a message accepted by another
node a moment earlier goes first. Which events were dispatched is remembered per shard and forgotten
once a later read no longer finds them unconsumed. Passes (a read and its dispatch) run one
at a time: two reads on two pooled connections may run in either order on the server, and
a consumed event forgotten after the newer read must not be dispatched again from the
older one (a test of the cluster under load found exactly that). Dispatch decisions are
taken under the gateway's lock as well, so ingress and the drains see one order.

Rejected: dispatching accepted events directly on their owner (cheaper by one read per
message, but a message accepted elsewhere just before would be overtaken) and a separate
recovery implementation for shards (the supervisor's passes take a key filter instead).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Container
from typing import Any, NamedTuple, Protocol

from hermes_actors._green import spawn
from hermes_actors.cluster.events import ShardListener, shard_ranges
from hermes_actors.cluster.shards import ShardSet, shard_of
from hermes_actors.errors import StoreUnavailableError
from hermes_actors.model.events import MessageEvent
from hermes_actors.runtime.recovery import RecoveryReport
from hermes_actors.runtime.recovery_rules import plan_startup_dispatch

__all__ = ["ShardGateway", "ShardHost", "ShardStatistics"]

log = logging.getLogger("hermes_actors.cluster")

KeyFilter = Callable[[str], bool]


class ShardGateway(Protocol):
    """What the host needs of its gateway."""

    def recover_sessions(self, belongs: KeyFilter) -> tuple[RecoveryReport, list]:
        """Recovery of the sessions ``belongs`` picks (entries re-read first)."""

    def pending_inbox(self, shards: ShardSet) -> list[tuple[str, MessageEvent]]:
        """The unconsumed inbox events of ``shards``' sessions, in arrival order."""

    def pending_events(self, shards: ShardSet, known: Container[str]
                       ) -> list[tuple[str, str, MessageEvent | None]]:
        """The same as ``(session_key, event_id, event)``, ``event`` not parsed (``None``)
        for the ids in ``known``."""

    def dispatch(self, key: str, event: MessageEvent, refusable: bool) -> Any:
        """Hand ``event`` to its session actor (called under the gateway's lock)."""

    def stop_sessions(self, belongs: KeyFilter) -> int:
        """Stop the actors of the sessions ``belongs`` picks at once; how many."""

    def drain_sessions(self, belongs: KeyFilter) -> None:
        """Let those sessions' running turns end (mark the rest for resumption)."""

    def settle_deliveries(self, belongs: KeyFilter, started: float) -> bool:
        """Let those sessions' deliveries in flight end (bounded from ``started``, a
        ``time.monotonic()``); True when none is left."""


class ShardStatistics(NamedTuple):
    """A snapshot of a cluster node's shards."""

    #: Shards served now (recovered, actors allowed).
    serving: int
    #: Shards gained since start (each recovered once).
    gained: int
    #: Shards lost since start, by any reason but a handover.
    lost: int
    #: Shards handed over to other nodes since start.
    handovers: int
    #: Inbox events dispatched from the shared inbox since start.
    dispatched: int
    #: Passes started by a notice of new inbox rows (``LISTEN``) rather than the poll.
    woken: int = 0
    #: Shards handed over whose wind-down waits for their deliveries in flight now.
    settling: int = 0
    #: Shards gained and not recovered yet (the worker's next pass recovers them).
    due: int = 0


class ShardHost(ShardListener):
    """Serves ``gateway``'s shards (see the module docstring). ``lock`` is the gateway's
    lock (dispatch decisions are taken under it); ``shards`` the cluster's shard count."""

    def __init__(self, gateway: ShardGateway, lock: Any, shards: int, *,
                 poll_interval: float, notices: Any = None) -> None:
        self._gateway = gateway
        #: What tells the node of new inbox rows of its shards between polls
        #: (``InboxNotices``: ``want(shards)``, ``start()``, ``stop()``), or ``None``.
        self.notices = notices
        self._lock = lock
        self.shards = shards
        self.poll_interval = poll_interval
        #: The lease manager (set by :meth:`start`).
        self.manager: Any = None
        self._serving: dict[int, int] = {}
        #: shard -> ids of the events dispatched and not yet seen consumed
        self._dispatched: dict[int, set[str]] = {}
        #: One pass (an inbox read and its dispatch) at a time (module docstring).
        self._passes = threading.Lock()
        self._due: dict[int, int] = {}  # gained, not recovered yet
        #: Shards whose handover's wind-down runs now (its drain may take long): a new
        #: tenure of one is recovered only once that is over, or the old wind-down would
        #: drain and stop the new tenure's actors, interrupting their turns unmarked.
        self._winding: set[int] = set()
        self._due_lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._worker_done = threading.Event()
        self._changed = threading.Condition()
        self._gained = self._lost = self._handovers = self._dispatch_count = 0
        self._woken = self._settling = 0

    # -- what the gateway asks ------------------------------------------------------------

    def shard_of(self, session_key: str) -> int:
        """The shard of ``session_key``."""
        return shard_of(session_key, self.shards)

    def serves(self, session_key: str) -> bool:
        """Whether the node serves ``session_key``'s shard now."""
        shard = self.shard_of(session_key)
        return shard in self._serving and self.manager.owns(shard, self._serving[shard])

    def serving_tenure(self, session_key: str) -> tuple[int, int] | None:
        """``(shard, epoch)`` of ``session_key``'s shard while served, else ``None``: the
        tenure a session actor started now belongs to."""
        shard = self.shard_of(session_key)
        epoch = self._serving.get(shard)
        return None if epoch is None else (shard, epoch)

    def belongs(self) -> ShardSet:
        """A filter for the sessions of the shards served now (and still held: a lease
        whose local deadline passed is not, even before the manager reports it lost)."""
        owned = self.manager.owned() if self.manager is not None else {}
        return ShardSet(self.shards,
                        frozenset(s for s, e in self._serving.items() if owned.get(s) == e))

    def tenure(self, shard: int) -> int | None:
        """The epoch the node holds ``shard`` under now (the fence asks), or ``None``."""
        return self.manager.tenure(shard) if self.manager is not None else None

    def lease_snapshot(self) -> tuple[Any, str]:
        """The lease table as of now (a ``ClusterSnapshot``: nodes, shard and adapter
        leases, on the database's clock) and the database it is in (password masked):
        the operator's view (``GET /v1/admin/cluster``). One short read on the lease
        manager's own connection."""
        store = self.manager.store
        return store.snapshot(), store.where

    def start(self, manager: Any) -> None:
        """Run ``manager`` (joined already or not) and the worker."""
        self.manager = manager
        spawn(self._work, "cluster-shards")
        if self.notices is not None:
            self.notices.start()
        manager.start()

    def stop(self, timeout: float | None = None) -> bool:
        """Hand every shard over and leave the cluster, then stop the worker; True when the
        node left cleanly."""
        left = True
        if self.manager is not None:
            left = self.manager.stop(timeout=timeout)
        self._closed.set()
        self._wake.set()
        if self.notices is not None:
            self.notices.stop()
        self._worker_done.wait(10.0)
        return left

    def accepted(self, session_key: str, refusable: str | None = None) -> Any:
        """The node committed an accept of an event of ``session_key``: when it serves the
        session's shard, a pass now (:meth:`catch_up`; its answer). The node does not hear
        its own accepts' notices (``InboxNotices`` skips them: this pass finds what they
        would wake one for), so where this pass does not run for them the worker does:
        when the pass fails, and when the shard is listened to but not served at this
        instant (its lease's local deadline passed while a renewal is in flight)."""
        if self.serves(session_key):
            try:
                return self.catch_up(refusable)
            except BaseException:
                self.wake()
                raise
        if self.shard_of(session_key) in self._serving:
            self.wake()
        return None

    def wake(self) -> None:
        """Run a pass soon, on the worker (an accept of this node may be unread)."""
        self._wake.set()

    def notice(self, shard: int | None) -> None:
        """New inbox rows (of ``shard``; ``None``: of any shard served): run a pass now."""
        self._woken += 1
        self._wake.set()

    def wait_for(self, predicate: Callable[[ShardStatistics], bool],
                 timeout: float | None = None) -> bool:
        """Wait until ``predicate(statistics())`` holds (tests, operators)."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self.statistics()), timeout)

    def statistics(self) -> ShardStatistics:
        """A snapshot record."""
        with self._due_lock:
            due = len(self._due)
        return ShardStatistics(len(self._serving), self._gained, self._lost,
                               self._handovers, self._dispatch_count, self._woken,
                               self._settling, due)

    # -- the listener (on the manager's greenlet: hand on, never block) -------------------

    def gained(self, shard: int, epoch: int) -> None:
        with self._due_lock:
            self._due[shard] = epoch
        self._wake.set()

    def lost(self, shard: int, epoch: int, reason: str) -> None:
        with self._due_lock:
            if self._due.get(shard) == epoch:
                del self._due[shard]
        # Nothing is dispatched for the shard from now on (every dispatch asks the manager
        # first); the rest takes the gateway's lock, so it runs on a greenlet of its own.
        spawn(lambda: self._on_lost(shard, epoch, reason), f"cluster-lost-{shard}")

    def _on_lost(self, shard: int, epoch: int, reason: str) -> None:
        if not self._stop_serving(shard, epoch):
            return
        if reason != "released":
            self._lost += 1
            self._stop_actors(shard)
        self._notify()

    def handover(self, shard: int, epoch: int, done: Callable[[], None]) -> None:
        with self._due_lock:
            self._winding.add(shard)

        def wind_down() -> None:
            started = time.monotonic()
            try:
                self._stop_serving(shard, epoch)
                belongs = self._one(shard)
                self._gateway.drain_sessions(belongs)
                self._gateway.stop_sessions(belongs)
                # a notice or reply still being sent here would be sent again, prefixed,
                # by the new owner's ledger sweep: the lease goes once they are settled
                self._settle(shard, started)
                self._handovers += 1
                log.info("event=cluster_handover shard=%d epoch=%d", shard, epoch)
            except Exception:  # noqa: BLE001 - the lease is released all the same
                log.exception("event=cluster_handover_failed shard=%d", shard)
            finally:
                with self._due_lock:
                    self._winding.discard(shard)
                done()
                self._wake.set()  # a new tenure of the shard may be due
                self._notify()

        spawn(wind_down, f"cluster-handover-{shard}")

    # -- the worker -----------------------------------------------------------------------

    def _work(self) -> None:
        try:
            while not self._closed.is_set():
                self._wake.wait(self.poll_interval)
                self._wake.clear()
                if self._closed.is_set():
                    break
                try:
                    self.recover_due()
                    self.catch_up()
                except StoreUnavailableError as exc:  # an outage: the gateway is replaced
                    log.warning("event=cluster_pass_failed error=%s", exc)
                except Exception:  # noqa: BLE001 - the next pass tries again
                    log.exception("event=cluster_pass_failed")
        finally:
            self._worker_done.set()

    def recover_due(self) -> None:
        """Recover the shards gained and still held, now (the worker's pass runs it before
        :meth:`catch_up`; tests run it to take a pass at a moment of their choosing)."""
        with self._due_lock:
            due, self._due = self._due, {}
        due = self._owned_now(due)
        if not due:
            return
        belongs = ShardSet(self.shards, frozenset(due))
        try:
            report, candidates = self._gateway.recover_sessions(belongs)
        except Exception:
            with self._due_lock:  # tried again at the next pass, while still held
                self._due = {**due, **self._due}
            raise
        with self._passes:
            # Read before the shard serves: what comes after the read is dispatched by the
            # next pass, after these (it dispatches, in arrival order, all not dispatched).
            previous = self._gateway.pending_inbox(belongs)
            with self._lock:
                live = self._owned_now(due)
                previous = [(k, ev) for k, ev in previous if self.shard_of(k) in live]
                ours = [c for c in candidates if self.shard_of(c.session_key) in live]
                events, resumed = plan_startup_dispatch(ours, previous)
                for shard, epoch in live.items():
                    self._serving[shard] = epoch
                    self._dispatched[shard] = set()
                for key, event in events:
                    self._dispatch(key, event, False)
                self._listen()
        self._gained += len(live)
        self._wake.set()  # a catch-up for what came after the read
        report.resumed, report.replayed_inbox = resumed, len(previous)
        log.info("event=cluster_shards_serving shards=%s %s", shard_ranges(live),
                 report.summary())
        self._notify()

    def catch_up(self, refusable: str | None = None) -> Any:
        """Dispatch every unconsumed inbox event of the served shards that was not
        dispatched yet, in arrival order; returns the answer future of the event
        ``refusable`` names when it was dispatched here (asked, so it may be refused)."""
        with self._passes:
            with self._lock:
                serving = self.belongs()
                # the events dispatched already are not parsed again (their ids are enough)
                known = set().union(*self._dispatched.values())
            if not serving.wanted:
                return None
            pending = self._gateway.pending_events(serving, known)
            answer = None
            with self._lock:
                held = self.belongs().wanted & serving.wanted  # lost meanwhile: not
                unconsumed: dict[int, set[str]] = {shard: set() for shard in held}
                for key, event_id, event in pending:
                    shard = self.shard_of(key)
                    if shard not in held:
                        continue
                    unconsumed[shard].add(event_id)
                    if event_id in self._dispatched[shard]:
                        continue
                    if event is None:  # known at the read, forgotten since (passes are
                        self._wake.set()  # serial, so not expected): parsed next pass
                        continue
                    future = self._dispatch(key, event, event_id == refusable)
                    if event_id == refusable:
                        answer = future
                for shard, still in unconsumed.items():
                    # consumed (or withdrawn) events are never pending again
                    self._dispatched[shard] &= still
            return answer

    def _dispatch(self, key: str, event: MessageEvent, refusable: bool) -> Any:
        """Under the lock: remember the event as dispatched, then hand it on."""
        self._dispatched[self.shard_of(key)].add(event.event_id)
        self._dispatch_count += 1
        return self._gateway.dispatch(key, event, refusable)

    # -- helpers --------------------------------------------------------------------------

    def _owned_now(self, due: dict[int, int]) -> dict[int, int]:
        """The tenures of ``due`` owned now. One not owned at this instant but still in the
        manager's table (its local deadline passed while its renewal was in flight) is due
        again at the next pass: the renewal may keep it, under the same epoch and with no
        new ``gained``, and dropped here it would be held but never served. ``lost`` takes
        it out of the due set otherwise (it comes after the manager forgot the tenure, and
        waits for this lock)."""
        owned = {s: e for s, e in due.items() if self.manager.owns(s, e)}
        with self._due_lock:
            for shard, epoch in due.items():
                if shard in self._winding and shard in owned:
                    del owned[shard]  # an earlier tenure's wind-down runs: after it
                    self._due.setdefault(shard, epoch)
                elif shard not in owned and self.manager.holds(shard, epoch):
                    self._due.setdefault(shard, epoch)
        return owned

    def _stop_serving(self, shard: int, epoch: int) -> bool:
        with self._lock:
            if self._serving.get(shard) != epoch:
                return False
            del self._serving[shard]
            self._dispatched.pop(shard, None)
            self._listen()
            return True

    def _listen(self) -> None:
        """Under the lock: listen for the inbox rows of the shards served now."""
        if self.notices is not None:
            self.notices.want(self._serving)

    def _settle(self, shard: int, started: float) -> None:
        self._settling += 1
        self._notify()
        try:
            if not self._gateway.settle_deliveries(self._one(shard), started):
                log.warning("event=cluster_handover_unsettled shard=%d: deliveries still in "
                            "flight, the new owner sends them again", shard)
        finally:
            self._settling -= 1

    def _one(self, shard: int) -> ShardSet:
        return ShardSet(self.shards, frozenset((shard,)))

    def _stop_actors(self, shard: int) -> None:
        try:
            stopped = self._gateway.stop_sessions(self._one(shard))
            log.info("event=cluster_shard_stopped shard=%d actors=%d", shard, stopped)
        except Exception:  # noqa: BLE001
            log.exception("event=cluster_shard_stop_failed shard=%d", shard)

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()
