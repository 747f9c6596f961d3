"""The HTTP adapter (§12): a small JSON API in front of a :class:`Gateway`, as a WSGI app.

Routes: ``POST /v1/messages`` (an inbound message → 202), ``GET /v1/outbox`` (replies, by
cursor, with a long poll), ``GET /v1/stream`` (the same replies pushed as Server-Sent
Events, :mod:`~hermes_actors.adapters.http_stream`), ``GET /v1/sessions`` and ``GET
/v1/sessions/<key>``, ``GET /healthz`` and ``GET /metrics``, the operator routes under
``/v1/admin/`` (:mod:`~hermes_actors.adapters.http_admin`, behind ``http.admin_token``
only; ``/v1/admin/events``: :mod:`~hermes_actors.adapters.http_admin_events`), the operator
console's page at ``/console`` (:mod:`~hermes_actors.adapters.http_console`, no token: it
holds no data), and the ``POST`` routes of
push platforms (``/slack/events``), which authenticate their requests themselves. A bearer token, when configured, guards every route except
the console's files and ``/healthz`` (which then tells a client without it only the status). What a request may say is decided by the pure functions of
:mod:`~hermes_actors.adapters.http_requests`; this module only routes, reads bodies with a
hard cap and writes JSON. Replies to the platforms it serves reach clients through the
outbox (:mod:`~hermes_actors.adapters.outbox`).

Plain WSGI on purpose: the standalone process serves it with gevent's ``WSGIServer`` (one
greenlet per request, so a long poll costs a greenlet, not a thread), and tests can call it
directly. The one gevent-specific detail, bounding gevent's read-and-discard of a refused
body (``_Request.linger``), is skipped on other servers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from hermes_actors.adapters.http_admin import ADMIN_PREFIX, AdminRoutes
from hermes_actors.adapters.http_admin_events import EVENTS_PATH, AdminEventStream, look
from hermes_actors.adapters.http_console import CONSOLE_PATH, console_asset, is_console
from hermes_actors.adapters.http_console import HEADERS as CONSOLE_HEADERS
from hermes_actors.adapters.http_metrics import CONTENT_TYPE, GatewayMetrics
from hermes_actors.adapters.http_requests import (
    RequestError,
    check_bearer,
    decode_json_body,
    decode_path,
    is_authorized,
    log_field,
    parse_content_length,
    parse_count,
    parse_message,
    parse_outbox_query,
    parse_query,
    unreadable_request,
)
from hermes_actors.adapters.http_stream import EventStream, StreamSlots, parse_stream_query
from hermes_actors.adapters.outbox import Outbox
from hermes_actors.errors import HermesActorsError, StoreBusyError, StoreError
from hermes_actors.model.dsn import scrub
from hermes_actors.model.entry import validate_session_key
from hermes_actors.model.timeutil import from_epoch, isoformat

__all__ = ["HttpApi", "Webhook", "WebhookRequest", "make_server", "no_delay"]

#: A platform's route handler: ``(lower-cased headers, body) -> (status, JSON body)``.
class WebhookRequest(NamedTuple):
    """What a platform's own route is given: the query, the headers (lower-case names) and
    the body (read, capped; empty for a ``GET``)."""

    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes


#: A platform's own route (``/slack/events``, ``/whatsapp/webhook``): ``(status, answer)``,
#: the answer JSON, or plain text when it is a ``str`` (a subscription's challenge).
Webhook = Callable[[WebhookRequest], tuple[int, Any]]

log = logging.getLogger("hermes_actors.http")
#: One line per answered request: method, path, status and milliseconds (a long poll's
#: time includes its wait).
access_log = logging.getLogger("hermes_actors.http.access")

_SESSIONS_PREFIX = "/v1/sessions/"
#: How much of an unread, refused body is read and dropped before closing (see ``linger``).
_LINGER_BYTES = 256 * 1024
_LINGER_SECONDS = 1.0
#: Answers to ``POST /v1/messages`` that count as refusing an invalid message.
_INVALID = frozenset({400, 408, 413, 422})
#: ``Retry-After`` (seconds) of a message refused because its session's queue is full.
_RETRY_AFTER = "5"
#: ``Retry-After`` seconds of a 503 when the store's write queue is full.
_BUSY_RETRY_AFTER = "1"
_REASONS = {
    200: "OK", 202: "Accepted", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
    404: "Not Found", 409: "Conflict",
    405: "Method Not Allowed", 408: "Request Timeout", 413: "Content Too Large",
    422: "Unprocessable Content", 429: "Too Many Requests",
    500: "Internal Server Error", 503: "Service Unavailable",
}  # fmt: skip


class _Response:
    """Status, headers and body of one answer (or, for a stream, its iterable body)."""

    def __init__(self, status: int, body: bytes, content_type: str,
                 headers: Iterable[tuple[str, str]] = (), *,
                 stream: EventStream | AdminEventStream | None = None) -> None:
        self.status = status
        self.body = body
        self.stream = stream
        length = () if stream is not None else (("Content-Length", str(len(body))),)
        self.headers = [("Content-Type", content_type), *length,
                        ("Cache-Control", "no-store"), *headers]


def _json(status: int, data: Any, headers: Iterable[tuple[str, str]] = ()) -> _Response:
    body = json.dumps(data, ensure_ascii=False).encode("utf-8")
    return _Response(status, body, "application/json; charset=utf-8", headers)


class _Request:
    """One request: its method, decoded path and query, and a capped body reader."""

    def __init__(self, environ: dict[str, Any], max_body: int,
                 body_timeout: float | None = None) -> None:
        self.environ = environ
        self.method = environ.get("REQUEST_METHOD", "GET").upper()
        self.path = decode_path(environ.get("PATH_INFO") or "/")
        self.query = environ.get("QUERY_STRING", "")
        self._max_body = max_body
        self._body_timeout = body_timeout
        self._chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
        declared = environ.get("CONTENT_LENGTH", "").strip()
        #: Whether a body may still sit unread on the connection.
        self.body_pending = self._chunked or (declared not in ("", "0"))

    def read_body(self) -> bytes:
        """The body, at most ``max_body`` bytes: 413 beyond it, read no further than that;
        408 when it does not arrive within ``body_timeout`` seconds (a slow-loris client
        must not hold a handler forever)."""
        if not self._body_timeout:
            return self._read_body()
        import gevent

        try:
            with gevent.Timeout(self._body_timeout):
                return self._read_body()
        except gevent.Timeout:  # (the rest of the body may still come: close after it)
            raise RequestError(
                408, f"request body not received within {self._body_timeout:g} s"
            ) from None

    def _read_body(self) -> bytes:
        try:
            return self._read_whole_body()
        except ConnectionError:  # the client went away mid-body: its mistake, no traceback
            raise RequestError(
                400, "the connection was closed before the request body arrived") from None

    def _read_whole_body(self) -> bytes:
        length = parse_content_length(self.environ.get("CONTENT_LENGTH"), self._max_body)
        stream = self.environ["wsgi.input"]
        if length is None:
            if not self._chunked:
                self.body_pending = False
                return b""
            try:
                data = stream.read(self._max_body + 1)
            except (TimeoutError, ConnectionError):
                raise
            except (OSError, ValueError) as exc:  # gevent's _InvalidClientInput: bad chunks
                raise RequestError(400, f"malformed chunked request body ({exc})") from None
            if len(data) > self._max_body:
                raise RequestError(413, f"request body too large: {len(data)} bytes "
                                        f"(limit {self._max_body})")
        else:
            chunks, remaining = [], length
            while remaining > 0:
                chunk = stream.read(remaining)
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
            data = b"".join(chunks)
        self.body_pending = False
        return data

    def linger(self) -> None:
        """After answering without reading the whole body: read and drop a little more of it
        (at most :data:`_LINGER_BYTES`, for at most :data:`_LINGER_SECONDS`), then make sure
        gevent does not read the rest.

        Closing a socket with unread input makes the kernel send a reset, which can destroy
        the answer before the client read it; a short bounded read lets a client that sent
        slightly too much see its 413. gevent would otherwise read and discard the whole
        body to reuse the connection, an unbounded read; the answer says
        ``Connection: close`` instead. Only gevent's input object is touched (its fields
``send_100_continue_enabled``, ``content_length``, ``position``, ``chunked_input``), and
only in gevent's tested range (``_versions.TESTED``).
        """
        stream: Any = self.environ.get("wsgi.input")
        if stream is None or not hasattr(stream, "send_100_continue_enabled"):
            return
        import gevent

        from hermes_actors._versions import in_tested_range

        if not in_tested_range("gevent", gevent.__version__):  # its Input's fields untested:
            return  # gevent reads and drops the rest itself (the answer closes anyway)

        stream.send_100_continue_enabled = False  # the answer is out: no "100 Continue" now
        left = _LINGER_BYTES
        with gevent.Timeout(_LINGER_SECONDS, False):
            try:
                while left > 0:
                    chunk = stream.read(min(left, 65536))
                    if not chunk:
                        break
                    left -= len(chunk)
            except (OSError, ValueError):  # the client went away or sent garbage
                pass
        stream.content_length = stream.position
        stream.chunked_input = False


class _Answer(list):
    """The WSGI body of an answer; ``close`` (called by the server after the body was
    written) lets the request linger over an unread body."""

    def __init__(self, body: bytes, request: _Request | None) -> None:
        super().__init__([body])
        self._request = request

    def close(self) -> None:
        """Called by the server once the answer was written."""
        if self._request is not None and self._request.body_pending:
            self._request.linger()


class HttpApi:
    """The WSGI application of the HTTP adapter for one gateway.

    ``gateway`` is a started :class:`~hermes_actors.runtime.gateway.Gateway`, ``outbox`` the
    :class:`Outbox` its HTTP-served adapters append to, ``settings`` the ``http`` config
    section (``token``, ``max_body``, ``platforms``). ``report`` returns the startup
    ``RecoveryReport`` (for ``/metrics``).
    """

    def __init__(self, gateway: Any, outbox: Outbox, settings: Any, *,
                 report: Callable[[], Any] = lambda: None,
                 webhooks: Mapping[str, Mapping[str, Webhook]] | None = None) -> None:
        self._gw = gateway
        self._outbox = outbox
        self._token = settings.token
        #: The operator routes' token (``http.admin_token``); ``None``: those routes are off.
        self._admin_token = getattr(settings, "admin_token", None)
        self._admin = AdminRoutes(gateway)
        self._max_body = int(settings.max_body)
        self._body_timeout = float(getattr(settings, "body_timeout", 0) or 0) or None
        self._platforms = tuple(settings.platforms)
        #: False while the process drains: new messages are refused with 503.
        self.accepting = True
        #: The Prometheus metrics served at ``/metrics``.
        self.metrics = GatewayMetrics(gateway, report=report, outbox=outbox)
        self._counted: dict[tuple[str, int], Any] = {}
        #: Open ``/v1/stream`` connections, at most ``http.max_streams``.
        self.streams = StreamSlots(int(getattr(settings, "max_streams", 256)))
        self._keepalive = float(getattr(settings, "stream_keepalive", 15.0))
        self._routes: dict[str, dict[str, Callable[[_Request], _Response]]] = {
            "/healthz": {"GET": self._healthz},
            "/metrics": {"GET": self._metrics},
            "/v1/messages": {"POST": self._post_message},
            "/v1/outbox": {"GET": self._get_outbox},
            "/v1/stream": {"GET": self._get_stream},
            "/v1/sessions": {"GET": self._list_sessions},
            _SESSIONS_PREFIX: {"GET": self._get_session},
        }
        #: Platforms' own routes (``/slack/events``, ``/whatsapp/webhook``), path -> method
        #: -> handler: authenticated by the platform's signature, not by the bearer token.
        self._webhooks = {path: dict(methods) for path, methods in (webhooks or {}).items()}
        for path, methods in self._webhooks.items():
            self._routes[path] = {method: self._webhook for method in methods}

    # -- WSGI -------------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> list[bytes]:
        """Answer one request (WSGI)."""
        began = time.perf_counter()
        request: _Request | None = None
        route = "other"
        try:
            request = _Request(environ, self._max_body, self._body_timeout)
            route = self._route_name(request.path)
            response = self._handle(request, route)
        except RequestError as exc:
            response = _json(exc.status, {"error": exc.message}, exc.headers)
        except StoreBusyError as exc:  # backed-up writes, not an outage: soon again
            log.warning("store busy answering %s: %s", route, exc)
            response = _json(503, {"error": f"the session store is busy: {exc}"},
                             [("Retry-After", _BUSY_RETRY_AFTER)])
        except StoreError as exc:
            log.error("store failure answering %s: %s", route, scrub(str(exc)))
            response = _json(503, {"error": "the session store is unavailable: "
                                            + scrub(str(exc))})
        except HermesActorsError as exc:  # the gateway is not running (stopping)
            response = _json(503, {"error": scrub(str(exc))})
        except Exception:  # noqa: BLE001 - never a traceback to a client
            log.exception("error answering %s %s", log_field(environ.get("REQUEST_METHOD")),
                          route)
            response = _json(500, {"error": "internal error (see the gateway log)"})
        if request is not None and request.body_pending:
            response.headers.append(("Connection", "close"))
        self._count(route, response.status)
        if access_log.isEnabledFor(logging.INFO):
            # (every client-given field escaped: a %0A in the path must not start a line)
            access_log.info("method=%s path=%s status=%d ms=%.1f",
                            log_field(environ.get("REQUEST_METHOD")),
                            log_field(environ.get("PATH_INFO")), response.status,
                            (time.perf_counter() - began) * 1000.0)
        reason = _REASONS.get(response.status, "")
        start_response(f"{response.status} {reason}", response.headers)
        if response.stream is not None:
            return response.stream  # type: ignore[return-value]  # an iterable with close()
        return _Answer(response.body, request)

    def _count(self, route: str, status: int) -> None:
        """Count an answer in ``hermes_http_requests``; each (route, status) child of the
        counter is looked up once (routes and statuses are few)."""
        child = self._counted.get((route, status))
        if child is None:
            child = self._counted[(route, status)] = self.metrics.requests.labels(
                route, str(status))
        child.inc()

    def _route_name(self, path: str) -> str:
        if path in self._routes:
            return path
        if is_console(path):
            return CONSOLE_PATH
        if path.startswith(_SESSIONS_PREFIX):
            return _SESSIONS_PREFIX
        if path.startswith(ADMIN_PREFIX):
            return ADMIN_PREFIX
        return "other"

    def _handle(self, request: _Request, route: str) -> _Response:
        if route == ADMIN_PREFIX:
            return self._handle_admin(request)
        if route == CONSOLE_PATH:
            return self._console(request)
        if route != "/healthz" and route not in self._webhooks:
            check_bearer(request.environ.get("HTTP_AUTHORIZATION"), self._token)
        methods = self._routes.get(route)
        if methods is None:
            raise RequestError(404, f"no such endpoint: {request.path}")
        handler = methods.get(request.method)
        if handler is None:
            allowed = ", ".join(methods)
            raise RequestError(
                405, f"method {request.method} is not allowed on {request.path} "
                f"(allowed: {allowed})", [("Allow", allowed)],
            )
        return handler(request)

    def _handle_admin(self, request: _Request) -> _Response:
        """An operator route: only ``http.admin_token`` opens it (not the ingress token);
        without one configured the routes do not exist (404)."""
        if not self._admin_token:
            raise RequestError(404, f"no such endpoint: {request.path} (the operator routes "
                               "are off: set http.admin_token)")
        check_bearer(request.environ.get("HTTP_AUTHORIZATION"), self._admin_token)
        if request.path == EVENTS_PATH:
            if request.method != "GET":
                raise RequestError(405, f"method {request.method} is not allowed on "
                                   f"{request.path} (allowed: GET)", [("Allow", "GET")])
            return self._admin_events(request)
        status, data = self._admin.handle(request.method, request.path, request.query)
        return _json(status, data)

    #: Seconds between two looks of ``GET /v1/admin/events`` (tests shorten it).
    admin_events_interval = 1.0

    def _admin_events(self, request: _Request) -> _Response:
        """``GET /v1/admin/events`` (:mod:`~hermes_actors.adapters.http_admin_events`)."""
        def take() -> dict[str, Any]:
            return look(self._admin.handle, request.query)

        first = take()  # (a bad query: its error answer, before any stream)
        if not self.streams.acquire():
            raise RequestError(503, f"too many open streams (http.max_streams is "
                               f"{self.streams.limit}); retry later",
                               [("Retry-After", _RETRY_AFTER)])
        stream = AdminEventStream(first, take, lambda s: not self._outbox.wait_closed(s),
                                  self.streams, interval=self.admin_events_interval,
                                  keepalive=self._keepalive)
        return _Response(200, b"", "text/event-stream; charset=utf-8",
                         [("X-Accel-Buffering", "no")], stream=stream)

    def _console(self, request: _Request) -> _Response:
        """The operator console's page and files: no token needed (they hold no data),
        but only while the operator routes are on."""
        found = console_asset(request.path) if self._admin_token else None
        if found is None:
            raise RequestError(404, f"no such endpoint: {request.path}" + (
                "" if self._admin_token else " (the console is off: set http.admin_token)"))
        if request.method != "GET":
            raise RequestError(405, f"method {request.method} is not allowed on "
                               f"{request.path} (allowed: GET)", [("Allow", "GET")])
        return _Response(200, *found, CONSOLE_HEADERS)

    # -- routes -----------------------------------------------------------------------------

    def _store_outage(self) -> bool:
        """Whether the gateway's database server is away (an outage reported, or the host
        replacing the gateway until the database is back: ``GatewaySlot.replacing``)."""
        if getattr(self._gw, "replacing", False):
            return True
        outage = getattr(self._gw, "outage", None)
        return outage is not None and outage.is_set()

    def _healthz(self, request: _Request) -> _Response:
        """Open to anyone; with ``http.token`` set, only a client that sends it learns more
        than the status (the pid and the node id are no business of a stranger's)."""
        outage = self.accepting and self._store_outage()
        running = self._gw.running and self.accepting and not outage
        status = "store_unavailable" if outage else "ok" if running else "stopping"
        body: dict[str, Any] = {"status": status}
        if not is_authorized(request.environ.get("HTTP_AUTHORIZATION"), self._token):
            return _json(200 if running else 503, body)
        body["pid"] = os.getpid()
        if outage:
            return _json(503, body)
        if self._gw.running:
            body["degraded"] = bool(self._gw.store.degraded)
            body["node_id"] = self._gw.store.node_id
        return _json(200 if running else 503, body)

    def _metrics(self, request: _Request) -> _Response:
        return _Response(200, self.metrics.render(), CONTENT_TYPE)

    def _post_message(self, request: _Request) -> _Response:
        ingress = self._gw.ingress
        if not self.accepting:
            ingress.refused("stopping")
            raise RequestError(503, "the gateway is shutting down; send the message again later")
        try:
            message = parse_message(decode_json_body(request.read_body()),
                                    platforms=self._platforms)
            try:
                event = message.to_event()
                key = validate_session_key(self._gw.store.session_key_for(event.source))
            except (TypeError, ValueError) as exc:
                raise RequestError(422, str(exc)) from None
        except RequestError as exc:
            if exc.status in _INVALID:
                ingress.refused("invalid")
            raise
        admission = self._gw.admit(event)
        if admission.refused is not None:
            # Nothing of it was kept: the client sends it again later.
            return _json(429, {"error": admission.refused}, [("Retry-After", _RETRY_AFTER)])
        body = {"session_key": key, "event_id": admission.event_id,
                "queue_depth": admission.queue_depth}
        if admission.duplicate:
            return _json(200, {**body, "duplicate": True})
        return _json(202, body)

    def _webhook(self, request: _Request) -> _Response:
        """A platform's own route (Slack's events, WhatsApp's webhook): its handler
        authenticates the request and answers a push once what it carries is durable."""
        method = request.method
        body = b""
        if method == "POST":
            if not self.accepting:
                self._gw.ingress.refused("stopping")
                raise RequestError(503, "the gateway is shutting down; send it again later")
            body = request.read_body()
        headers = {name[5:].replace("_", "-").lower(): value
                   for name, value in request.environ.items()
                   if name.startswith("HTTP_") and isinstance(value, str)}
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(request.query).items()}
        status, data = self._webhooks[request.path][method](
            WebhookRequest(query, headers, body))
        if isinstance(data, str):
            return _Response(status, data.encode("utf-8"), "text/plain; charset=utf-8")
        return _json(status, data)

    def _get_outbox(self, request: _Request) -> _Response:
        query = parse_outbox_query(request.query, platforms=self._platforms)
        if self._store_outage():  # at once, not after the read pool's timeout
            raise RequestError(503, "the session store is unavailable: the gateway is "
                               "waiting for its database; try again later",
                               [("Retry-After", _RETRY_AFTER)])
        after = self._outbox.head() if query.after is None else query.after
        rows = self._outbox.wait(query.platform, query.chat_id, after, query.wait, query.limit)
        return _json(200, {
            "messages": [_outbox_message(row) for row in rows],
            "cursor": rows[-1]["cursor"] if rows else after,
        })  # fmt: skip

    def _get_stream(self, request: _Request) -> _Response:
        platform, chat_id, after = parse_stream_query(
            request.query, request.environ.get("HTTP_LAST_EVENT_ID"), platforms=self._platforms)
        start = self._outbox.head() if after is None else after
        if not self.streams.acquire():
            raise RequestError(503, f"too many open streams (http.max_streams is "
                               f"{self.streams.limit}); use GET /v1/outbox or retry later",
                               [("Retry-After", _RETRY_AFTER)])
        stream = EventStream(self._outbox, self.streams, platform, chat_id, start,
                             self._keepalive, _outbox_message)
        return _Response(200, b"", "text/event-stream; charset=utf-8",
                         [("X-Accel-Buffering", "no")], stream=stream)

    def _list_sessions(self, request: _Request) -> _Response:
        limit = parse_count(parse_query(request.query))
        entries = self._gw.list_sessions()
        entries.sort(key=_recency, reverse=True)
        return _json(200, {
            "count": len(entries),
            "sessions": [entry.to_dict() for entry in entries[:limit]],
        })  # fmt: skip

    def _get_session(self, request: _Request) -> _Response:
        key = request.path[len(_SESSIONS_PREFIX):]
        entry = self._gw.session_entry(key) if key else None
        if entry is None:
            raise RequestError(404, f"no session with key {key!r}")
        tail = parse_count(parse_query(request.query), "tail", default=20, minimum=0)
        stats = self._gw.session_statistics(key)
        # only the tail is read: a long transcript is never loaded whole for a look at it
        transcript = self._gw.store.load_transcript_tail(entry.session_id, tail) if tail else []
        return _json(200, {
            "entry": entry.to_dict(),
            "queue_depth": stats.queue_depth if stats is not None else 0,
            "running": bool(stats.running) if stats is not None else False,
            "transcript_tail": transcript,
        })  # fmt: skip


def _recency(entry: Any) -> float:
    when = entry.updated_at or entry.created_at
    return when.timestamp() if when else 0.0


def _outbox_message(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "cursor": row["cursor"],
        "session_key": row["session_key"],
        "chat_id": row["chat_id"],
        "thread_id": row["thread_id"],
        "text": row["text"],
        "kind": row["kind"],
        "created_at": isoformat(from_epoch(row["created_at"])),
        "in_reply_to": (row.get("in_reply_to") or "").split(),
        # the final answer of every event it names (an acknowledgement is not)
        "final": row["kind"] != "ack",
    }


def _raw_answer(status: int, data: Any) -> bytes:
    """A whole HTTP/1.1 answer, head and JSON body, closing the connection (what the server
    sends when it cannot hand a request to the application)."""
    response = _json(status, data, [("Connection", "close")])
    head = f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in response.headers)
    return head.encode("latin-1") + b"\r\n" + response.body


def no_delay(sock: Any) -> None:
    """Send small writes at once on ``sock`` (``TCP_NODELAY``; not a TCP socket: nothing).

    gevent's server writes an answer's headers and its body in two ``send`` calls. With
    Nagle's algorithm the body then waits for the client to acknowledge the headers, and a
    client delays that acknowledgement by up to 40 ms hoping to piggyback it: every answer
    on a kept-alive connection took ~44 ms (measured: ``benchmarks http``, 88 ms a turn).
    """
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


#: Defaults of :func:`make_server`'s limits (``http.max_connections``, ``http.header_timeout``,
#: ``http.keepalive_timeout``).
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_KEEPALIVE_TIMEOUT = 15.0


class _HeadTimeout(ValueError):
    """The request line and headers did not arrive within ``http.header_timeout`` (raised
    into the handler's greenlet by its deadline; a ``ValueError`` so that gevent hands it
    to ``_handle_client_error`` like any other unreadable head)."""


def make_server(app: Any, host: str, port: int, *,
                socket_timeout: float | None = None,
                max_connections: int = DEFAULT_MAX_CONNECTIONS,
                header_timeout: float | None = DEFAULT_HEADER_TIMEOUT,
                keepalive_timeout: float | None = DEFAULT_KEEPALIVE_TIMEOUT) -> Any:
    """A gevent ``WSGIServer`` for ``app`` bound to ``host:port`` (``port`` 0 picks a free
    one: read ``server.server_port``); every accepted connection sends without delay
    (:func:`no_delay`). The application logs its own access lines (``access_log``); server
    errors go to ``hermes_actors.http`` at ERROR.

    What a client can hold (slow loris):

    * ``max_connections`` connections are served at once (a ``gevent.pool.Pool`` spawns
      their handlers); while it is full the server stops accepting, so further connections
      wait in the listen backlog (and the kernel refuses them beyond it) until one closes;
    * ``header_timeout``: the whole request line and headers must arrive within that many
      seconds of the connection being accepted (of the first byte of the request, on a
      kept-alive connection), however slowly the client dribbles them; then it is answered
      408 and closed. ``None``: no deadline;
    * ``keepalive_timeout``: a kept-alive connection idle that long between requests is
      closed;
    * ``socket_timeout`` bounds each read and write on a connection (``http.body_timeout``):
      a client that stops sending or reading mid-request is cut off."""
    import gevent
    from gevent.pool import Pool
    from gevent.pywsgi import MAX_REQUEST_LINE, LoggingLogAdapter, WSGIHandler, WSGIServer

    class _Handler(WSGIHandler):
        #: Requests whose head this connection began to send.
        _requests = 0
        #: The running header deadline (a ``gevent.Timeout``), between the request line's
        #: first byte and the end of the headers.
        _deadline: Any = None

        def handle(self) -> None:
            try:
                super().handle()
            finally:
                self._cancel_deadline()

        def read_requestline(self) -> str:
            # (gevent's hook: called once per request, before the headers are read)
            if self._requests and not self._next_request_begins():
                return ""  # idle too long, or the client closed: close the connection
            self._requests += 1
            if header_timeout:
                self._deadline = gevent.Timeout(header_timeout, _HeadTimeout(
                    f"request line and headers not received within {header_timeout:g} s"))
                self._deadline.start()
            try:
                line = super().read_requestline()
            except _HeadTimeout as exc:
                self._cancel_deadline()
                with contextlib.suppress(OSError):
                    self.socket.sendall(_raw_answer(408, {"error": str(exc)}))
                return ""
            if not line or len(line) >= MAX_REQUEST_LINE:  # read_request is not called
                self._cancel_deadline()
            return line

        def read_request(self, raw_requestline: str) -> Any:
            try:
                return super().read_request(raw_requestline)
            finally:
                self._cancel_deadline()  # the application runs without it

        def _next_request_begins(self) -> bool:
            """Wait (at most ``keepalive_timeout``) for the next request on a kept-alive
            connection: whether its first byte came."""
            sock, rfile = self.socket, self.rfile
            if rfile is None or getattr(rfile, "closed", False):
                return False
            if not keepalive_timeout:
                return True
            previous = sock.gettimeout()
            try:
                sock.settimeout(keepalive_timeout)
                return bool(rfile.peek(1))
            except OSError:  # idle for keepalive_timeout (socket.timeout), or a reset
                return False
            finally:
                with contextlib.suppress(OSError):
                    sock.settimeout(previous)

        def _cancel_deadline(self) -> None:
            if self._deadline is not None:
                self._deadline.close()
                self._deadline = None

        def _handle_client_error(self, ex: BaseException) -> tuple[str, bytes]:
            if isinstance(ex, _HeadTimeout):
                return "408", _raw_answer(408, {"error": str(ex)})
            super()._handle_client_error(ex)  # (logs it)
            headers = getattr(self, "headers", None)  # (when the head was read that far)
            length = headers.get("content-length") if headers is not None else None
            return "400", _raw_answer(400, {"error": unreadable_request(length)})

    class _Server(WSGIServer):
        handler_class = _Handler

        def handle(self, sock: Any, address: Any) -> Any:
            no_delay(sock)
            if socket_timeout:
                sock.settimeout(socket_timeout)
            return super().handle(sock, address)

    server = _Server(
        (host, port), app, log=None, spawn=Pool(max_connections),
        error_log=LoggingLogAdapter(logging.getLogger("hermes_actors.http"), logging.ERROR),
    )
    server.init_socket()
    return server
