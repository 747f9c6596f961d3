"""The raw HTTP bounds of the ``http`` and ``sse`` scenarios: what the server stack alone
costs for the same requests and answers, with nothing of the gateway behind it.

:class:`RawApi` is a minimal WSGI application served by the very server the gateway uses
(:func:`serve`: :func:`hermes_actors.adapters.http.make_server` with the ``http`` settings
of a default configuration), speaking the same wire format to the same clients
(:mod:`benchmarks.httpload`): ``POST /v1/messages`` reads the JSON body, keeps an echo of
it in a dict under its chat and answers ``202`` with an event id; ``GET /v1/outbox`` (long
poll) and ``GET /v1/stream`` (Server-Sent Events) answer from that dict, a waiting reader
woken by its chat's gevent ``Event``. No store, no actor, no turn: the ratio of the
gateway's figure to this one is the share of the stack's own ceiling the gateway reaches.

Imported only in (gevent-patched) children.
"""

from __future__ import annotations

import itertools
import json
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["RawApi", "serve"]

_JSON = [("Content-Type", "application/json; charset=utf-8")]


def serve(app: Any, http: Any) -> Any:
    """``app`` on a started gevent server on a free loopback port, built as the standalone
    process builds the gateway's (``hermes_actors.process.standalone``): same server class,
    connection pool, handler and limits (``http``: the config's ``http`` section)."""
    from hermes_actors.adapters.http import make_server

    server = make_server(app, "127.0.0.1", 0, socket_timeout=http.body_timeout,
                         max_connections=http.max_connections,
                         header_timeout=http.header_timeout,
                         keepalive_timeout=http.keepalive_timeout)
    server.start()
    return server


class _Chat:
    """One chat's replies (as the outbox returns them) and the event its readers wait on."""

    __slots__ = ("rows", "woken")

    def __init__(self) -> None:
        import gevent.event

        self.rows: list[dict[str, Any]] = []
        self.woken = gevent.event.Event()

    def after(self, cursor: int) -> list[dict[str, Any]]:
        return [row for row in self.rows if row["cursor"] > cursor]

    def wait(self, timeout: float) -> None:
        self.woken.wait(timeout)


class RawApi:
    """The raw bound's WSGI application (see the module docstring)."""

    def __init__(self, keepalive: float = 15.0) -> None:
        self._chats: dict[str, _Chat] = {}
        self._cursors = itertools.count(1)
        self._events = itertools.count(1)
        self._keepalive = keepalive
        self._closed = False
        self._routes: dict[tuple[str, str], Callable[..., Any]] = {
            ("POST", "/v1/messages"): self._post,
            ("GET", "/v1/outbox"): self._poll,
            ("GET", "/v1/stream"): self._stream,
        }

    def __call__(self, environ: dict[str, Any], start_response: Callable) -> Any:
        handler = self._routes.get((environ["REQUEST_METHOD"], environ["PATH_INFO"]))
        if handler is None:
            start_response("404 Not Found", [("Content-Length", "0")])
            return [b""]
        return handler(environ, start_response)

    def close(self) -> None:
        """End every open stream (as the gateway's outbox does at shutdown)."""
        self._closed = True
        for chat in self._chats.values():
            chat.woken.set()

    def _chat(self, chat_id: str) -> _Chat:
        chat = self._chats.get(chat_id)
        if chat is None:
            chat = self._chats[chat_id] = _Chat()
        return chat

    def _post(self, environ: dict[str, Any], start_response: Callable) -> list[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        message = json.loads(environ["wsgi.input"].read(length))
        event_id = f"e{next(self._events)}"
        chat = self._chat(message["chat_id"])
        chat.rows.append({"cursor": next(self._cursors), "chat_id": message["chat_id"],
                          "text": "echo: " + message["text"], "kind": "reply",
                          "in_reply_to": [event_id], "final": True})
        chat.woken.set()  # wake its readers; the next wait needs a fresh event
        chat.woken = type(chat.woken)()
        return _answer(start_response, "202 Accepted", {"event_id": event_id})

    def _poll(self, environ: dict[str, Any], start_response: Callable) -> list[bytes]:
        query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        chat = self._chat(query["chat_id"][0])
        after = int(query.get("after", ["0"])[0])
        rows = chat.after(after)
        if not rows:
            chat.wait(float(query.get("wait", ["0"])[0]))
            rows = chat.after(after)
        cursor = rows[-1]["cursor"] if rows else after
        return _answer(start_response, "200 OK", {"messages": rows, "cursor": cursor})

    def _stream(self, environ: dict[str, Any], start_response: Callable) -> Iterator[bytes]:
        query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        chat = self._chat(query["chat_id"][0])
        start_response("200 OK", [("Content-Type", "text/event-stream; charset=utf-8"),
                                  ("Cache-Control", "no-store")])
        return self._events_of(chat, chat.rows[-1]["cursor"] if chat.rows else 0)

    def _events_of(self, chat: _Chat, cursor: int) -> Iterator[bytes]:
        yield f"retry: 2000\nid: {cursor}\n\n".encode()
        while not self._closed:
            rows = chat.after(cursor)
            if not rows:
                chat.wait(self._keepalive)
                rows = chat.after(cursor)
            if rows:
                cursor = rows[-1]["cursor"]
                yield b"".join(
                    f"id: {row['cursor']}\nevent: message\ndata: "
                    f"{json.dumps(row, separators=(',', ':'))}\n\n".encode() for row in rows)
            elif not self._closed:
                yield b": keep-alive\n\n"


def _answer(start_response: Callable, status: str, data: Any) -> list[bytes]:
    body = json.dumps(data).encode()
    start_response(status, [*_JSON, ("Content-Length", str(len(body)))])
    return [body]
