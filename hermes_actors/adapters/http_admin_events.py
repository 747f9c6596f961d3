"""``GET /v1/admin/events``: what the operator console shows, pushed as Server-Sent Events.

No single place in the gateway sees every change an operator cares about (a message
admitted, a turn starting or ending, a command, housekeeping, another cluster node), so the
stream looks instead: every :data:`INTERVAL` seconds it takes the answers of the operator
routes themselves (:data:`VIEWS`: the sessions, the failed and abandoned deliveries, and the
cluster when that route answers) and sends each view that changed since the previous look
as one event, named after the view, whose ``data:`` is the route's JSON answer. The first
look sends every view, so a client that (re)connects starts complete; nothing is sent while
nothing changes, except a comment every ``http.stream_keepalive`` seconds. A view whose route
refuses (the cluster route of a single gateway: 404) is not sent.

A look costs what one ``GET`` of each route costs, once a second per open console, the
same as a page polling them, over one connection. The stream is counted against
``http.max_streams`` with ``GET /v1/stream`` (:class:`StreamSlots`; ``503`` beyond), and ends
when the outbox closes at shutdown (the client reconnects).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from hermes_actors.adapters.http_requests import RequestError
from hermes_actors.adapters.http_stream import RETRY_MS, SlotBody, StreamSlots
from hermes_actors.errors import HermesActorsError

__all__ = ["EVENTS_PATH", "INTERVAL", "VIEWS", "AdminEventStream", "look"]

log = logging.getLogger("hermes_actors.http")

EVENTS_PATH = "/v1/admin/events"
#: Seconds between two looks.
INTERVAL = 1.0
#: ``(event name, route)`` of each view; the sessions route gets the stream's own query.
VIEWS = (
    ("sessions", "/v1/admin/sessions"),
    ("deliveries", "/v1/admin/deliveries"),
    ("cluster", "/v1/admin/cluster"),
)

#: ``(method, path, query) -> (status, JSON body)``: :meth:`AdminRoutes.handle`.
Handler = Callable[[str, str, str], tuple[int, Any]]


def look(handle: Handler, query: str) -> dict[str, Any]:
    """``{event name: JSON body}`` of every view whose route answers 200 now. A bad
    ``query`` (the sessions route's ``state``/``limit``) raises its
    :class:`RequestError`, as that route would."""
    views: dict[str, Any] = {}
    for name, path in VIEWS:
        try:
            status, data = handle("GET", path, query if name == "sessions" else "")
        except RequestError:
            if name == "sessions":
                raise
            continue  # (a route this gateway does not have: no such view)
        if status == 200:
            views[name] = data
    return views


def format_view(name: str, data: Any) -> bytes:
    """One event: ``event:`` the view's name, ``data:`` its JSON on one line."""
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"event: {name}\ndata: {body}\n\n".encode()


class AdminEventStream(SlotBody):
    """The WSGI body of one admin event stream.

    ``first`` is the look taken while answering the request (so a bad query is a plain
    error answer, not a stream); ``take`` takes the next; ``pause(seconds)`` waits between
    looks and says whether the stream goes on (False once the gateway is stopping)."""

    def __init__(self, first: dict[str, Any], take: Callable[[], dict[str, Any]],
                 pause: Callable[[float], bool], slots: StreamSlots, *,
                 interval: float = INTERVAL, keepalive: float = 15.0) -> None:
        super().__init__(slots)
        self._first = first
        self._take = take
        self._pause = pause
        self._interval = interval
        self._keepalive = keepalive

    def __iter__(self) -> Iterator[bytes]:
        sent: dict[str, Any] = {}
        views = self._first
        yield f"retry: {RETRY_MS}\n\n".encode()
        quiet_since = time.monotonic()
        while True:
            changed = [(name, data) for name, data in views.items() if sent.get(name) != data]
            if changed:
                sent.update(changed)
                quiet_since = time.monotonic()
                yield b"".join(format_view(name, data) for name, data in changed)
            elif time.monotonic() - quiet_since >= self._keepalive:
                quiet_since = time.monotonic()
                yield b": keep-alive\n\n"
            if not self._pause(self._interval):
                break
            try:
                views = self._take()
            except (RequestError, HermesActorsError) as exc:  # the client reconnects
                log.warning("admin event stream ended error=%s", exc)
                return
        yield b": the gateway is stopping\n\n"

