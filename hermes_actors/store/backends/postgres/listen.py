"""``InboxNotices``: a cluster node hears of new inbox rows of its shards (``LISTEN``).

Every accept a cluster node commits carries a ``NotifyShard`` op (``pg_notify`` on the
channel of the session's shard, :func:`~.schema.inbox_channel`), delivered by the server
when the accept commits. The node that serves the shard listens on that channel on a
connection of its own and is told at once, instead of at its next poll. A notification is
only a wake-up: what to dispatch is always read from the inbox, so a notification lost
(the connection broke, a channel not listened to yet) costs latency, never a message —
the poll stays as the net, and every change of the channels listened to, and every new
connection, is reported as a wake-up too (rows may have come meanwhile).

A notice names the process that accepted the row (``NotifyShard.origin``, the payload).
One of the node's own (``origin``) is not passed on: the node reads the inbox itself after
each of its own accepts (:meth:`~hermes_actors.runtime.shard_host.ShardHost.accepted`), so
the pass the notice would wake finds nothing (on a one-node cluster, every other pass).

One loop (a greenlet under gevent, a thread otherwise) owns the connection: it applies the
wanted channels (``LISTEN``/``UNLISTEN``), then waits for notifications up to ``wait``
seconds, and again. Rejected: one channel for all shards with the shard as payload (every
node would be woken by every message of the cluster).

The same connection hears outbox appends (with ``on_outbox``): every append a cluster node
commits carries a ``NotifyOutbox`` op on :data:`~.schema.OUTBOX_CHANNEL` naming its chat,
and a node passes the notices of other processes to ``on_outbox(platform, chat_id)``, so a
long poll (``GET /v1/outbox?wait=``, ``/v1/stream``) waiting on any node wakes when the
chat's owner answers; ``on_outbox(None, None)`` after each new connection (appends may have
been missed). One channel for all chats: every node hears every reply of the cluster, a
parse and a dictionary update each, since a long poll may wait on any node.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

import psycopg

from hermes_actors._green import spawn
from hermes_actors.store.backends.postgres.connection import Server
from hermes_actors.store.backends.postgres.schema import (
    OUTBOX_CHANNEL,
    inbox_channel,
    read_outbox_notice,
)

__all__ = ["InboxNotices"]

log = logging.getLogger("hermes_actors.cluster")

_PREFIX = inbox_channel(0)[:-1]


class InboxNotices:
    """Listens on the inbox channels of the shards :meth:`want` names; calls
    ``on_notice(shard)`` for each notification from another process than ``origin`` (its
    own are counted in :attr:`own`), ``on_notice(None)`` when rows may have been missed (a
    new connection, new channels). With ``on_outbox``, also on the outbox channel:
    ``on_outbox(platform, chat_id)`` for each append another process than ``origin`` made,
    ``on_outbox(None, None)`` after each new connection."""

    def __init__(self, dsn: str, on_notice: Callable[[int | None], None], *,
                 wait: float = 0.5,
                 on_outbox: Callable[[str | None, str | None], None] | None = None,
                 origin: str = "") -> None:
        self._server = Server(dsn)
        self._on_notice = on_notice
        self._on_outbox = on_outbox
        self._origin = origin
        self._wait = wait
        self._wanted: frozenset[int] = frozenset()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._finished = threading.Event()
        #: Notifications heard since start.
        self.heard = 0
        #: Inbox notifications of this process's own accepts, not passed on.
        self.own = 0
        #: The shards whose channels the connection listens on now.
        self.listening: frozenset[int] = frozenset()

    def want(self, shards: Iterable[int]) -> None:
        """Listen on the channels of ``shards`` (and no others) from the next loop on."""
        with self._lock:
            self._wanted = frozenset(shards)

    def start(self) -> None:
        """Run the loop until :meth:`stop`."""
        spawn(self._serve, "cluster-listen")

    def stop(self) -> None:
        """End the loop (within ``wait`` seconds) and close its connection."""
        self._stopped.set()
        self._finished.wait(self._wait * 4 + 5.0)

    def _serve(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        listening: frozenset[int] = frozenset()
        try:
            while not self._stopped.is_set():
                try:
                    if conn is None or conn.closed or conn.broken:
                        conn, listening = self._server.connect(), frozenset()
                        self.listening = listening
                        if self._on_outbox is not None:
                            conn.execute(f"LISTEN {OUTBOX_CHANNEL}")
                            self._on_outbox(None, None)  # appends may have come meanwhile
                    with self._lock:
                        wanted = self._wanted
                    if wanted != listening:
                        for shard in sorted(listening - wanted):
                            conn.execute(f"UNLISTEN {inbox_channel(shard)}")
                        for shard in sorted(wanted - listening):
                            conn.execute(f"LISTEN {inbox_channel(shard)}")
                        listening = self.listening = wanted
                        self._on_notice(None)  # rows may have come before the LISTEN
                    for notice in conn.notifies(timeout=self._wait):
                        self.heard += 1
                        if notice.channel == OUTBOX_CHANNEL:
                            self._outbox(notice.payload)
                        elif self._origin and notice.payload == self._origin:
                            self.own += 1
                        else:
                            self._on_notice(_shard(notice.channel))
                except Exception as exc:  # noqa: BLE001 - the loop must outlive any failure
                    log.warning("event=cluster_listen_failed error=%s",
                                self._server.scrub(f"{type(exc).__name__}: {exc}"))
                    if conn is not None:
                        conn.close()
                    conn = None
                    self._stopped.wait(self._wait)
        finally:
            if conn is not None:
                conn.close()
            self._finished.set()


    def _outbox(self, payload: str) -> None:
        told = read_outbox_notice(payload)
        if told is not None and told[0] != self._origin and self._on_outbox is not None:
            self._on_outbox(told[1], told[2])


def _shard(channel: str) -> int | None:
    tail = channel[len(_PREFIX):] if channel.startswith(_PREFIX) else ""
    return int(tail) if tail.isdigit() else None
