"""``start_node`` makes a started gateway a cluster node; ``NodeSessions`` is what its
:class:`~.shard_host.ShardHost` asks of the gateway — recovery of one shard's sessions,
their inbox, their actors started, drained and stopped — carried out with the gateway's
own parts (the supervisor's recovery with a key filter, the router, the drain of
``stop()`` restricted to some keys).

Kept out of :mod:`.gateway` so that the facade stays the lifecycle of one process; this is
the lifecycle of one shard inside it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Container
from typing import Any

import pykka

from hermes_actors.cluster.shards import ShardSet
from hermes_actors.errors import StoreUnavailableError
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.ids import new_id
from hermes_actors.runtime.crash import crashpoint
from hermes_actors.runtime.pull_adapters import PullAdapters, pull_adapters
from hermes_actors.runtime.recovery import RecoveryReport
from hermes_actors.runtime.session_actor import (
    DrainResult,
    GetStatistics,
    InterruptTurn,
    StopAccepting,
)
from hermes_actors.runtime.shard_host import ShardHost
from hermes_actors.store.fencing import ShardFence
from hermes_actors.store.ops import NotifyOutbox, NotifyShard

__all__ = ["RESET_WAIT", "NodeSessions", "handover_timeout", "start_node"]

log = logging.getLogger("hermes_actors.cluster")

#: Why the turns of a shard the node lost are interrupted (nothing of them is recorded).
SHARD_LOST = "shard_lost"
#: Seconds between looks at the turns a handover waits for.
_DRAIN_LOOK = 0.05
#: Seconds interrupted turns get to end before a handover goes on without them.
INTERRUPT_GRACE = 10.0
#: Seconds a stop or a handover waits for the ``/new`` resets under way.
RESET_WAIT = 10.0
#: Seconds between looks at the deliveries a handover waits for (a read of the ledger).
_SETTLE_LOOK = 0.2


def handover_timeout(config: Any) -> float:
    """The longest a handover waits for its shard's wind-down: the drain's
    ``restart_drain_timeout``, then :data:`INTERRUPT_GRACE`, plus ``lease_ttl``."""
    return config.restart_drain_timeout + INTERRUPT_GRACE + config.cluster.lease_ttl


def start_node(gateway: Any, lock: Any) -> ShardHost:
    """Make a started gateway a cluster node: its store's fence and inbox notices, its
    :class:`~.shard_host.ShardHost` and lease manager, running (returned)."""
    from hermes_actors.cluster.membership import LeaseManager
    from hermes_actors.store.backends.postgres.leases import PgLeases
    from hermes_actors.store.backends.postgres.listen import InboxNotices

    config, store = gateway.config, gateway.store
    cluster, dsn = config.cluster, str(config.store.dsn)
    # New inbox rows are announced (NOTIFY) to the shard's owner; the poll, every
    # lease_ttl, is the net under lost notifications.
    host = ShardHost(NodeSessions(gateway), lock, cluster.shards,
                     poll_interval=cluster.lease_ttl)
    # Replies appended here are announced too (NOTIFY), so a long poll of the chat waiting
    # on another node wakes; this node's own outboxes hear the others'.
    outboxes = _outboxes(gateway.adapters)
    origin = new_id()

    def outbox_heard(platform: str | None, chat_id: str | None) -> None:
        for outbox in outboxes:
            if platform is None:
                outbox.note_unknown()
            else:
                outbox.note_append(platform, chat_id)

    host.notices = InboxNotices(dsn, host.notice, wait=cluster.heartbeat,
                                on_outbox=outbox_heard if outboxes else None, origin=origin)
    # the payload names this process: its own accepts' notices are skipped (it reads the
    # inbox after each accept itself: ShardHost.accepted)
    store.announce = lambda key: NotifyShard(host.shard_of(key), origin)
    store.outbox_notice = lambda op: NotifyOutbox(op.platform, op.chat_id, origin)
    # Adapters that pull from their platform (Telegram) poll only while this node holds
    # their lease; sending through them stays on every node.
    pulls = PullAdapters(pull_adapters(gateway.adapters), gateway.submit,
                         checkpoint=crashpoint)
    manager = LeaseManager.from_config(
        PgLeases.open(dsn), store.node_id, cluster, listener=host,
        monotonic=gateway.clock.monotonic,
        # a handover drains for restart_drain_timeout, then interrupts (INTERRUPT_GRACE)
        handover_timeout=handover_timeout(config),
        adapters=pulls.adapters, adapter_listener=pulls,
        address=getattr(gateway, "advertised_address", None))
    pulls.bind(manager.adapter_time_left)
    gateway.pull_adapters = pulls

    def fenced(shard: int, epoch: int | None) -> None:
        # a write for the shard was refused: drop it at once (its actors stop)
        log.warning("event=cluster_write_fenced shard=%d epoch=%s", shard, epoch)
        if epoch is not None:
            manager.drop(shard, epoch)

    store.fence = ShardFence(store.node_id, cluster.shards, host.tenure, on_refused=fenced)
    host.start(manager)
    log.info("event=cluster_node node=%s shards=%d: each shard is recovered when gained",
             store.node_id, cluster.shards)
    return host


def _outboxes(adapters: Any) -> list[Any]:
    """The outboxes the node's adapters append to (``OutboxAdapter.outbox``), each once."""
    found: dict[int, Any] = {}
    for adapter in adapters:
        outbox = getattr(adapter, "outbox", None)
        if callable(getattr(outbox, "note_append", None)):
            found.setdefault(id(outbox), outbox)
    return list(found.values())


class NodeSessions:
    """The :class:`~.shard_host.ShardGateway` of ``gateway`` (a started
    :class:`~.gateway.Gateway`; not imported here, which would make a cycle)."""

    def __init__(self, gateway: Any) -> None:
        self._gw = gateway

    def recover_sessions(self, belongs: Callable[[str], bool]) -> tuple[RecoveryReport, list]:
        """Stop what is left of an earlier tenure's actors, re-read the sessions' routing
        rows, then the supervisor's recovery of them."""
        gw = self._gw
        self._usable()
        # actors still here are an earlier tenure's (bound to it, their writes are refused):
        # the new tenure starts its own
        self.stop_sessions(belongs)
        gw.store.refresh_entries(belongs)
        recovered = gw._supervisor.recover_shard(belongs).get()
        # the sessions with a (shared) stuck-loop count: a successful turn resets theirs
        gw._counted = gw._supervisor.counted_keys().get()
        return recovered

    def pending_inbox(self, shards: ShardSet) -> list[tuple[str, MessageEvent]]:
        """The unconsumed inbox events of ``shards``' sessions, in arrival order."""
        self._usable()
        return self._gw.store.pending_inbox(shards)

    def pending_events(self, shards: ShardSet, known: Container[str]
                       ) -> list[tuple[str, str, MessageEvent | None]]:
        """:meth:`pending_inbox` with the events of ``known`` ids left unparsed."""
        self._usable()
        return self._gw.store.pending_events(shards, known)

    def _usable(self) -> None:
        """Refuse at once during an outage of the database server: the gateway is being
        replaced (``run``), and a read would wait for the pool's timeout (10 s), holding
        up the stop and with it the replacement's start (the database restart test
        found the node rejoining 10 s late)."""
        if self._gw.outage.is_set():
            raise StoreUnavailableError("the session database is in an outage: this "
                                        "gateway is being replaced")

    def dispatch(self, key: str, event: MessageEvent, refusable: bool) -> Any:
        """Hand ``event`` to its actor (the gateway's lock is held)."""
        return self._gw._dispatch(key, event, refusable)

    def stop_sessions(self, belongs: Callable[[str], bool]) -> int:
        """Unregister the sessions' actors, interrupt their turns and stop them, and forget
        their cached agents (another node continues these sessions)."""
        gw = self._gw
        gone = gw._live_router.remove_where(belongs)
        for key, ref in gone:
            try:
                ref.ask(InterruptTurn(SHARD_LOST), block=False)
                ref.stop(block=False)
            except pykka.ActorDeadError:
                pass
            gw._live_services.cache.discard(key)
        return len(gone)

    def drain_sessions(self, belongs: Callable[[str], bool]) -> None:
        """The drain of ``stop()`` for these sessions: no new turn starts, running turns
        get ``restart_drain_timeout`` seconds, the rest are interrupted and marked for
        resumption (``restart_timeout``), as a restart does."""
        gw = self._gw
        router = gw._live_router
        keys = [key for key, _ in router.live() if belongs(key)]
        running = [key for key in keys if router.ask(key, StopAccepting())]
        deadline = time.monotonic() + gw.config.restart_drain_timeout
        running = self._wait(running, deadline)
        interrupted = [key for key in running
                       if router.ask(key, InterruptTurn("restart_timeout"))]
        self._wait(interrupted, time.monotonic() + INTERRUPT_GRACE)
        # a /new under way is answered (its inbox row consumed) before the actors go: cut
        # off, the new owner would replay it and reset the session a second time
        if self._wait(keys, time.monotonic() + RESET_WAIT, _resetting):
            log.warning("handing over with a /new still resetting its session")
        unfinished = [key for key in interrupted
                      if router.ask(key, DrainResult()) != "completed"]
        if unfinished and gw.store.outage is None:
            gw._supervisor.drain_finished(unfinished, "restart_timeout").get()

    def settle_deliveries(self, belongs: Callable[[str], bool], started: float) -> bool:
        """Wait until no delivery of these sessions is in flight on this node: no notice
        queued or being sent, no ledger row this boot is attempting (a rate-limit wait
        holds one up to ``MAX_RETRY_WAIT``); at most until :func:`handover_timeout` after
        ``started`` (``time.monotonic()``). True when none is. The new owner's ledger
        sweep would send such a row again, prefixed: the user would have it twice."""
        deadline = started + handover_timeout(self._gw.config)
        while self._sending(belongs):
            if time.monotonic() >= deadline:
                return False
            time.sleep(_SETTLE_LOOK)
        return True

    def _sending(self, belongs: Callable[[str], bool]) -> bool:
        gw = self._gw
        if gw._live_services.notices.sending(belongs):
            return True
        if gw.outage.is_set():  # no read in an outage (``_usable``)
            return False
        owner = tuple(gw.store.ledger_owner)
        return any((row["owner_node"], row["owner_boot"]) == owner
                   and belongs(row["session_key"])
                   for row in gw.store.ledger_rows("attempting"))

    def _wait(self, keys: list[str], deadline: float,
              busy: Callable[[Any], bool] | None = None) -> list[str]:
        """Wait until none of ``keys`` runs a turn (is ``busy``, given its statistics) or
        ``deadline`` passes; those still running."""
        router = self._gw._live_router
        busy = busy or _running
        while True:
            keys = [key for key in keys if busy(router.ask(key, GetStatistics()))]
            if not keys or time.monotonic() >= deadline:
                return keys
            time.sleep(_DRAIN_LOOK)


def _running(stats: Any) -> bool:
    return stats is not None and bool(stats.running)


def _resetting(stats: Any) -> bool:
    return stats is not None and bool(stats.resetting)
