"""``LeaseManager``: one node's membership of the cluster, round after round.

Every ``heartbeat`` seconds (or when woken) a round: announce the node (heartbeat), read a
snapshot of the lease table, ask :func:`~hermes_actors.cluster.balance.plan` what to do,
then drop what was lost, hand over what goes to others, renew what stays, release what was
handed over and acquire what is due. The host learns of every change through a
:class:`ShardListener`, called on the manager's greenlet (a thread without gevent): it must
not block there, only hand the news to its actors.

Why a node can trust what :meth:`LeaseManager.owned` says: a lease is counted as held only
until a *local deadline* on the node's monotonic clock, ``lease_ttl`` after the moment the
statement that granted or renewed it was *sent*. The store set the lease's expiry from its
own clock no earlier than that moment, so the local deadline passes first (as long as the
two clocks run at the same rate; their absolute values are never compared). A node that
was paused, or cut off from the database, stops counting its shards as its own before any
other node may take them, even before its next round runs. What slips past that (a clock
running slow, a write already in flight) the epoch fences: the next milestone conditions
every write of a shard's session on (owner, epoch) in the same transaction.

A lease the table no longer gives this node (another owner or epoch, a refused renewal, a
write the host found fenced: :meth:`LeaseManager.drop`) is dropped at once. Giving a shard
away is a handover: the listener is asked to wind the shard down and calls ``done`` when it
has; the lease is renewed meanwhile and released after (``handover_timeout`` bounds the
wait). :meth:`LeaseManager.stop` hands every shard over that way and removes the node.

**Pull adapters** (``adapters``: names such as ``telegram:<bot id>``) have leases of their
own, renewed in the same rounds with the same local deadlines: any live node that has the
adapter configured takes it when it is free or expired, and keeps it while it renews. The
:class:`AdapterListener` runs the adapter's pull loop only while the lease is held;
:meth:`LeaseManager.release_adapters` (and :meth:`LeaseManager.stop`) stop that loop, then
free the lease, so another node takes it at its next round instead of after ``lease_ttl``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hermes_actors._green import spawn
from hermes_actors.cluster.adapters import AdapterLeases
from hermes_actors.cluster.balance import plan
from hermes_actors.cluster.events import AdapterListener, ShardListener, Tick, shard_ranges
from hermes_actors.cluster.records import ClusterSnapshot, LeaseStore, NodeAnnouncement
from hermes_actors.cluster.shards import check_shard_count
from hermes_actors.config import ClusterConfig
from hermes_actors.errors import ConfigError
from hermes_actors.model.ids import new_id

__all__ = ["LeaseManager"]

log = logging.getLogger("hermes_actors.cluster")

#: Seconds between prunes of long-dead nodes' rows.
_FORGET_EVERY = 60.0


@dataclass
class _Held:
    epoch: int
    #: Monotonic time until which the lease is surely still ours.
    deadline: float
    #: Monotonic time the handover started, while one runs.
    handover_since: float | None = None
    #: The host has handed the shard over: release it.
    ready: bool = False


class LeaseManager:
    """Node ``node_id``'s leases in ``store`` (see the module docstring).

    Drive it with :meth:`start` (a greenlet under gevent, else a daemon thread, one round
    every ``heartbeat`` seconds) or call :meth:`join` once and then :meth:`tick` yourself
    (tests). ``monotonic`` is the clock of the local deadlines.
    """

    def __init__(self, store: LeaseStore, node_id: str, *, shards: int, lease_ttl: float,
                 heartbeat: float, listener: ShardListener | None = None,
                 monotonic: Callable[[], float] = time.monotonic, address: str | None = None,
                 handover_timeout: float | None = None, forget_after: float = 3600.0,
                 adapters: Iterable[str] = (),
                 adapter_listener: AdapterListener | None = None) -> None:
        if not 0 < heartbeat < lease_ttl:
            raise ValueError("heartbeat must be positive and shorter than lease_ttl")
        self.store = store
        self.node_id = node_id
        self.shards = check_shard_count(shards)
        self.lease_ttl = float(lease_ttl)
        self.heartbeat = float(heartbeat)
        #: This membership's id (a restart of the same node gets a new one).
        self.boot_id = new_id()
        self.listener = listener or ShardListener()
        self.handover_timeout = handover_timeout
        self.forget_after = forget_after
        self._monotonic = monotonic
        self._address = address
        self._held: dict[int, _Held] = {}
        #: The leases of the pull adapters this node may run (``cluster/adapters``).
        self.adapter_leases = AdapterLeases(store, node_id, adapters, lease_ttl=self.lease_ttl,
                                            monotonic=monotonic, listener=adapter_listener,
                                            call=self._call)
        self._state = threading.Lock()
        self._rounds = threading.Lock()
        self._wake = threading.Event()
        self._finished = threading.Event()
        self._joined = self._leaving = self._left = self._halted = self._running = False
        self._last_forget = monotonic()
        self._error_streak = 0

    @classmethod
    def from_config(cls, store: LeaseStore, node_id: str, config: ClusterConfig,
                    **kwargs: Any) -> LeaseManager:
        """A manager with the ``cluster`` section's shards, lease_ttl and heartbeat."""
        return cls(store, node_id, shards=config.shards, lease_ttl=config.lease_ttl,
                   heartbeat=config.heartbeat, **kwargs)

    # -- what the host asks ---------------------------------------------------------------

    def owned(self) -> dict[int, int]:
        """The shards held now (shard -> epoch): before their local deadline, handovers in
        progress included, those the host has handed over (waiting for release) not."""
        now = self._monotonic()
        with self._state:
            return {s: h.epoch for s, h in self._held.items()
                    if h.deadline > now and not h.ready}

    def owns(self, shard: int, epoch: int | None = None) -> bool:
        """Whether ``shard`` is held now (under ``epoch``, when given)."""
        held = self.tenure(shard)
        return held is not None and (epoch is None or held == epoch)

    def tenure(self, shard: int) -> int | None:
        """``owned().get(shard)``, without building the whole table (asked several times a
        turn: the fence, the host's dispatch)."""
        now = self._monotonic()
        with self._state:
            held = self._held.get(shard)
            if held is None or held.deadline <= now or held.ready:
                return None
            return held.epoch

    def holds(self, shard: int, epoch: int) -> bool:
        """Whether tenure ``epoch`` of ``shard`` is still in the manager's table, whatever
        its local deadline: one that passed may yet be renewed (a renewal sent before it,
        answered after), under the same epoch and with no new ``gained``; once the tenure
        goes, ``lost`` follows."""
        with self._state:
            held = self._held.get(shard)
            return held is not None and held.epoch == epoch

    def drop(self, shard: int, epoch: int) -> bool:
        """The host found ``shard``'s tenure ``epoch`` fenced (a write refused): forget it
        at once; ``lost(..., "fenced")`` follows. False when it was not held."""
        gone = self._pop(lambda s, held: s == shard and held.epoch == epoch)
        self._tell_lost(gone, "fenced")
        return bool(gone)

    @property
    def adapters(self) -> tuple[str, ...]:
        """The pull adapters this node may run (lease names)."""
        return self.adapter_leases.names

    @property
    def adapter_listener(self) -> AdapterListener:
        """Who runs the pull adapters' loops."""
        return self.adapter_leases.listener

    def adapters_held(self) -> dict[str, int]:
        """The adapter leases held now (name -> epoch), before their local deadlines."""
        return self.adapter_leases.held()

    def adapter_time_left(self, name: str, epoch: int) -> float:
        """Seconds until the local deadline of adapter ``name``'s tenure ``epoch`` (0 when
        it is not held under that epoch): how long its pull loop may still run."""
        return self.adapter_leases.time_left(name, epoch)

    def release_adapters(self, timeout: float | None = None) -> bool:
        """Stop running the pull adapters for good (a node about to stop): each held lease
        is given up (its pull loop stopped, then the lease freed) at the next round, run
        now; none is taken again. Waits up to ``timeout`` seconds; True once none is
        held."""
        leases = self.adapter_leases
        leases.gone.clear()
        leases.off = True
        if not self._joined or self._left or self._halted:
            return not leases
        if self._running:
            if leases:
                self.wake()
                leases.gone.wait(timeout)
        else:
            self.tick()
        return not leases

    def wake(self) -> None:
        """Run the next round now instead of at the next heartbeat."""
        self._wake.set()

    # -- joining, running, stopping -------------------------------------------------------

    def join(self) -> None:
        """Create the cluster if it does not exist, or check its shard count, and announce
        the node. A node configured with another shard count than the cluster's refuses
        (:class:`ConfigError`)."""
        recorded = self.store.ensure_cluster(self.shards, self.node_id)
        if recorded != self.shards:
            raise ConfigError(
                f"config key 'cluster.shards': this node is configured with {self.shards} "
                f"shards, but the cluster in {self.store.where} was created with {recorded}; "
                f"the shard count is fixed when the first node creates the cluster: set "
                f"cluster.shards: {recorded}")
        self.store.heartbeat(self._announcement())
        self._joined = True
        log.info("event=cluster_join node=%s shards=%d store=%s", self.node_id, self.shards,
                 self.store.where)

    def start(self) -> None:
        """:meth:`join` (unless joined), then run rounds until :meth:`stop` (the first one
        at once)."""
        if self._running:
            raise RuntimeError("the lease manager is already running")
        if not self._joined:
            self.join()
        self._running = True
        self._finished.clear()
        spawn(self._serve, f"cluster-{self.node_id[:8]}")

    def stop(self, *, release: bool = True, timeout: float | None = None) -> bool:
        """Leave the cluster. With ``release``: hand every shard over and release it, then
        remove the node's row (rounds go on meanwhile, at most ``timeout`` seconds; past
        that it halts). Without: :meth:`halt`. True when the node left cleanly."""
        if not self._joined or self._left:
            return True
        if self._halted:
            return False
        if not release:
            self.halt()
            return False
        self._leaving = True
        if self._running:
            self.wake()
            finished = self._finished.wait(timeout)
        else:
            self._serve(None if timeout is None else time.monotonic() + timeout)
            finished = self._left
        if not (finished and self._left):
            log.warning("event=cluster_leave_timeout node=%s", self.node_id)
            self.halt()
            return False
        return True

    def halt(self) -> None:
        """Stop at once without touching the store (as a crash would): every shard is lost
        to the host (``halted``), its lease expires after ``lease_ttl``."""
        self._halted = True
        self.wake()
        self._tell_lost(self._pop(lambda s, held: True), "halted")
        self.adapter_leases.halt()

    def _serve(self, until: float | None = None) -> None:
        try:
            while not self._halted and not self._left:
                self._wake.clear()
                self.tick()
                if self._halted or self._left:
                    break
                if until is not None and time.monotonic() >= until:
                    break
                wait = self.heartbeat if until is None else max(
                    0.0, min(self.heartbeat, until - time.monotonic()))
                self._wake.wait(wait)
        finally:
            self._running = False
            self._finished.set()

    # -- one round ------------------------------------------------------------------------

    def tick(self) -> Tick:
        """One round (see the module docstring); never raises for a store that cannot be
        reached: the round reports it in ``error`` and the next one tries again."""
        if not self._joined:
            raise RuntimeError("join() the cluster before running rounds")
        with self._rounds:
            if self._halted or self._left:
                return Tick()
            lost: dict[int, int] = {}
            released: list[int] = []
            adapters_lost: dict[str, int] = {}
            try:
                return self._round(lost, released, adapters_lost)
            except Exception as exc:  # noqa: BLE001 - a round must never end the loop
                self._error_streak += 1
                level = logging.WARNING if self._error_streak == 1 else logging.DEBUG
                log.log(level, "event=cluster_round_failed node=%s error=%s", self.node_id,
                        exc)
                return Tick(lost=tuple(sorted(lost)), released=tuple(released),
                            adapters_lost=tuple(sorted(adapters_lost)),
                            error=str(exc) or type(exc).__name__)

    def _round(self, lost: dict[int, int], released: list[int],
               adapters_lost: dict[str, int]) -> Tick:
        self._expire(lost)
        self.adapter_leases.expire(adapters_lost)
        if self._leaving or self.adapter_leases.off:
            self.adapter_leases.give_up(adapters_lost)
        self.store.heartbeat(self._announcement())
        snap = self.store.snapshot()
        if snap.shards is None:  # the cluster's tables were lost and came back empty
            self.store.ensure_cluster(self.shards, self.node_id)
            snap = self.store.snapshot()
        if snap.shards != self.shards:
            lost.update(gone := self._pop(lambda s, held: True))
            self._tell_lost(gone, "fenced")
            raise RuntimeError(f"the cluster in {self.store.where} has "
                               f"{snap.shards} shards now, not {self.shards}")
        with self._state:
            held = {s: h.epoch for s, h in self._held.items()}
        decided = plan(self.node_id, self.shards, held, snap.nodes, snap.leases, snap.now,
                       leaving=self._leaving)
        self._forget(decided.lost, lost, snap)
        self._begin_handovers(decided.release)
        renewed = self._renew(lost)
        released.extend(self._release(decided.disown))
        gained = () if self._leaving else self._acquire(decided.acquire)
        adapters_gained = self.adapter_leases.round(
            snap, adapters_lost, taking=not self._leaving, halted=lambda: self._halted)
        if self._leaving and not self._held and not self.adapter_leases and not self._halted:
            self.store.leave(self.node_id, self.boot_id)
            self._left = True
            log.info("event=cluster_leave node=%s", self.node_id)
        self._prune()
        self._error_streak = 0
        return Tick(gained=gained, lost=tuple(sorted(lost)), released=tuple(released),
                    renewed=renewed, adapters_gained=adapters_gained,
                    adapters_lost=tuple(sorted(adapters_lost)))

    def _announcement(self) -> NodeAnnouncement:
        return NodeAnnouncement(self.node_id, self.boot_id, self.lease_ttl,
                                socket.gethostname(), os.getpid(), self._address,
                                self._leaving)

    def _pop(self, which: Callable[[int, _Held], bool]) -> dict[int, int]:
        """Forget the held shards ``which`` picks; returns them (shard -> epoch)."""
        with self._state:
            gone = {s: h.epoch for s, h in self._held.items() if which(s, h)}
            for shard in gone:
                del self._held[shard]
        return gone

    def _expire(self, lost: dict[int, int]) -> None:
        now = self._monotonic()
        lost.update(gone := self._pop(lambda s, held: held.deadline <= now))
        self._tell_lost(gone, "expired")

    def _forget(self, shards: frozenset[int], lost: dict[int, int],
                snap: ClusterSnapshot) -> None:
        rows = {row.shard: row for row in snap.leases}
        gone: dict[str, dict[int, int]] = {"expired": {}, "fenced": {}}
        with self._state:
            for shard in shards:
                held = self._held.pop(shard, None)
                if held is None:
                    continue
                row = rows.get(shard)
                ours = row is not None and row.owner == self.node_id and row.epoch == held.epoch
                gone["expired" if ours else "fenced"][shard] = held.epoch
        for reason, dropped in gone.items():
            lost.update(dropped)
            self._tell_lost(dropped, reason)

    def _begin_handovers(self, shards: Mapping[int, int]) -> None:
        now = self._monotonic()
        asked: list[tuple[int, int]] = []
        with self._state:
            for shard, held in self._held.items():
                if shard in shards and held.handover_since is None:
                    held.handover_since = now
                    asked.append((shard, held.epoch))
                elif (held.handover_since is not None and not held.ready
                      and self.handover_timeout is not None
                      and now - held.handover_since >= self.handover_timeout):
                    log.warning("event=cluster_handover_timeout node=%s shard=%d",
                                self.node_id, shard)
                    held.ready = True
        for shard, epoch in asked:
            def done(shard: int = shard, epoch: int = epoch) -> None:
                self._handover_done(shard, epoch)

            self._call(self.listener.handover, shard, epoch, done)

    def _handover_done(self, shard: int, epoch: int) -> None:
        with self._state:
            held = self._held.get(shard)
            if held is None or held.epoch != epoch:
                return
            held.ready = True
        self.wake()

    def _renew(self, lost: dict[int, int]) -> int:
        with self._state:
            due = {s: h.epoch for s, h in self._held.items() if not h.ready}
        if not due:
            return 0
        sent = self._monotonic()
        renewed = self.store.renew(self.node_id, due, self.lease_ttl)
        refused: dict[int, int] = {}
        with self._state:
            for shard, epoch in due.items():
                held = self._held.get(shard)
                if held is None or held.epoch != epoch:
                    continue
                if shard in renewed:
                    held.deadline = sent + self.lease_ttl
                else:
                    del self._held[shard]
                    refused[shard] = epoch
        lost.update(refused)
        self._tell_lost(refused, "fenced")
        return len(due) - len(refused)

    def _release(self, disown: Mapping[int, int]) -> list[int]:
        with self._state:
            ready = {s: h.epoch for s, h in self._held.items() if h.ready}
        stray = dict(disown)
        if not ready and not stray:
            return []
        freed = self.store.release(self.node_id, {**stray, **ready})
        with self._state:
            for shard in ready:
                self._held.pop(shard, None)
        self._tell_lost(ready, "released")
        return sorted(set(ready) | (freed & set(stray)))

    def _acquire(self, shards: frozenset[int]) -> tuple[int, ...]:
        if not shards or self._halted:
            return ()
        sent = self._monotonic()
        taken = self.store.acquire(self.node_id, sorted(shards), self.lease_ttl)
        gained: dict[int, int] = {}
        with self._state:
            if self._halted:
                return ()  # their leases simply expire
            for lease in taken:
                self._held[lease.shard] = _Held(lease.epoch, sent + self.lease_ttl)
                gained[lease.shard] = lease.epoch
        if gained:
            log.info("event=cluster_shards_gained node=%s shards=%s", self.node_id,
                     shard_ranges(gained))
        for shard, epoch in sorted(gained.items()):
            self._call(self.listener.gained, shard, epoch)
        return tuple(sorted(gained))

    def _prune(self) -> None:
        now = self._monotonic()
        if now - self._last_forget < _FORGET_EVERY:
            return
        self._last_forget = now
        self.store.forget_nodes(max(self.forget_after, self.lease_ttl))

    def _tell_lost(self, shards: dict[int, int], reason: str) -> None:
        if shards:
            log.info("event=cluster_shards_lost node=%s reason=%s shards=%s", self.node_id,
                     reason, shard_ranges(shards))
        for shard, epoch in sorted(shards.items()):
            self._call(self.listener.lost, shard, epoch, reason)

    def _call(self, fn: Callable[..., None], *args: object) -> None:
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - the host's bug must not end the membership
            log.exception("event=cluster_listener_failed node=%s", self.node_id)

