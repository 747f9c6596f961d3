"""A fake OpenAI-compatible chat-completions server on 127.0.0.1, for ``OpenAIAgent`` tests.

It records every request, answers from a queue of canned responses (default: a fixed
completion), can hold a request open until the test releases it, and can drop a kept-alive
connection after answering, the way servers with an idle timeout do.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeChatServer", "Seen", "completion"]


def completion(content: str | None = "hello from the model", *, prompt_tokens: int = 11,
               completion_tokens: int = 4) -> dict[str, Any]:
    """A chat-completions response body."""
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "model": "fake",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


@dataclass(frozen=True)
class Seen:
    """One request as the server received it."""

    path: str
    headers: dict[str, str]
    body: Any
    #: The client's (host, port): the same port twice means a reused connection.
    peer: tuple[str, int]


@dataclass
class _State:
    seen: list[Seen] = field(default_factory=list)
    responses: list[tuple[int, bytes]] = field(default_factory=list)
    hold: bool = False
    drop_after_response: bool = False
    received: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        state = self.server.state
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw
        state.seen.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()},
                               body, self.client_address[:2]))
        state.received.set()
        if state.hold:
            state.release.wait(30)
        status, payload = (state.responses.pop(0) if state.responses
                           else (200, json.dumps(completion()).encode()))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        if state.drop_after_response:
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: _State

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-answer (an interrupt) is expected, not an error."""


class FakeChatServer:
    """The fake server, serving from a background thread until ``close()``."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.state = self.state = _State()
        #: ``http://127.0.0.1:<port>/v1``.
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()

    @property
    def seen(self) -> list[Seen]:
        """Every request received so far."""
        return self.state.seen

    def respond(self, status: int, body: Any) -> None:
        """Answer the next request with ``status`` and ``body`` (bytes as they are, else JSON)."""
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.state.responses.append((status, payload))

    def close(self) -> None:
        """Release held requests and stop serving."""
        self.state.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
