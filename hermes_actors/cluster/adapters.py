"""``AdapterLeases``: the leases of one node's pull adapters, kept by its
:class:`~hermes_actors.cluster.membership.LeaseManager` in the same rounds as its shards.

A pull adapter (Telegram's ``getUpdates``) runs on one node at a time, so that updates are
fetched once; its lease (``telegram:<bot id>``) has the rules of a shard's — owner, an epoch
that grows at every acquisition, an expiry on the database's clock — and the same *local
deadline*: it counts as held only until ``lease_ttl`` after the statement that granted or
renewed it was sent, which passes before the database's expiry. Unlike shards there is no
balance: any node that has the adapter configured takes it when it is free, expired, not
there yet or its own in the table (a node restarted on the same home), and keeps it while
it renews. Giving it up stops the pull loop first (the listener returns once it has), then
frees the lease, so another node takes it at its next round rather than after
``lease_ttl``.

Kept apart from the manager so that the membership module stays the rounds and the shards;
the manager calls :meth:`AdapterLeases.expire`, :meth:`AdapterLeases.give_up` and
:meth:`AdapterLeases.round` from its round, under its round lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from hermes_actors.cluster.events import AdapterListener
from hermes_actors.cluster.records import ClusterSnapshot, LeaseStore

__all__ = ["AdapterLeases"]

log = logging.getLogger("hermes_actors.cluster")


@dataclass
class _Tenure:
    epoch: int
    #: Monotonic time until which the lease is surely still ours.
    deadline: float


class AdapterLeases:
    """The adapter leases of node ``node_id`` for the adapters ``names`` it has configured.
    ``call(fn, *args)`` runs a listener callback (the manager's, which logs and swallows a
    host's failure)."""

    def __init__(self, store: LeaseStore, node_id: str, names: Iterable[str], *,
                 lease_ttl: float, monotonic: Callable[[], float],
                 listener: AdapterListener | None,
                 call: Callable[..., None]) -> None:
        self.store = store
        self.node_id = node_id
        #: The pull adapters this node may run (lease names), sorted.
        self.names = tuple(sorted(set(names)))
        self.listener = listener or AdapterListener()
        self.lease_ttl = lease_ttl
        self._monotonic = monotonic
        self._call = call
        self._lock = threading.Lock()
        self._held: dict[str, _Tenure] = {}
        #: Given up for good (the node stops): none is taken again.
        self.off = False
        #: Set whenever a give-up or a halt has emptied what is held.
        self.gone = threading.Event()

    def __bool__(self) -> bool:
        return bool(self._held)

    def held(self) -> dict[str, int]:
        """The leases held now (name -> epoch), before their local deadlines."""
        now = self._monotonic()
        with self._lock:
            return {n: t.epoch for n, t in self._held.items() if t.deadline > now}

    def time_left(self, name: str, epoch: int) -> float:
        """Seconds until the local deadline of ``name``'s tenure ``epoch`` (0 when it is
        not held under that epoch)."""
        with self._lock:
            tenure = self._held.get(name)
            if tenure is None or tenure.epoch != epoch:
                return 0.0
            return max(0.0, tenure.deadline - self._monotonic())

    # -- from the manager's round ---------------------------------------------------------

    def expire(self, lost: dict[str, int]) -> None:
        """Forget the leases whose local deadline passed (``expired``)."""
        now = self._monotonic()
        lost.update(gone := self._pop(lambda t: t.deadline <= now))
        self._tell_lost(gone, "expired")

    def give_up(self, lost: dict[str, int]) -> None:
        """Stop every pull loop (the listener returns once it has), then free the leases.
        First in a round, before anything else needs the database: a node stopping during
        an outage stops pulling at once (its leases then expire)."""
        gone = self._pop(lambda t: True)
        try:
            self._tell_lost(gone, "released")
            lost.update(gone)
            if gone:
                self.store.release_adapters(self.node_id, gone)
        finally:
            self.gone.set()

    def halt(self) -> None:
        """Forget every lease without touching the store (``halted``): they expire."""
        self._tell_lost(self._pop(lambda t: True), "halted")
        self.gone.set()

    def round(self, snap: ClusterSnapshot, lost: dict[str, int], *, taking: bool,
              halted: Callable[[], bool]) -> tuple[str, ...]:
        """Renew the leases held (a refused renewal loses one at once: ``fenced``); then,
        when ``taking``, take the configured ones that are free, expired, not there yet,
        or this node's in the table but not held here. Returns those gained."""
        with self._lock:
            due = {n: t.epoch for n, t in self._held.items()}
        if due:
            sent = self._monotonic()
            renewed = self.store.renew_adapters(self.node_id, due, self.lease_ttl)
            refused: dict[str, int] = {}
            with self._lock:
                for name, epoch in due.items():
                    tenure = self._held.get(name)
                    if tenure is None or tenure.epoch != epoch:
                        continue
                    if name in renewed:
                        tenure.deadline = sent + self.lease_ttl
                    else:
                        del self._held[name]
                        refused[name] = epoch
            lost.update(refused)
            self._tell_lost(refused, "fenced")
        if not taking or self.off:
            return ()
        rows = {row.name: row for row in snap.adapters}
        with self._lock:
            mine = set(self._held)
        wanted = [name for name in self.names if name not in mine and (
            (row := rows.get(name)) is None or row.holder_at(snap.now) is None
            or row.owner == self.node_id)]
        if not wanted:
            return ()
        sent = self._monotonic()
        taken = self.store.acquire_adapters(self.node_id, wanted, self.lease_ttl)
        gained: dict[str, int] = {}
        with self._lock:
            if halted():
                return ()  # their leases simply expire
            for lease in taken:
                self._held[lease.name] = _Tenure(lease.epoch, sent + self.lease_ttl)
                gained[lease.name] = lease.epoch
        if self.off:  # given up meanwhile: freed at the next round, never polled
            return ()
        for name, epoch in sorted(gained.items()):
            log.info("event=cluster_adapter_gained node=%s adapter=%s epoch=%d",
                     self.node_id, name, epoch)
            self._call(self.listener.gained, name, epoch)
        return tuple(sorted(gained))

    def _pop(self, which: Callable[[_Tenure], bool]) -> dict[str, int]:
        with self._lock:
            gone = {n: t.epoch for n, t in self._held.items() if which(t)}
            for name in gone:
                del self._held[name]
        return gone

    def _tell_lost(self, leases: dict[str, int], reason: str) -> None:
        for name, epoch in sorted(leases.items()):
            log.info("event=cluster_adapter_lost node=%s adapter=%s epoch=%d reason=%s",
                     self.node_id, name, epoch, reason)
            self._call(self.listener.lost, name, epoch, reason)
