"""Which shards a node should renew, acquire and give away: the balance rule, as pure
functions of one snapshot of the lease table.

Every node computes the same *target assignment* from the same snapshot, then acts only on
its own part of it; the database's conditional statements (see
:mod:`~hermes_actors.cluster.records`) make sure that acting on an older snapshot can never
give a shard two owners, and the next round corrects whatever a race left. The rule:

1. A lease is *held* while it has an owner and has not expired; an expired lease is free.
   A node is *live* while its heartbeat is within its ``lease_ttl`` and it is not leaving.
2. Fair shares: with ``S`` shards and ``n`` live nodes every node gets ``S // n``, and
   ``S % n`` of them one more: those holding the most now (ties by node id), so that a
   balanced cluster is a fixed point and nobody gives away a shard just to take another.
3. A live node keeps its lowest-numbered held shards up to its share and gives away the rest.
4. The free shards and those given away go, lowest first, to the live nodes below their
   share, in node id order; a node acquires only shards that are free *now* (a shard given
   away is taken in the round after its owner released it).
5. Shards held by a node that is no longer live stay where they are until their leases
   expire: nobody may take them before that, and nobody counts them as its own.

What moves when the cluster changes is the least the shares allow: a joining node receives
its share from those above theirs, the others keep everything else; the shards of a node
that leaves or dies go to the others without any other shard moving.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hermes_actors.cluster.records import LeaseRow, NodeRow

__all__ = ["Plan", "assignment", "fair_shares", "live_nodes", "plan"]


@dataclass(frozen=True)
class Plan:
    """One node's part of the target assignment, for one round."""

    #: Held shards to keep: shard -> epoch.
    renew: Mapping[int, int] = field(default_factory=dict)
    #: Held shards to give away (handed over, then released): shard -> epoch.
    release: Mapping[int, int] = field(default_factory=dict)
    #: Shards the table says are this node's but that it does not hold (a previous boot's,
    #: a renewal whose answer was lost) and that go to others: released at once.
    disown: Mapping[int, int] = field(default_factory=dict)
    #: Shards to acquire now: free, expired, or this node's in the table but not held.
    acquire: frozenset[int] = frozenset()
    #: Shards this node holds but the table no longer gives it (another owner or epoch, or
    #: expired): dropped at once.
    lost: frozenset[int] = frozenset()


def live_nodes(nodes: Iterable[NodeRow], now: float) -> tuple[str, ...]:
    """The ids of the nodes live at store time ``now``, sorted."""
    return tuple(sorted(n.node_id for n in nodes if n.live_at(now) and not n.leaving))


def fair_shares(shards: int, live: Sequence[str], held: Mapping[str, int]) -> dict[str, int]:
    """Each live node's share of ``shards``: ``shards // n`` or one more, the extra ones to
    the nodes holding most now (``held``: node -> shards held; ties by node id)."""
    if not live:
        return {}
    base, extra = divmod(shards, len(live))
    ranked = sorted(live, key=lambda node: (-held.get(node, 0), node))
    return {node: base + (1 if rank < extra else 0) for rank, node in enumerate(ranked)}


def assignment(shards: int, live: Sequence[str], leases: Iterable[LeaseRow],
               now: float) -> dict[int, str | None]:
    """The target owner of every shard (``None``: free, nobody below its share), given the
    live nodes and the leases at store time ``now`` (see the module docstring)."""
    live = sorted(set(live))
    members = set(live)
    holder = {row.shard: row.holder_at(now) for row in leases if 0 <= row.shard < shards}
    mine: dict[str, list[int]] = {node: [] for node in live}
    target: dict[int, str | None] = {}
    pool: list[int] = []
    for shard in range(shards):
        owner = holder.get(shard)
        if owner is None:
            pool.append(shard)
        elif owner in members:
            mine[owner].append(shard)
        else:
            target[shard] = owner  # a dead node's lease: untouchable until it expires
    shares = fair_shares(shards, live, {node: len(held) for node, held in mine.items()})
    room: dict[str, int] = {}
    for node in live:
        keep, give = mine[node][:shares[node]], mine[node][shares[node]:]
        target.update(dict.fromkeys(keep, node))
        pool.extend(give)
        room[node] = shares[node] - len(keep)
    pool.sort()
    takers = iter(node for node in live for _ in range(room[node]))
    for shard in pool:
        target[shard] = next(takers, None)
    return target


def plan(me: str, shards: int, held: Mapping[int, int], nodes: Iterable[NodeRow],
         leases: Iterable[LeaseRow], now: float, *, leaving: bool = False) -> Plan:
    """What node ``me``, holding ``held`` (shard -> epoch), does this round, given a
    snapshot of the table at store time ``now``. A ``leaving`` node gives everything away
    and acquires nothing."""
    rows = {row.shard: row for row in leases}
    lost = set()
    kept: dict[int, int] = {}
    for shard, epoch in held.items():
        row = rows.get(shard)
        if row is None or row.holder_at(now) != me or row.epoch != epoch:
            lost.add(shard)
        else:
            kept[shard] = epoch
    strays = {shard: row.epoch for shard, row in rows.items()
              if row.holder_at(now) == me and shard not in held}
    if leaving:
        return Plan(release=kept, disown=strays, lost=frozenset(lost))
    live = set(live_nodes(nodes, now)) | {me}
    target = assignment(shards, sorted(live), rows.values(), now)
    renew = {shard: epoch for shard, epoch in kept.items() if target.get(shard) == me}
    release = {shard: epoch for shard, epoch in kept.items() if shard not in renew}
    disown = {shard: epoch for shard, epoch in strays.items() if target.get(shard) != me}
    acquire = frozenset(
        shard for shard, node in target.items()
        if node == me and shard not in kept
        and (shard in strays or shard not in rows or rows[shard].holder_at(now) is None))
    return Plan(renew=renew, release=release, disown=disown, acquire=acquire,
                lost=frozenset(lost))
