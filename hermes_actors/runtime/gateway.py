"""``Gateway``: the embedding facade (§1.1) that wires store, actors, delivery and recovery.

Thread-safe entry points (``submit``, ``wait_idle``, ``queue_depth``, ``stats``) may be called
from any thread of the host; everything stateful behind them is an actor or a thread-safe
service. Embedded use needs no monkey-patching; under ``gevent.monkey.patch_all()`` the same
code runs its actors and workers as greenlets and the store keeps SQLite off the hub.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import pykka

from hermes_actors._green import new_rlock
from hermes_actors.agents.base import check_agent_factory
from hermes_actors.agents.factory import agent_factory_from_config
from hermes_actors.cluster.control import control_action
from hermes_actors.config import GatewayConfig, load_config, require_config
from hermes_actors.errors import HermesActorsError, StoreError, StoreUnavailableError
from hermes_actors.model.events import MessageEvent
from hermes_actors.runtime import operator_actions
from hermes_actors.runtime.activity import ActivityTracker
from hermes_actors.runtime.answers import Answer, AnswerWaiters
from hermes_actors.runtime.cache import AgentCacheActor, wait_settled
from hermes_actors.runtime.clock import SystemClock
from hermes_actors.runtime.counters import IngressCounters, QueueGauge, TurnCounters
from hermes_actors.runtime.crash import crashpoint
from hermes_actors.runtime.delegations import DelegationRegistry
from hermes_actors.runtime.deletion import Deleter
from hermes_actors.runtime.delivery import Delivery, NoticePool
from hermes_actors.runtime.homelock import HomeLock
from hermes_actors.runtime.housekeeping import HousekeepingSchedule, Watcher
from hermes_actors.runtime.ledger_sweep import sweep_ledger
from hermes_actors.runtime.memory import MemoryProbe
from hermes_actors.runtime.node_sessions import RESET_WAIT, start_node
from hermes_actors.runtime.operator_actions import OperatorOutcome
from hermes_actors.runtime.pull_adapters import PullAdapters
from hermes_actors.runtime.recovery import RecoveryReport
from hermes_actors.runtime.recovery_rules import plan_startup_dispatch
from hermes_actors.runtime.router import SessionRouter
from hermes_actors.runtime.services import Services
from hermes_actors.runtime.session_actor import (
    AdmitTicket,
    DrainResult,
    GetStatistics,
    IdleCheck,
    Inbound,
    InboundAnswer,
    InterruptTurn,
    Kick,
    SessionActor,
    StopAccepting,
)
from hermes_actors.runtime.shard_host import ShardHost
from hermes_actors.runtime.supervisor import SupervisorActor
from hermes_actors.store.store import SessionStore

__all__ = ["Admission", "Gateway"]

log = logging.getLogger("hermes_actors.gateway")

#: What a home that was ever used holds (``state.db``, or the ``sessions`` folder of a
#: degraded store); a home with neither starts for the first time.
_STORE_FILES = ("state.db", "sessions")
#: Seconds ``admit`` waits for the session actor's answer (a mailbox round trip).
_ANSWER_TIMEOUT = 30.0
#: How long a stop waits for the delegations it stopped to report back (§8).
_DELEGATIONS_STOP_TIMEOUT = 5.0


class _PendingAnswer(NamedTuple):
    """A refusable event's dispatch: the future of the actor's ``InboundAnswer`` and the
    decision the asker shares with the actor (what the asker does once it gives up)."""

    future: pykka.Future
    ticket: AdmitTicket


class Admission(NamedTuple):
    """What ``Gateway.admit`` did with a message."""

    #: The event's id; for a duplicate, the id of the first event with its ingress key.
    event_id: str
    #: The session key the message routes to.
    session_key: str
    #: A repeat of an accepted message: nothing was stored or processed.
    duplicate: bool = False
    #: The refusal (the queue-full notice) when the session's queue could not take it;
    #: nothing of the message was kept.
    refused: str | None = None
    #: ``queue_depth`` of the session once the message was handled.
    queue_depth: int = 0

class _Actor(SessionActor):
    use_daemon_thread = True


class Gateway:
    """A running gateway over ``home``; see SPEC §1.1 for the contract."""

    def __init__(
        self,
        home: str | os.PathLike,
        config: GatewayConfig | None = None,
        *,
        agent_factory: Callable[[Any], Any] | None = None,
        adapters: Iterable[Any] = (),
        clock: Any = None,
        memory_probe: Any = None,
        home_lock: HomeLock | None = None,
    ) -> None:
        config = require_config(config, "Gateway")
        self.home = Path(home)
        self.config = config if config is not None else load_config()
        self.clock = clock or SystemClock()
        self.memory_probe = memory_probe
        self.adapters = list(adapters)
        self._agent_factory = agent_factory or agent_factory_from_config(self.config)
        #: The home's lock: the gateway's own, or a host's (``home_lock``) that outlives
        #: it, which the gateway takes if need be and never releases.
        self._home_lock = home_lock if home_lock is not None else HomeLock(self.home)
        self._owns_home_lock = home_lock is None
        #: Messages accepted and refused (by reason) since this gateway was created.
        self.ingress = IngressCounters()
        #: Finished turns by status, and their durations.
        self.turn_counters = TurnCounters()
        self._state = "new"
        #: Whether the last ``stop()`` wrote the clean-shutdown marker (the next start then
        #: skips crash recovery).
        self.stopped_cleanly = False
        #: Seconds ``admit`` waits for the session actor's answer; past it the message is
        #: acknowledged as accepted and can no longer be refused (the actor then answers a
        #: full queue with a final notice and consumes it). Settable, e.g. by a test.
        self.admit_timeout = _ANSWER_TIMEOUT
        #: Guards the state, the restore gate, held events and in-flight submits.
        self._lock = threading.Condition(new_rlock())
        self._gate_open = False
        self._held: list[tuple[str, MessageEvent]] = []
        self._inflight = 0
        self._stopping = threading.Event()
        #: The thread (greenlet under gevent) running ``stop()``, while it runs.
        self._stopper: int | None = None
        #: Whether housekeeping's ledger sweep runs now (``stop()`` waits for its sends).
        self._sweeping = False
        #: Set when the database server failed while running (an *outage*, see
        #: :attr:`SessionStore.outage`): new messages are refused from then on, and the host
        #: stops this gateway and starts a new one once the server is back (``run`` does).
        self.outage = threading.Event()
        self._store: SessionStore | None = None
        self._services: Services | None = None
        self._router: SessionRouter | None = None
        self._tracker = ActivityTracker()
        self._turns = ActivityTracker()
        self._resets = ActivityTracker()
        self._supervisor: Any = None
        self._watcher: Watcher | None = None
        self._counted: frozenset[str] = frozenset()
        #: A cluster node's shards (``cluster.enabled``), or ``None``.
        self.cluster: ShardHost | None = None
        #: A cluster node's pull adapters (Telegram), polled while their leases are held
        #: (``runtime/pull_adapters``); ``None`` off a cluster (the host polls them).
        self.pull_adapters: PullAdapters | None = None
        #: Where this process's HTTP API answers (``host:port``), set by its host before
        #: ``start``: a cluster node records it in ``cluster_nodes`` for the operator.
        self.advertised_address: str | None = None
        #: Callers of :meth:`ask` waiting for their events' final answers.
        self._answers = AnswerWaiters()
        #: Session keys whose conversations are being deleted: events for them are dropped
        #: at dispatch (they are deleted with the conversation).
        self._deleting: set[str] = set()
        self._deleter = Deleter(self, self._deleting)

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> Gateway:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def _live_router(self) -> SessionRouter:
        if self._router is None:
            raise HermesActorsError("the gateway is not started")
        return self._router

    @property
    def _live_services(self) -> Services:
        if self._services is None:
            raise HermesActorsError("the gateway is not started")
        return self._services

    @property
    def services(self) -> Services:
        """The started gateway's shared services (agent cache, delivery, delegations,
        notices), for tests and hosts that look inside; raises before :meth:`start`."""
        return self._live_services

    @property
    def stopping(self) -> threading.Event:
        """Set once :meth:`stop` has begun (a test waits on it to act during a stop)."""
        return self._stopping

    @property
    def store(self) -> SessionStore:
        """The session store (available once started)."""
        if self._store is None:
            raise HermesActorsError("the gateway is not started: call start() first")
        return self._store

    @property
    def running(self) -> bool:
        """Whether the gateway accepts messages."""
        return self._state == "running"

    def claim_home(self) -> None:
        """Take the home's lock now (``start()`` does it when not done yet); raises
        :class:`~hermes_actors.errors.HomeInUseError` naming the pid of the gateway that
        holds it. A host that binds sockets or does other setup first calls this before, so
        a busy home is reported before anything else. Released by ``stop()`` and, whatever
        happens, by the kernel when the process ends."""
        if self._home_lock.held:
            return
        try:
            self.home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HermesActorsError(
                f"cannot use home directory {str(self.home)!r}: {exc.strerror or exc}"
            ) from None
        if not self.home.is_dir():
            raise HermesActorsError(f"home {str(self.home)!r} exists and is not a directory")
        self._home_lock.acquire()

    def start(self) -> RecoveryReport:
        """Take the home, open the store, recover from the previous run, and start
        accepting messages. A home held by another gateway raises
        :class:`~hermes_actors.errors.HomeInUseError` before anything in it is read or
        written (no recovery, no marker)."""
        if self._state != "new":
            raise HermesActorsError(f"a gateway can be started once (it is {self._state})")
        check_agent_factory(self._agent_factory)
        self.claim_home()
        try:
            return self._start()
        except BaseException:
            self._abandon_start()
            raise

    def _abandon_start(self) -> None:
        """After a failed start: stop what it started and give the home back. The events
        submitted meanwhile are in the durable inbox: the next start replays them."""
        with self._lock:
            self._state = "stopped"
        services, supervisor = self._services, self._supervisor
        steps: list[Callable[[], Any]] = []
        if self._router is not None:
            steps.append(self._router.stop_all)
        if services is not None:
            steps += [services.notices.stop, lambda: services.cache.actor_ref.stop(timeout=10)]
        if supervisor is not None:
            steps.append(lambda: supervisor.actor_ref.stop(timeout=10))
        if self._store is not None:
            steps.append(self._store.close)
        for step in steps:
            try:
                step()
            except Exception:  # noqa: BLE001 - the start's own failure is what is raised
                log.exception("cleaning up after a failed start")
        self._release_home()

    def _start(self) -> RecoveryReport:
        new_home = not any((self.home / name).exists() for name in _STORE_FILES)
        self._store = SessionStore(
            self.home / "sessions", self.config, self._has_active_processes, clock=self.clock,
            on_outage=lambda _exc: self.outage.set(),
        )
        delivery = Delivery(self._store, self.adapters, ledger=self.config.delivery_ledger,
                            tracker=self._tracker,
                            sleep=getattr(self.clock, "sleep", None) or time.sleep)
        delivery.on_sent = self._answers.resolve
        cache = AgentCacheActor.start(
            self.config.agent.agent_cache, self.clock, probe=self.memory_probe or MemoryProbe(),
            load_transcript=self._store.load_transcript,
            current_session_id=self._store.current_session_id,
        ).proxy()
        self._router = SessionRouter(self._start_session_actor)
        self._queued = QueueGauge()
        self._services = Services(
            config=self.config,
            store=self._store,
            delivery=delivery,
            notices=NoticePool(delivery, self._tracker),
            cache=cache,
            delegations=DelegationRegistry(self._tracker.add, self._tracker.done),
            tracker=self._tracker,
            turns=self._turns,
            clock=self.clock,
            agent_factory=self._agent_factory,
            submit_internal=self._submit_internal,
            try_retire=self._router.try_retire,
            on_turn_succeeded=self._on_turn_succeeded,
            stopping=self._stopping,
            turn_counters=self.turn_counters,
            queued=self._queued,
            resets=self._resets,
        )
        self._supervisor = SupervisorActor.start(
            self._store, self.config, self.clock, delivery
        ).proxy()
        if self.config.cluster.enabled:
            return self._start_node()
        # The previous run's unconsumed events are read before any new submit is accepted;
        # what arrives during recovery is held (durable already) and dispatched after them.
        previous = self._store.pending_inbox()
        self._state = "running"
        report, candidates = self._supervisor.recover().get()
        # No store files in the home, and nothing in the store either (a database server
        # may hold this home's sessions although the home itself is empty).
        report.new_home = new_home and not previous and not self._store.statistics().sessions
        self._counted = self._supervisor.counted_keys().get()
        with self._lock:
            # what came during recovery is dispatched after the replay, and a resume note
            # rides on a held message too (no empty wake-up then)
            events, report.resumed = plan_startup_dispatch(candidates, previous, self._held)
            for key, event in events:
                self._dispatch(key, event)
            report.replayed_inbox = len(previous)
            self._held.clear()
            self._gate_open = True
        self._start_housekeeping()
        log.info(report.summary())
        return report

    def _start_housekeeping(self) -> None:
        self._schedule = HousekeepingSchedule(self.config.housekeeping, self.clock.monotonic())
        if isinstance(self.clock, SystemClock):
            self._watcher = Watcher(self._schedule, self.clock, self.housekeeping_tick)
            self._watcher.start()

    def _start_node(self) -> RecoveryReport:
        """Start as a cluster node: no recovery of the whole store (other nodes serve their
        shards); each shard is recovered when its lease is gained (``runtime/shard_host``)."""
        self._state = "running"
        with self._lock:
            self._gate_open = True
        self.cluster = start_node(self, self._lock)
        self._start_housekeeping()
        return RecoveryReport()

    def stop(self, drain_timeout: float | None = None, restarting: bool = False) -> None:
        """Stop gracefully: drain running turns up to ``drain_timeout`` seconds, interrupt
        and mark the rest for resumption, flush state and write ``.clean_shutdown``.

        Called again with ``drain_timeout=0`` while a stop drains (a second SIGINT), it cuts
        the drain short: running turns are interrupted and marked at once. Called again
        otherwise (another thread), it returns once that stop is done (at once when called
        from inside it, by a signal handler of the thread stopping). Every step runs even
        when an earlier one fails (full disk, a hung agent), and the marker is always
        attempted, as the last write before the store closes.
        """
        with self._lock:
            if self._state == "stopping" and drain_timeout == 0:
                log.warning("forced stop: interrupting running turns now")
                self._turns.cut()
                return
            if self._state == "stopping":
                # another thread's stop: done once it is; a call from inside this thread's
                # stop (a signal handler run meanwhile) would wait for itself: it returns
                if self._stopper != threading.get_ident():
                    self._lock.wait_for(lambda: self._state == "stopped")
                return
            if self._state != "running":
                return
            self._state = "stopping"
            self._stopper = threading.get_ident()
            self._stopping.set()
            # Submits already past the state check finish their dispatch first, so every
            # accepted event either reached an actor told to stop accepting, or stays in the
            # inbox for the next start.
            self._lock.wait_for(lambda: self._inflight == 0, timeout=10.0)
        if self._watcher is not None:
            self._watcher.stop()
        timeout = self.config.restart_drain_timeout if drain_timeout is None else drain_timeout
        reason = "restart_timeout" if restarting else "shutdown_timeout"
        services = self._live_services
        steps: list[tuple[str, Callable[[], Any]]] = [
            # a cluster node stops pulling first and frees the adapters' leases, so that
            # another node polls them while this one drains
            *([("adapters", self._release_adapters)] if self.cluster is not None else []),
            ("drain", lambda: self._drain(timeout, reason)),
            # a cluster node hands its (drained) shards over and leaves
            *([("cluster", self._leave_cluster)] if self.cluster is not None else []),
            ("delegations", lambda: _stop_delegations(services.delegations)),
            ("actors", self._live_router.stop_all),
            ("notices", services.notices.stop),
            ("agents", lambda: _close_agents(services.cache)),
            ("cache", lambda: services.cache.actor_ref.stop(timeout=10)),
            # a ledger sweep sending now records its outcomes before the marker and the
            # store's close (cut off, its rows would be sent again, prefixed, next start)
            ("sweep", self._wait_for_sweep),
            ("mirror", self.store.flush),
            # the last write: the node's state lives in the store's backend
            ("marker", lambda: self._supervisor.write_clean_shutdown().get(timeout=30)),
            ("supervisor", lambda: self._supervisor.actor_ref.stop(timeout=10)),
            ("store", self.store.close),
        ]
        if self.store.outage is not None:  # the database cannot take the marker
            log.warning("stopping during an outage of the session database: the next start "
                        "recovers as after a crash")
            steps = [(name, step) for name, step in steps if name != "marker"]
        for name, step in steps:
            try:
                step()
            except Exception:  # noqa: BLE001 - the remaining steps must still run
                log.exception("stop step %s failed", name)
            else:
                if name == "marker":
                    self.stopped_cleanly = True
        self._release_home()
        with self._lock:
            self._state = "stopped"
            self._stopper = None
            self._lock.notify_all()  # a stop() called meanwhile returns now

    def _wait_for_sweep(self) -> None:
        with self._lock:
            if not self._lock.wait_for(lambda: not self._sweeping, timeout=_SETTLE_TIMEOUT):
                log.warning("stopping with a ledger sweep still sending after %.0f s",
                            _SETTLE_TIMEOUT)

    def _release_home(self) -> None:
        if self._owns_home_lock:  # a host's lock is the host's to release
            self._home_lock.release()

    def _release_adapters(self) -> None:
        assert self.cluster is not None
        if self.pull_adapters is not None and self.pull_adapters.adapters:
            self.cluster.manager.release_adapters(timeout=self.config.cluster.lease_ttl)

    def _leave_cluster(self) -> None:
        assert self.cluster is not None
        self.cluster.stop(timeout=self.config.cluster.lease_ttl * 2)

    def _drain(self, timeout: float, reason: str) -> None:
        router = self._live_router
        for future in router.broadcast(StopAccepting()):
            _get(future)
        interrupted: list[str] = []
        if not self._turns.wait_idle(timeout):
            interrupted = [k for k in self._running_keys()
                           if router.ask(k, InterruptTurn(reason))]
            self._turns.wait_idle(10.0)
        # A /new whose reset is under way is answered (and its inbox row consumed) before
        # the actors stop; cut off, it would reset the session again at the next start.
        if not self._resets.wait_idle(RESET_WAIT):
            log.warning("stopping with a /new still resetting its session")
        # Only turns that did not complete after all are resumed next start.
        unfinished = [k for k in interrupted if router.ask(k, DrainResult()) != "completed"]
        if self.store.outage is not None:
            return  # nothing can be written: their markers stay, recovery resumes them
        self._supervisor.drain_finished(unfinished, reason).get()

    # -- messages -------------------------------------------------------------------------

    def submit(self, event: MessageEvent) -> str:
        """Accept an inbound message: durable first, then routed to its session actor.

        Non-blocking with respect to the turn; returns the event id. During startup recovery
        the event is held (already durable) and dispatched right after the recovered work.
        A repeat of an accepted message (same ``MessageEvent.ingress_key``: platform, chat,
        thread and ``message_id``) is not processed again: the first event's id is returned
        and nothing else happens. A message the session's queue cannot take is answered
        with the queue-full notice through the adapter.
        """
        return self._submit(event, refusable=False).event_id

    def ask(self, event: MessageEvent, timeout: float | None = 30.0) -> Answer:
        """Submit ``event`` and wait for its final answer: the reply of the turn that
        answered it, or a final notice (the agent failed, ``/stop``, queue full, …), as an
        :class:`~hermes_actors.runtime.answers.Answer` (``text``, ``kind``,
        ``in_reply_to``, ``final``). Acknowledgements do not end the wait. Raises
        ``TimeoutError`` when no final answer was sent within ``timeout`` seconds (the
        message stays accepted: its answer may still come, through the adapter)."""
        answers = self._answers
        waiter = answers.expect(event.event_id)
        try:
            event_id = self.submit(event)
        except BaseException:
            answers.forget(event.event_id, waiter)
            raise
        if event_id != event.event_id:  # a repeat: the first message's answer is the one
            answers.forget(event.event_id, waiter)
            waiter = answers.expect(event_id)
        return answers.wait(event_id, waiter, timeout)

    def admit(self, event: MessageEvent) -> Admission:
        """``submit`` for a host that answers its client itself (the HTTP adapter): a
        message the session's queue cannot take is refused here (``Admission.refused``)
        and removed from the store, so nothing of it remains and no notice is sent.

        The session actor decides the refusal, where the queue is; this call waits for its
        answer (a mailbox round trip, never a turn).
        """
        return self._submit(event, refusable=True)

    def _submit(self, event: MessageEvent, refusable: bool) -> Admission:
        if not isinstance(event, MessageEvent):
            raise TypeError("submit() takes a MessageEvent")
        with self._lock:
            if self._state != "running":
                self.ingress.refused("stopping")
                raise HermesActorsError("the gateway is not running: messages are not accepted")
            if self.outage.is_set():
                self.ingress.refused("store_unavailable")
                raise StoreUnavailableError("the session database cannot be used: messages are "
                                            "refused until it is back")
            self._inflight += 1
        try:
            admission = self._accept(event, refusable, counted=True)
        except StoreUnavailableError:
            self.ingress.refused("store_unavailable")
            raise
        if admission.duplicate:
            self.ingress.refused("duplicate")
        elif admission.refused is not None:
            self.ingress.refused("queue_full")
        elif not event.internal:
            self.ingress.accepted()
        return admission

    def _accept(self, event: MessageEvent, refusable: bool = False, *,
                counted: bool = False) -> Admission:
        """Make ``event`` durable and dispatch it. ``counted``: the caller counted it in
        ``_inflight``, and it is counted out here once done with; a plain submit is done
        with once dispatched, in the section that dispatches it (one lock section less a
        message)."""
        try:
            store = self.store
            key = store.session_key_for(event.source)
            try:
                first = store.accept_event(key, event)
            except BaseException:
                if self.cluster is not None:  # it may have committed: its notice is ours
                    self.cluster.wake()
                raise
            if first != event.event_id:
                return Admission(first, key, duplicate=True)
            crashpoint("after_message_accepted")  # durable, not yet acknowledged
            answer = None
            if self.cluster is not None:
                # Durable in the shared inbox: its shard's owner dispatches it, in arrival
                # order (here now when this node serves the shard, else the owner, woken by
                # the accept's NOTIFY or at its poll).
                try:
                    answer = self.cluster.accepted(key, event.event_id if refusable else None)
                except Exception:  # noqa: BLE001 - it is durable: the next pass takes it
                    log.exception("event=cluster_dispatch_failed session_key=%s", key)
            else:
                with self._lock:
                    if counted and not refusable:  # (admit() still withdraws a refusal)
                        counted = False
                        self._count_out()
                    if event.internal and self._state == "stopping":
                        pass  # no turn starts any more: the inbox replays it next start
                    elif self._gate_open or (event.internal and self._state == "running"):
                        # internal wake-ups bypass the restore gate
                        answer = self._dispatch(key, event, refusable)
                    elif self._state == "running":
                        self._held.append((key, event))
            if answer is None:
                return Admission(event.event_id, key)
            try:
                told = answer.future.get(timeout=self.admit_timeout)
            except (pykka.ActorDeadError, pykka.Timeout):
                # It is durable and will run (or replay after a restart); only its depth is
                # unknown. From now on the actor cannot refuse it (it answers and consumes
                # it instead), unless it has refused it already: then that decision stands.
                refused = answer.ticket.abandon()
                log.warning("no answer from the session actor session_key=%s%s", key,
                            " (it refused the event)" if refused is not None else "")
                if refused is None:
                    return Admission(event.event_id, key)
                told = InboundAnswer(refused, 0)
            if told.refused is not None:
                store.withdraw_event(event.event_id)
            return Admission(event.event_id, key, refused=told.refused,
                             queue_depth=told.queue_depth)
        finally:
            if counted:
                with self._lock:
                    self._count_out()

    def _count_out(self) -> None:
        """A submit past the state check is done with (under ``_lock``)."""
        self._inflight -= 1
        if self._inflight == 0 and self._state == "stopping":
            self._lock.notify_all()  # only stop() waits, once it set "stopping"

    def _submit_internal(self, event: MessageEvent) -> None:
        """A delegation completion: durable even while stopping (replayed next start)."""
        if self._state not in ("running", "stopping"):
            log.warning("internal wake-up dropped: the gateway is stopped")
            return
        try:
            self._accept(event)
        except Exception:  # noqa: BLE001 - the store may be closing under a late completion
            log.exception("internal wake-up could not be recorded")

    def _dispatch(self, key: str, event: MessageEvent,
                  refusable: bool = False) -> _PendingAnswer | None:
        """Tell the session's actor (under ``_lock``, which orders concurrent submits); with
        ``refusable``, ask it instead and return the future of its ``InboundAnswer`` with
        the decision it shares with the asker (``AdmitTicket``)."""
        if self._deleting and key in self._deleting and not self._deleter.spare(key):
            # deleted with the conversation (an operator's delete; retention spares it)
            log.info("event=dropped_with_deleted_conversation session_key=%s event_id=%s",
                     key, event.event_id)
            return None
        if control_action(event) is not None:  # an operator's action, not a message
            operator_actions.execute(self, key, event, self._tracker.add, self._tracker.done)
            return None
        self._tracker.add()
        try:
            if refusable:
                ticket = AdmitTicket()
                future = self._live_router.request(
                    key, Inbound(event, refusable=True, ticket=ticket))
                return _PendingAnswer(future, ticket)
            self._live_router.tell(key, Inbound(event))
            return None
        except Exception:
            self._tracker.done()
            raise

    def _on_turn_succeeded(self, key: str) -> None:
        if key in self._counted:  # the worker waits, so wait_idle covers the file write
            self._supervisor.turn_succeeded(key).get()

    def _start_session_actor(self, key: str) -> pykka.ActorRef:
        # a cluster node's actor belongs to the tenure of its shard it is started under
        tenure = self.cluster.serving_tenure(key) if self.cluster is not None else None
        return _Actor.start(key, self._services, tenure)

    def delete_session(self, session_key: str) -> dict[str, int] | None:
        """Delete the session's conversation whole (issue 39; ``runtime/deletion``): its
        running turn is stopped first, its queue dropped, then one transaction removes its
        routing entry, transcripts (with their search index rows), inbox, ledger and outbox
        rows; the next message starts a new session. The rows removed by table, or ``None``
        for an unknown key. Raises ``HermesActorsError`` when the gateway is not running
        or (a cluster node) does not serve the session, ``ConversationBusy`` when the
        stopped turn did not end in time."""
        with self._lock:
            if self._state != "running":
                raise HermesActorsError("the gateway is not running")
        if self.cluster is not None and not self.cluster.serves(session_key):
            raise HermesActorsError(f"session {session_key!r} is served by another node: "
                                    "send it there (operator_action(key, 'delete'))")
        return self._deleter.delete([session_key]).get(session_key)

    # -- queries --------------------------------------------------------------------------

    def wait_idle(self, timeout: float | None = None) -> bool:
        """True once no turn runs, no queue holds an event, no delegation or delivery runs."""
        return self._tracker.wait_idle(timeout)

    def queue_depth(self, session_key: str) -> int:
        """``queue_depth`` of §8 for a session key (0 when its actor is not live)."""
        if self._router is None:
            return 0
        stats = self._router.ask(session_key, GetStatistics())
        return stats.queue_depth if stats is not None else 0

    def operator_action(self, session_key: str, action: str) -> OperatorOutcome:
        """Run the operator's ``action`` (``operator_actions.ACTIONS``) on the session:
        here when this gateway serves it, else sent to its shard's owner as a control
        event through the inbox (the outcome names the event)."""
        return operator_actions.perform(self, session_key, action)

    def session_entry(self, session_key: str) -> Any:
        """The session's routing entry, or ``None``; on a cluster node, read from the
        database unless this node serves the session (another node may be changing it)."""
        if self.cluster is not None and not self.cluster.serves(session_key):
            found = self.store.stored_entries(session_key)
            return found[0] if found else None
        return self.store.get(session_key)

    def list_sessions(self) -> list[Any]:
        """Every routing entry; on a cluster node, as the database holds them now."""
        if self.cluster is not None:
            return self.store.stored_entries()
        return self.store.list_sessions()

    def session_statistics(self, session_key: str):
        """The live actor's statistics record, or None."""
        return self._router.ask(session_key, GetStatistics()) if self._router else None

    def _running_keys(self) -> list[str]:
        futures = self._live_router.broadcast(GetStatistics())
        out = []
        for f in futures:
            s = _get(f)
            if s is not None and s.running:
                out.append(s.session_key)
        return out

    def _has_active_processes(self, key: str) -> bool:
        if self._services is None or self._router is None:
            return False
        if self._services.delegations.running(key):
            return True
        stats = self._router.ask(key, GetStatistics())
        return bool(stats and (stats.running or stats.queue_depth))

    def stats(self) -> dict[str, Any]:
        """Counters of the whole gateway (a plain dict, JSON-ready)."""
        out: dict[str, Any] = {"state": self._state}
        if self._router is not None and self._services is not None:
            out["live_sessions"] = len(self._router)
            out["actors_started"] = self._router.started
            out["actors_retired"] = self._router.retired
            out["delegations_running"] = self._services.delegations.running()
            out["outstanding"] = self._tracker.count
            out["running_turns"] = self._turns.count
            out["queue_depth_total"] = self._queued.total
            try:  # (stopped: the actors and the store are gone, the counters above stay)
                out["cache"] = self._services.cache.statistics().get()._asdict()
                supervisor = self._supervisor.statistics().get()._asdict()
                supervisor.pop("last_report", None)
                out["supervisor"] = supervisor
                out["store"] = self.store.statistics()._asdict()
            except (pykka.ActorDeadError, StoreError):
                pass
        if self.cluster is not None:
            out["cluster"] = {"node_id": self.store.node_id,
                              **self.cluster.statistics()._asdict()}
            fence = self.store.fence
            if fence is not None:
                out["cluster"]["fence"] = fence.statistics()._asdict()
            if self.pull_adapters is not None:
                out["cluster"]["adapters"] = self.pull_adapters.statistics()._asdict()
        return out

    # -- housekeeping ---------------------------------------------------------------------

    def housekeeping_tick(self) -> None:
        """Run one housekeeping pass now: retire idle actors, retry stalled queues, release
        idle cached agents, the memory-pressure sweep, the ledger sweep, and (when due) the
        routing and ledger prunes."""
        if self._state != "running":
            return
        now = self.clock.monotonic()
        self._schedule.pass_done(now)
        check = IdleCheck(self.config.session_actor_idle_secs, self.config.agent.timeout)
        router = self._live_router
        for future in router.broadcast(check):
            _get(future)
        for future in router.broadcast(Kick()):
            _get(future)
        cache = self._live_services.cache
        cache.sweep_idle().get()
        cache.sweep_memory().get()
        try:  # the releases run off the cache's mailbox: the pass ends with them
            wait_settled(cache, timeout=_SETTLE_TIMEOUT)
        except pykka.Timeout:  # an agent's commit_memory or close hangs: turns go on
            log.warning("housekeeping: the agents' releases are still running after %.0f s",
                        _SETTLE_TIMEOUT)
        # here, not in the supervisor's mailbox: the sends may be slow (stats, the drain
        # and the turns of counted sessions ask the supervisor meanwhile)
        belongs = None if self.cluster is None else self.cluster.belongs()  # (shards here)
        with self._lock:
            if self._state != "running":  # a stop began: its store may close any moment
                return
            self._sweeping = True
        try:
            sent = sweep_ledger(self.store, self._live_services.delivery, belongs)
        finally:
            with self._lock:
                self._sweeping = False
                self._lock.notify_all()
        if sent:
            self._supervisor.count_redelivered(sent)
        if self._schedule.take_prune(now):
            pruned = 0
            if self.cluster is None:  # a node would delete other nodes' sessions' rows
                pruned = self.store.prune_stale_entries(self.config.session_store_max_age_days)
            self.store.ledger_prune(7)
            self.store.inbox_prune(7)
            if pruned:
                log.info("housekeeping pruned=%d routing entries", pruned)
        if self.cluster is None:  # (a node would delete other nodes' sessions)
            self._deleter.sweep(self.config.retention.days)


#: How long a housekeeping pass, or the shutdown, waits for the agents' releases and closes.
_SETTLE_TIMEOUT = 30.0


def _stop_delegations(delegations: DelegationRegistry) -> None:
    """Stop every delegation and give them a few seconds to report back ("interrupted"),
    while the store can still record their completions for the next start."""
    delegations.cancel_all()
    if not delegations.wait_finished(_DELEGATIONS_STOP_TIMEOUT):
        log.warning("stopping with %d delegation(s) still running after %.0f s: a completion "
                    "is recorded while the store is open, and lost after",
                    delegations.running(), _DELEGATIONS_STOP_TIMEOUT)


def _close_agents(cache: Any) -> None:
    """The shutdown's close of every agent, waited for off the cache's mailbox."""
    cache.close_all().get(timeout=_SETTLE_TIMEOUT)
    wait_settled(cache, timeout=_SETTLE_TIMEOUT)


def _get(future: pykka.Future, timeout: float = 10.0) -> Any:
    try:
        return future.get(timeout=timeout)
    except (pykka.ActorDeadError, pykka.Timeout):
        return None
