"""The lease table as records, and the protocol of a store that keeps it.

:class:`LeaseStore` is what a :class:`~hermes_actors.cluster.membership.LeaseManager` needs
from the database, written down so that the manager can be tested against an in-memory twin
(:class:`hermes_actors.testing.leases.MemoryLeases`) and run against PostgreSQL
(:class:`hermes_actors.store.backends.postgres.leases.PgLeases`) unchanged. Every time in
these records is epoch seconds of the *store's* clock: nodes never compare their own clocks
with each other, only with the database's (a node's own deadlines are on its monotonic
clock, see the manager).

The rules every implementation keeps, each operation atomic under concurrency:

* ``acquire`` takes a shard that is free (no owner), expired (``expires_at`` before now), or
  already the caller's in the table (a restarted node taking back its own leases); the epoch
  grows by one and the expiry is now + ttl. A shard held by another node is never taken.
* ``renew`` extends a lease only while it is the caller's with the caller's epoch and not
  yet expired; anything else (a stale epoch, another owner, an expired lease) is not renewed.
* ``release`` frees a lease only while it is the caller's with the caller's epoch.
* the epoch never goes down and only ``acquire`` changes it, so (owner, epoch) names one
  unbroken tenure of one node: the fencing token of its writes.
* the leases of pull adapters (``acquire_adapters``, ``renew_adapters``,
  ``release_adapters``) follow the same rules, keyed by adapter name; an adapter's row is
  created by the first acquisition that names it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Acquired", "AdapterAcquired", "AdapterLeaseRow", "ClusterSnapshot", "LeaseRow",
           "LeaseStore", "NodeAnnouncement", "NodeRow"]


@dataclass(frozen=True)
class NodeAnnouncement:
    """What a node writes about itself at every heartbeat."""

    #: The node's id (its home's ``node_id``).
    node_id: str
    #: A random id of this process's membership: a restarted node is the same node with a
    #: new boot (its ``started_at`` is reset).
    boot_id: str
    #: The node's lease_ttl: how stale its heartbeat may grow before it counts as dead.
    lease_ttl: float
    #: Host name and process id, for ``cluster status``.
    host: str | None = None
    pid: int | None = None
    #: Where the node's HTTP API answers (``host:port``), when it has one.
    address: str | None = None
    #: Set while the node gives its shards away before it stops: the others stop counting
    #: it among the live nodes at once and take what it releases.
    leaving: bool = False


@dataclass(frozen=True)
class NodeRow:
    """One row of ``cluster_nodes``."""

    node_id: str
    boot_id: str
    started_at: float
    heartbeat_at: float
    lease_ttl: float
    host: str | None = None
    pid: int | None = None
    address: str | None = None
    leaving: bool = False

    def live_at(self, now: float) -> bool:
        """Whether the node counts as alive at store time ``now`` (heartbeat within its
        lease_ttl)."""
        return self.heartbeat_at + self.lease_ttl >= now


@dataclass(frozen=True)
class LeaseRow:
    """One row of ``shard_leases``: free when ``owner`` is ``None``."""

    shard: int
    owner: str | None
    #: The fencing token: grows by one at every acquisition, never goes down.
    epoch: int
    expires_at: float | None = None
    acquired_at: float | None = None

    def holder_at(self, now: float) -> str | None:
        """The owner while the lease is valid at store time ``now``, else ``None`` (an
        expired lease is free)."""
        if self.owner is None or self.expires_at is None or self.expires_at < now:
            return None
        return self.owner


@dataclass(frozen=True)
class AdapterLeaseRow:
    """One row of ``adapter_leases``: who runs the pull adapter ``name`` (``telegram:<bot
    id>``); free when ``owner`` is ``None``. The same rules as a shard's lease."""

    name: str
    owner: str | None
    epoch: int
    expires_at: float | None = None
    acquired_at: float | None = None

    def holder_at(self, now: float) -> str | None:
        """The owner while the lease is valid at store time ``now``, else ``None``."""
        if self.owner is None or self.expires_at is None or self.expires_at < now:
            return None
        return self.owner


@dataclass(frozen=True)
class ClusterSnapshot:
    """The whole table at one instant of the store's clock."""

    #: The store's clock when the snapshot was read (epoch seconds).
    now: float
    #: The shard count recorded when the cluster was created; ``None``: no cluster yet.
    shards: int | None
    nodes: tuple[NodeRow, ...]
    leases: tuple[LeaseRow, ...]
    #: The pull adapters' leases (those some node ever asked for), by name.
    adapters: tuple[AdapterLeaseRow, ...] = ()


@dataclass(frozen=True)
class Acquired:
    """A lease ``acquire`` took: its new epoch and expiry."""

    shard: int
    epoch: int
    expires_at: float


@dataclass(frozen=True)
class AdapterAcquired:
    """An adapter lease ``acquire_adapters`` took: its new epoch and expiry."""

    name: str
    epoch: int
    expires_at: float


class LeaseStore(Protocol):
    """The lease table's operations (see the module docstring for their rules)."""

    #: The store as it may be shown (a DSN with its password masked).
    where: str

    def ensure_cluster(self, shards: int, node_id: str) -> int:
        """Create the cluster with ``shards`` shards (and a free lease per shard) unless it
        exists; return the shard count recorded (the first node's, which wins)."""
        ...

    def heartbeat(self, node: NodeAnnouncement) -> None:
        """Insert or refresh the node's row with the store's time."""
        ...

    def snapshot(self) -> ClusterSnapshot:
        """Nodes and leases as of one instant."""
        ...

    def acquire(self, node_id: str, shards: Iterable[int], ttl: float) -> list[Acquired]:
        """Take those of ``shards`` that are free, expired or already ``node_id``'s."""
        ...

    def renew(self, node_id: str, held: Mapping[int, int], ttl: float) -> dict[int, float]:
        """Extend the leases of ``held`` (shard -> epoch) still valid and ``node_id``'s;
        returns shard -> new expiry for those renewed."""
        ...

    def release(self, node_id: str, held: Mapping[int, int]) -> set[int]:
        """Free the leases of ``held`` (shard -> epoch) still ``node_id``'s; returns those
        freed."""
        ...

    def acquire_adapters(self, node_id: str, names: Iterable[str], ttl: float
                         ) -> list[AdapterAcquired]:
        """Take those of the adapter leases ``names`` that are free, expired, already
        ``node_id``'s, or not there yet (created taken); the rules of ``acquire``."""
        ...

    def renew_adapters(self, node_id: str, held: Mapping[str, int], ttl: float
                       ) -> dict[str, float]:
        """Extend the adapter leases of ``held`` (name -> epoch) still valid and
        ``node_id``'s; returns name -> new expiry for those renewed."""
        ...

    def release_adapters(self, node_id: str, held: Mapping[str, int]) -> set[str]:
        """Free the adapter leases of ``held`` (name -> epoch) still ``node_id``'s."""
        ...

    def leave(self, node_id: str, boot_id: str) -> None:
        """Remove the node's row (a graceful stop), if it is still this boot's."""
        ...

    def forget_nodes(self, dead_for: float) -> int:
        """Remove rows of nodes silent for more than ``dead_for`` seconds that hold no
        valid lease; returns how many."""
        ...
