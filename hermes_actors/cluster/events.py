"""What a :class:`~hermes_actors.cluster.membership.LeaseManager` tells its host: the
listener it calls when shards come and go, and the record of one round.

The listener is the seam between the leases and the gateway: ``gained`` is where a node
starts serving a shard (recovering its sessions as after a restart), ``lost`` where it stops
at once (its actors stopped, nothing more sent), ``handover`` where it winds a shard down
for the next owner before the lease is released. All three run on the manager's greenlet
(a thread without gevent), so they must hand the work on and return.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["LOST_REASONS", "AdapterListener", "ShardListener", "Tick", "shard_ranges"]

#: Why a shard stopped being the node's: its local deadline passed without a renewal; the
#: table (or a fenced write) gives it to another tenure; it was handed over and released;
#: the manager was halted without releasing it.
LOST_REASONS = ("expired", "fenced", "released", "halted")


class ShardListener:
    """What the host hears about its shards (override what it needs). Every method runs on
    the manager's greenlet or thread and must not block it."""

    def gained(self, shard: int, epoch: int) -> None:
        """The node now owns ``shard`` under ``epoch`` (recover and serve it)."""

    def lost(self, shard: int, epoch: int, reason: str) -> None:
        """The node no longer owns ``shard`` (stop its actors, send nothing more for it);
        ``reason`` is one of :data:`LOST_REASONS`."""

    def handover(self, shard: int, epoch: int, done: Callable[[], None]) -> None:
        """``shard`` goes to another node: stop starting turns in it, settle the running
        ones, then call ``done()`` (from any thread) to have it released. By default at
        once."""
        done()


class AdapterListener:
    """What the host hears about the leases of its pull adapters (``telegram:<bot id>``):
    while it holds one, it runs that adapter's pull loop, and only then. Called on the
    manager's greenlet or thread."""

    def gained(self, name: str, epoch: int) -> None:
        """The node now holds adapter ``name``'s lease under ``epoch``: start pulling
        (without blocking). The lease counts only until its local deadline
        (:meth:`~hermes_actors.cluster.membership.LeaseManager.adapter_time_left`): the
        host stops pulling by then even if no ``lost`` came yet."""

    def lost(self, name: str, epoch: int, reason: str) -> None:
        """The node no longer holds ``name``'s lease (``reason`` as for shards). Unlike
        the shard callbacks this one may block briefly: when it returns, the pull loop
        must have stopped, since a ``released`` lease is freed right after it and another
        node may take it at once."""


@dataclass(frozen=True)
class Tick:
    """What one round did."""

    gained: tuple[int, ...] = ()
    lost: tuple[int, ...] = ()
    released: tuple[int, ...] = ()
    renewed: int = 0
    #: Adapter leases gained and lost in the round.
    adapters_gained: tuple[str, ...] = ()
    adapters_lost: tuple[str, ...] = ()
    #: Why the round could not reach the store (it is retried at the next one).
    error: str | None = None


def shard_ranges(shards: Iterable[int]) -> str:
    """``0-3,7,9-10``: shard numbers for a log line, however many there are."""
    spans: list[list[int]] = []
    for shard in sorted(shards):
        if spans and shard == spans[-1][1] + 1:
            spans[-1][1] = shard
        else:
            spans.append([shard, shard])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
