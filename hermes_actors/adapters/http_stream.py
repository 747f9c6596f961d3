"""``GET /v1/stream``: a conversation's outbox as Server-Sent Events, pushed as it is written.

The stream is the long poll of ``GET /v1/outbox`` turned around, over the same durable
outbox: each row is one ``message`` event whose ``id:`` is its cursor and whose ``data:`` is
the row as the long poll returns it. A client that reconnects sends the last id it saw as
``Last-Event-ID`` (or ``after=``) and gets everything after it, across gateway restarts too,
since cursors live in ``state.db``; it may switch between the stream and the long poll at
any cursor. The opening event carries only ``retry:`` and the starting cursor as ``id:``, so
a client that connected with ``after=latest`` knows where it stands before any message.
An idle stream sends a comment every ``http.stream_keepalive`` seconds (proxies keep the
connection, and a vanished client is noticed at the next write); the stream ends when the
outbox closes at shutdown, after the drain's last replies.

Each open stream holds one greenlet of gevent's server (one thread elsewhere), so they are
counted: at most ``http.max_streams`` at once, ``503`` beyond. The slot is released by the
WSGI ``close()`` the server calls however the response ends (finished, client gone, server
stopping), not by a generator's ``finally``, which never runs for a stream never iterated.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

from hermes_actors.adapters.http_requests import parse_cursor, parse_outbox_query
from hermes_actors.adapters.outbox import Outbox
from hermes_actors.errors import HermesActorsError

__all__ = ["RETRY_MS", "EventStream", "SlotBody", "StreamSlots", "format_event",
           "parse_stream_query"]

log = logging.getLogger("hermes_actors.http")

#: Milliseconds a client waits before reconnecting (the SSE ``retry:`` field).
RETRY_MS = 2000
#: Rows read from the outbox at once.
_BATCH = 100


class StreamSlots:
    """Counts open streams against a limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open = 0
        self._lock = threading.Lock()

    @property
    def open(self) -> int:
        """Streams open now."""
        return self._open

    def acquire(self) -> bool:
        """Take a slot; False when all are taken."""
        with self._lock:
            if self._open >= self.limit:
                return False
            self._open += 1
            return True

    def release(self) -> None:
        """Give a slot back."""
        with self._lock:
            self._open = max(0, self._open - 1)


def parse_stream_query(query: str, last_event_id: str | None, *,
                       platforms: tuple[str, ...]) -> tuple[str, str, int | None]:
    """``(platform, chat_id, after)`` of a stream request: the long poll's ``chat_id``,
    ``platform`` and ``after`` (``latest`` → ``None``), with a ``Last-Event-ID`` header
    taking precedence over ``after`` (422 when it is not a cursor)."""
    parsed = parse_outbox_query(query, platforms=platforms)
    after = parsed.after
    if last_event_id is not None and last_event_id.strip():
        after = parse_cursor(last_event_id.strip(), "header 'Last-Event-ID'")
    return parsed.platform, parsed.chat_id, after


def format_event(message: dict[str, Any]) -> bytes:
    """One ``message`` event: ``id:`` the cursor, ``data:`` the outbox message as JSON."""
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    return f"id: {message['cursor']}\nevent: message\ndata: {data}\n\n".encode()


class SlotBody:
    """A streamed WSGI body that holds one of ``slots`` (taken by the caller) until the
    server closes it."""

    def __init__(self, slots: StreamSlots) -> None:
        self._slots = slots
        self._released = False

    def close(self) -> None:
        """Called by the server when the response ends, however it ends."""
        if not self._released:
            self._released = True
            self._slots.release()


class EventStream(SlotBody):
    """The WSGI body of one stream: iterating it waits on the outbox and yields events."""

    def __init__(self, outbox: Outbox, slots: StreamSlots, platform: str, chat_id: str,
                 after: int, keepalive: float, render: Any) -> None:
        super().__init__(slots)
        self._outbox = outbox
        self._platform = platform
        self._chat_id = chat_id
        self._cursor = after
        self._keepalive = keepalive
        self._render = render

    def __iter__(self) -> Iterator[bytes]:
        yield f"retry: {RETRY_MS}\nid: {self._cursor}\n\n".encode()
        while not self._outbox.closed:
            try:
                rows = self._outbox.wait(self._platform, self._chat_id, self._cursor,
                                         self._keepalive, _BATCH)
            except HermesActorsError as exc:  # the store failed: the client reconnects
                log.warning("stream ended chat_id=%s error=%s", self._chat_id, exc)
                return
            if rows:
                self._cursor = rows[-1]["cursor"]
                yield b"".join(format_event(self._render(row)) for row in rows)
            elif not self._outbox.closed:
                yield b": keep-alive\n\n"
        yield b": the gateway is stopping\n\n"

