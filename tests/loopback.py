"""``serve(handle)``: a threaded HTTP server on loopback for the tests' fake platform APIs
(Telegram's Bot API, Slack's Web API, WhatsApp's Graph API): every GET and POST goes to
``handle(request)``; the server runs in a daemon thread until ``server.shutdown()``.
``wait_notified``: how a test waits for what such a fake saw (its condition is notified at
every request, so nothing polls)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def serve(handle: Callable[[BaseHTTPRequestHandler], None]) -> ThreadingHTTPServer:
    """Start the server on a free loopback port (``server.server_port``)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            handle(self)

        do_POST = do_GET

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


def wait_notified(cond: threading.Condition, predicate: Callable[[], Any], timeout: float,
                  state: Callable[[], object]) -> Any:
    """``predicate()``'s value once it is truthy: asked under ``cond`` at once and at each
    of its notifications. Past ``timeout`` seconds an ``AssertionError`` says so, with
    ``state()`` (what the fake saw last)."""
    with cond:
        value = cond.wait_for(predicate, timeout)
        if not value:
            raise AssertionError(f"condition not met within {timeout:g}s; {state()}")
        return value
