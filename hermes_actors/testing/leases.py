"""``MemoryLeases``: the lease table in memory, with the rules of the PostgreSQL one.

A :class:`~hermes_actors.cluster.records.LeaseStore` for tests of the
:class:`~hermes_actors.cluster.membership.LeaseManager` and of the balance rule that need
no server: many managers on one instance behave as many nodes on one database, on a
``clock`` the test drives (its ``time()`` is the store's clock). Every operation holds one
lock, as each of the PostgreSQL statements is atomic; the rules are written out in
:mod:`hermes_actors.cluster.records` and checked against the real table by the same tests.
``fail`` makes every operation raise (a database that cannot be reached).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from hermes_actors.cluster.records import (
    Acquired,
    AdapterAcquired,
    AdapterLeaseRow,
    ClusterSnapshot,
    LeaseRow,
    NodeAnnouncement,
    NodeRow,
)
from hermes_actors.errors import StoreUnavailableError

__all__ = ["MemoryLeases"]


class MemoryLeases:
    """The lease table of one in-memory "database" (see the module docstring)."""

    where = "memory"

    def __init__(self, clock: Any) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.shards: int | None = None
        self.nodes: dict[str, NodeRow] = {}
        self.leases: dict[int, LeaseRow] = {}
        #: When set, every operation raises :class:`StoreUnavailableError`.
        self.fail = False
        #: Every lease acquired, in order: (shard, owner, epoch).
        self.acquisitions: list[tuple[int, str, int]] = []
        #: The pull adapters' leases, by name.
        self.adapters: dict[str, AdapterLeaseRow] = {}

    def _now(self) -> float:
        if self.fail:
            raise StoreUnavailableError("cannot reach the store database memory")
        return float(self._clock.time())

    def ensure_cluster(self, shards: int, node_id: str) -> int:
        with self._lock:
            self._now()
            if self.shards is None:
                self.shards = shards
            for shard in range(self.shards):
                self.leases.setdefault(shard, LeaseRow(shard, None, 0))
            return self.shards

    def heartbeat(self, node: NodeAnnouncement) -> None:
        with self._lock:
            now = self._now()
            old = self.nodes.get(node.node_id)
            started = old.started_at if old is not None and old.boot_id == node.boot_id else now
            self.nodes[node.node_id] = NodeRow(node.node_id, node.boot_id, started, now,
                                               node.lease_ttl, node.host, node.pid,
                                               node.address, node.leaving)

    def snapshot(self) -> ClusterSnapshot:
        with self._lock:
            now = self._now()
            return ClusterSnapshot(now, self.shards, tuple(sorted(
                self.nodes.values(), key=lambda n: n.node_id)), tuple(
                self.leases[s] for s in sorted(self.leases)), tuple(
                self.adapters[n] for n in sorted(self.adapters)))

    def acquire(self, node_id: str, shards: Iterable[int], ttl: float) -> list[Acquired]:
        with self._lock:
            now = self._now()
            taken = []
            for shard in sorted(set(shards)):
                row = self.leases.get(shard)
                if row is None:
                    continue
                if row.owner is None or (row.expires_at or 0.0) < now or row.owner == node_id:
                    new = LeaseRow(shard, node_id, row.epoch + 1, now + ttl, now)
                    self.leases[shard] = new
                    self.acquisitions.append((shard, node_id, new.epoch))
                    taken.append(Acquired(shard, new.epoch, now + ttl))
            return taken

    def renew(self, node_id: str, held: Mapping[int, int], ttl: float) -> dict[int, float]:
        with self._lock:
            now = self._now()
            renewed = {}
            for shard, epoch in held.items():
                row = self.leases.get(shard)
                if (row is not None and row.owner == node_id and row.epoch == epoch
                        and row.expires_at is not None and row.expires_at >= now):
                    self.leases[shard] = replace(row, expires_at=now + ttl)
                    renewed[shard] = now + ttl
            return renewed

    def release(self, node_id: str, held: Mapping[int, int]) -> set[int]:
        with self._lock:
            self._now()
            freed = set()
            for shard, epoch in held.items():
                row = self.leases.get(shard)
                if row is not None and row.owner == node_id and row.epoch == epoch:
                    self.leases[shard] = LeaseRow(shard, None, row.epoch)
                    freed.add(shard)
            return freed

    def acquire_adapters(self, node_id: str, names: Iterable[str], ttl: float
                         ) -> list[AdapterAcquired]:
        with self._lock:
            now = self._now()
            taken = []
            for name in sorted(set(names)):
                row = self.adapters.get(name, AdapterLeaseRow(name, None, 0))
                if row.owner is None or (row.expires_at or 0.0) < now or row.owner == node_id:
                    self.adapters[name] = AdapterLeaseRow(name, node_id, row.epoch + 1,
                                                          now + ttl, now)
                    taken.append(AdapterAcquired(name, row.epoch + 1, now + ttl))
            return taken

    def renew_adapters(self, node_id: str, held: Mapping[str, int], ttl: float
                       ) -> dict[str, float]:
        with self._lock:
            now = self._now()
            renewed = {}
            for name, epoch in held.items():
                row = self.adapters.get(name)
                if (row is not None and row.owner == node_id and row.epoch == epoch
                        and row.expires_at is not None and row.expires_at >= now):
                    self.adapters[name] = replace(row, expires_at=now + ttl)
                    renewed[name] = now + ttl
            return renewed

    def release_adapters(self, node_id: str, held: Mapping[str, int]) -> set[str]:
        with self._lock:
            self._now()
            freed = set()
            for name, epoch in held.items():
                row = self.adapters.get(name)
                if row is not None and row.owner == node_id and row.epoch == epoch:
                    self.adapters[name] = AdapterLeaseRow(name, None, row.epoch)
                    freed.add(name)
            return freed

    def leave(self, node_id: str, boot_id: str) -> None:
        with self._lock:
            self._now()
            row = self.nodes.get(node_id)
            if row is not None and row.boot_id == boot_id:
                del self.nodes[node_id]

    def forget_nodes(self, dead_for: float) -> int:
        with self._lock:
            now = self._now()
            holding = {row.holder_at(now) for row in self.leases.values()}
            gone = [n for n, row in self.nodes.items()
                    if row.heartbeat_at < now - dead_for and n not in holding]
            for node_id in gone:
                del self.nodes[node_id]
            return len(gone)

    def owners(self) -> dict[int, str | None]:
        """Each shard's valid holder now (``None``: free or expired)."""
        with self._lock:
            now = float(self._clock.time())
            return {s: row.holder_at(now) for s, row in sorted(self.leases.items())}
