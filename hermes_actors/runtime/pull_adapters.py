"""``PullAdapters``: a cluster node runs a pull adapter's loop only while it holds the
adapter's lease.

An adapter that *pulls* from its platform (Telegram's ``getUpdates``) must run on one node
at a time, or every node would fetch the same updates (and Telegram answers two concurrent
``getUpdates`` of one bot with ``409 Conflict``). Each such adapter (one with a
``lease_name``, ``start_polling`` and ``stop_polling``: ``telegram:<bot id>``) gets a lease
of its own from the node's :class:`~hermes_actors.cluster.membership.LeaseManager`, and this
listener starts the adapter's poller when the lease is gained and stops it when it is lost.
Sending through the adapter is not affected: every node sends the replies of the sessions
it serves.

The poller stops *by the lease's local deadline*, the moment before which no other node
can hold the lease (see the manager): it is given the time left and ends its loop there,
shortens each long poll to end before it, and submits nothing after it; a watchdog also
stops it at the deadline (under gevent that cuts a poll in progress), so a node whose
renewals stall, or that was paused, has stopped pulling before another may start; a
renewal answered after the deadline (sent before it) starts it again. A lease
given up (``LeaseManager.release_adapters``, a node stopping) stops the poller before the
lease is freed. Updates fetched twice across a change of holder (a poll cut before its
updates were acknowledged) are accepted once: the inbox deduplicates them by ingress key.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from hermes_actors._green import spawn
from hermes_actors.cluster.events import AdapterListener

__all__ = ["PullAdapterStatistics", "PullAdapters", "pull_adapters"]

log = logging.getLogger("hermes_actors.cluster")

#: Seconds a poller on a thread is waited for when it is stopped (its poll is at most the
#: lease's time left, see ``UpdatePoller``).
STOP_WAIT = 30.0
#: Seconds between looks at a lease whose local deadline passed (until the manager reports
#: it lost, or a late renewal extends it).
RECHECK = 0.1


def pull_adapters(adapters: Iterable[Any]) -> dict[str, Any]:
    """The adapters that pull from their platform, by lease name."""
    return {a.lease_name: a for a in adapters
            if isinstance(getattr(a, "lease_name", None), str)
            and callable(getattr(a, "start_polling", None))
            and callable(getattr(a, "stop_polling", None))}


class PullAdapterStatistics(NamedTuple):
    """What ``Gateway.stats()["cluster"]["adapters"]`` shows."""

    #: name -> epoch of the adapter leases held now (their pollers run).
    held: dict[str, int]
    #: Adapters configured on this node (lease names).
    configured: tuple[str, ...]
    #: Leases gained and lost since start.
    gained: int
    lost: int


class _Tenure:
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        #: Set when the manager reported the lease lost (or a newer tenure replaced it).
        self.over = threading.Event()
        #: Starting and stopping the poller, one at a time.
        self.lock = threading.Lock()
        self.polling = False


class PullAdapters(AdapterListener):
    """The pull adapters of one node (``adapters``: lease name -> adapter), polled into
    ``submit`` (``Gateway.submit``) while their leases are held. ``time_left(name, epoch)``
    is the manager's :meth:`~hermes_actors.cluster.membership.LeaseManager.adapter_time_left`
    (set with :meth:`bind` once the manager exists)."""

    def __init__(self, adapters: Mapping[str, Any], submit: Callable[[Any], Any], *,
                 checkpoint: Callable[[str], None] = lambda name: None) -> None:
        self.adapters = dict(adapters)
        self._submit = submit
        self._checkpoint = checkpoint
        self._time_left: Callable[[str, int], float] = lambda name, epoch: 0.0
        self._lock = threading.Lock()
        self._tenures: dict[str, _Tenure] = {}
        self._gained = self._lost = 0

    def bind(self, time_left: Callable[[str, int], float]) -> None:
        """Where the local deadlines are read (the lease manager)."""
        self._time_left = time_left

    def statistics(self) -> PullAdapterStatistics:
        with self._lock:
            tenures = dict(self._tenures)
            gained, lost = self._gained, self._lost
        held = {name: t.epoch for name, t in tenures.items()
                if self._time_left(name, t.epoch) > 0}
        return PullAdapterStatistics(held, tuple(sorted(self.adapters)), gained, lost)

    # -- the listener (on the manager's greenlet) -----------------------------------------

    def gained(self, name: str, epoch: int) -> None:
        if name not in self.adapters:
            return
        tenure = _Tenure(epoch)
        with self._lock:
            old = self._tenures.get(name)
            self._tenures[name] = tenure
            self._gained += 1
        if old is not None:  # (the manager reports a loss first: this is a net)
            old.over.set()
            self._stop(name, old, "replaced")
        self._start(name, tenure)
        spawn(lambda: self._watch(name, tenure), f"lease-watch-{name}")

    def lost(self, name: str, epoch: int, reason: str) -> None:
        with self._lock:
            tenure = self._tenures.get(name)
            if tenure is None or tenure.epoch != epoch:
                return
            del self._tenures[name]
            self._lost += 1
        tenure.over.set()
        # Returns once the poller has stopped: a released lease is freed right after.
        self._stop(name, tenure, reason)

    # -- the poller -----------------------------------------------------------------------

    def _start(self, name: str, tenure: _Tenure) -> None:
        adapter = self.adapters[name]
        with tenure.lock:
            poller = getattr(adapter, "poller", None)
            if tenure.over.is_set() or (tenure.polling and poller is not None
                                        and not poller.stopped):
                return

            def time_left() -> float:
                return 0.0 if tenure.over.is_set() else self._time_left(name, tenure.epoch)

            adapter.start_polling(self._submit, checkpoint=self._checkpoint,
                                  time_left=time_left)
            tenure.polling = True
        log.info("event=cluster_adapter_polling adapter=%s epoch=%d", name, tenure.epoch)

    def _stop(self, name: str, tenure: _Tenure, reason: str) -> None:
        with tenure.lock:
            if not tenure.polling:
                return
            tenure.polling = False
            self.adapters[name].stop_polling(wait=STOP_WAIT)
        log.info("event=cluster_adapter_stopped adapter=%s epoch=%d reason=%s", name,
                 tenure.epoch, reason)

    def _watch(self, name: str, tenure: _Tenure) -> None:
        """Stop the poller at the lease's local deadline unless it was renewed (each wake
        re-reads the deadline, which only moves later), until the tenure ends. Past the
        deadline it looks again every :data:`RECHECK` seconds: the manager reports the
        loss at its next round, or a renewal that was sent before the deadline and
        answered after it extended the lease (the database renewed it while it was still
        valid, so nobody else held it meanwhile): then it polls again."""
        while not tenure.over.is_set():
            left = self._time_left(name, tenure.epoch)
            if left > 0:
                self._start(name, tenure)
                tenure.over.wait(left)
            else:
                self._stop(name, tenure, "deadline")
                tenure.over.wait(RECHECK)
