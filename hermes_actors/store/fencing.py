"""``ShardFence``: a cluster node's writes conditioned on its tenure of each shard they touch.

A node that lost a shard (its lease expired while it was paused, cut off, or slow) may still
have writes in flight for that shard's sessions: a turn worker settling, a delivery appending
to the outbox. The fencing token of docs/cluster.md stops them in the database: every op list
that writes for a session gets one :class:`~hermes_actors.store.ops.FenceShard` per shard it
touches, first in the list, so the check and the writes are one transaction and the check
holds the lease row until the commit. The fence is an ordinary op, so it travels with the
list however lists are committed (a group commit, a writer in another process).

Which ops are fenced is decided from the ops alone (:func:`fenced_keys`): those that change a
session's routing row, record or claim what is owed to its chat, or append to its outbox —
the writes that make a turn happen or a reply go out, and the sessions' stuck-loop counts
(``SetSessionRestarts``: only the shard's owner counts its sessions' restarts). Ingress (``AcceptEvent``) is never
fenced: any node accepts any message. A list for a shard the node does not hold *now*
(:meth:`LeaseManager.owned` says so by its local deadline) is refused before it is sent.
Either refusal raises :class:`~hermes_actors.errors.FencedError`, is counted, and is
reported to ``on_refused`` (the gateway drops the shard). A gateway that is not a cluster
node has no fence: ``StoreCore.fence`` is ``None`` and nothing is added or checked.

**A tenure's own writes.** The fence asks for the tenure the node holds *now*, which is not
always the one a write belongs to: a node whose local deadline passed (a lease round held up
past ``lease_ttl``) loses its shards and may take them back at once under new epochs, while a
turn of the old tenure is still ending (an agent stops *soon* after its interrupt, maybe with
a partial answer). That turn's writes would pass under the new epoch, on top of the new
tenure's recovery of the same message (its continuation): the user would get both. So a
session actor is bound to the tenure it was started under (:func:`bound_to_tenure`, a
context variable set around its messages and its workers), and a write made while bound to
another tenure of the shard than the one held now is refused locally, like one for a shard
not held.

Rejected: fencing in the backend's committer (it would need the tenure table in the writer,
which may run in another process) and a fence per statement (more round trips, same safety).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

from hermes_actors.cluster.shards import shard_of
from hermes_actors.errors import FencedError
from hermes_actors.store.ops import (
    DeleteConversations,
    DeleteRouting,
    FenceShard,
    LedgerRecord,
    Op,
    OutboxAppend,
    PutRouting,
    SetRoutingFlags,
    SetSessionRestarts,
)

__all__ = ["FenceStatistics", "ShardFence", "bound_to_tenure", "fenced_keys"]

#: ``(shard, epoch)``: the tenure the running code's writes belong to (module docstring).
_BOUND: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "hermes_bound_tenure", default=None)


@contextmanager
def bound_to_tenure(tenure: tuple[int, int] | None) -> Iterator[None]:
    """Within the block, writes for shard ``tenure[0]`` are of tenure ``tenure[1]`` only: once
    the node holds the shard under another epoch (or not at all), they are refused.
    ``None``: not bound (the fence asks only what is held now)."""
    if tenure is None:
        yield
        return
    token = _BOUND.set(tenure)
    try:
        yield
    finally:
        _BOUND.reset(token)

#: Ops whose ``session_key`` makes a list fenced.
_KEYED = (PutRouting, SetRoutingFlags, LedgerRecord, OutboxAppend)


def fenced_keys(ops: Iterable[Op]) -> set[str]:
    """The session keys whose shard's tenure ``ops`` must be conditioned on."""
    keys: set[str] = set()
    for op in ops:
        if isinstance(op, _KEYED):
            keys.add(op.session_key)
        elif isinstance(op, (DeleteRouting, DeleteConversations)):
            keys.update(op.session_keys)
        elif isinstance(op, SetSessionRestarts):
            keys.update(key for key, _ in op.counts)
    return keys


class FenceStatistics(NamedTuple):
    """What a fence did."""

    #: Op lists that carried a fence to the database.
    fenced_lists: int
    #: Lists refused before they were sent: the node did not hold the shard any more.
    refused_locally: int
    #: Lists the database refused: the tenure had ended when the write arrived.
    refused_by_database: int


class ShardFence:
    """Adds the fence ops for node ``owner`` (``tenure(shard)``: the epoch it holds the shard
    under now, or ``None``); ``on_refused(shard, epoch)`` hears of every refusal."""

    def __init__(self, owner: str, shards: int, tenure: Callable[[int], int | None],
                 on_refused: Callable[[int, int | None], None] = lambda shard, epoch: None,
                 ) -> None:
        self.owner = owner
        self.shards = shards
        self._tenure = tenure
        self._on_refused = on_refused
        self._lock = threading.Lock()
        self._fenced = self._local = self._database = 0

    def shard_of(self, session_key: str) -> int:
        """The shard of ``session_key`` in this cluster."""
        return shard_of(session_key, self.shards)

    def guard(self, ops: list[Op]) -> list[Op]:
        """``ops`` with a fence for every shard they write for first (``ops`` itself when
        they need none); raises :class:`FencedError` when the node holds one of those shards
        under no tenure now."""
        keys = fenced_keys(ops)
        if not keys:
            return ops
        fences = []
        bound = _BOUND.get()
        for shard in sorted({self.shard_of(key) for key in keys}):
            epoch = self._tenure(shard)
            if bound is not None and bound[0] == shard and bound[1] != epoch:
                epoch = None  # the tenure this write belongs to has ended
            if epoch is None:
                with self._lock:
                    self._local += 1
                self._on_refused(shard, None)
                raise FencedError(f"shard {shard} is not held by node {self.owner} now (not "
                                  f"under the tenure the write belongs to): the write for its "
                                  f"sessions was not sent", shard, None)
            fences.append(FenceShard(shard, self.owner, epoch))
        with self._lock:
            self._fenced += 1
        return [*fences, *ops]

    def refused(self, exc: FencedError) -> None:
        """The database refused a fenced list (``exc``): count it and report it."""
        with self._lock:
            self._database += 1
        self._on_refused(exc.shard, exc.epoch)

    def statistics(self) -> FenceStatistics:
        """A snapshot record."""
        with self._lock:
            return FenceStatistics(self._fenced, self._local, self._database)
