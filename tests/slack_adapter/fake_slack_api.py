"""A fake Slack Web API on loopback, written for these tests, and signed Events API posts.

It answers the methods the adapter calls (``auth.test``, ``chat.postMessage``, and with the
app-level token ``apps.connections.open``, whose URL is :attr:`FakeSlackApi.socket_url`, a
fake Socket Mode server's) as Slack does: ``POST <base>/<method>`` with the token in ``Authorization: Bearer``, ``{"ok": true,
...}`` or ``{"ok": false, "error": ...}``; a rate limit is ``429`` with ``Retry-After``.
Tests inject failures (:meth:`FakeSlackApi.fail`) and wait for what the gateway did
(:meth:`FakeSlackApi.wait_for`) on a condition notified at every request: nothing sleeps.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from loopback import serve, wait_notified
from slack_sdk.signature import SignatureVerifier

#: The bot token and signing secret the fake (and the signed posts) use.
TOKEN = "xoxb-1111-2222-TEST-secret-slack-token"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
APP_TOKEN = "xapp-1-A0APP-1234-0123456789abcdef-secret-app-token"
BOT_USER = "U0BOT"
TEAM = "T0TEAM"


@dataclass
class Call:
    """One request the fake answered."""

    method: str
    params: dict[str, Any]
    ok: bool = True
    at: float = field(default_factory=time.monotonic)


class FakeSlackApi:
    """The server; ``url`` is its Web API root (``slack.api_base_url``)."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.cond = threading.Condition()
        self.calls: list[Call] = []
        #: (method, status, error, retry_after, times left)
        self.failures: list[list[Any]] = []
        self.next_ts = 1
        #: The app-level token and what ``apps.connections.open`` hands out.
        self.app_token = APP_TOKEN
        self.socket_url: str | None = None
        self.server = serve(self._handle)
        self.url = f"http://127.0.0.1:{self.server.server_port}/api/"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def fail(self, method: str, status: int, error: str, *, retry_after: int | None = None,
             times: int = 1) -> None:
        """Answer the next ``times`` calls of ``method`` with an error."""
        with self.cond:
            self.failures.append([method, status, error, retry_after, times])

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
        return wait_notified(self.cond, predicate, timeout, lambda: f"calls: {self.calls[-10:]}")

    def posted(self, channel: str | None = None) -> list[Call]:
        """The ``chat.postMessage`` calls that succeeded (to ``channel``), in order."""
        with self.cond:
            return [c for c in self.calls if c.method == "chat.postMessage" and c.ok
                    and (channel is None or c.params.get("channel") == channel)]

    def attempts(self, channel: str) -> list[Call]:
        with self.cond:
            return [c for c in self.calls if c.method == "chat.postMessage"
                    and c.params.get("channel") == channel]

    def wait_posted(self, count: int, channel: str | None = None,
                    timeout: float = 30.0) -> list[Call]:
        return self.wait_for(lambda: len(self.posted(channel)) >= count
                             and self.posted(channel), timeout)

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        method = request.path.rsplit("/", 1)[-1]
        length = int(request.headers.get("Content-Length") or 0)
        raw = request.rfile.read(length).decode("utf-8") if length else ""
        if "json" in (request.headers.get("Content-Type") or ""):
            params = json.loads(raw or "{}")
        else:
            params = {k: v[0] for k, v in urllib.parse.parse_qs(raw).items()}
        headers: dict[str, str] = {}
        with self.cond:
            status, body = self._answer(method, params, request.headers, headers)
            self.calls.append(Call(method, params, ok=bool(body.get("ok"))))
            self.cond.notify_all()
        data = json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json; charset=utf-8")
        request.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            request.send_header(name, value)
        request.end_headers()
        request.wfile.write(data)

    def _answer(self, method: str, params: dict, request_headers: Any,
                headers: dict[str, str]) -> tuple[int, dict]:
        if method == "apps.connections.open":
            if request_headers.get("Authorization") != f"Bearer {self.app_token}":
                return 200, {"ok": False, "error": "invalid_auth"}
            return 200, {"ok": True, "url": self.socket_url or "ws://127.0.0.1:9/none"}
        if request_headers.get("Authorization") != f"Bearer {self.token}":
            return 200, {"ok": False, "error": "invalid_auth"}
        for failure in self.failures:
            if failure[0] == method and failure[4] > 0:
                failure[4] -= 1
                if failure[3] is not None:
                    headers["Retry-After"] = str(failure[3])
                return failure[1], {"ok": False, "error": failure[2]}
        if method == "auth.test":
            return 200, {"ok": True, "url": "https://test.slack.com/", "team": "Test",
                         "user": "hermes", "team_id": TEAM, "user_id": BOT_USER,
                         "bot_id": "B0BOT"}
        if method == "chat.postMessage":
            ts = f"1700000000.{self.next_ts:06d}"
            self.next_ts += 1
            return 200, {"ok": True, "channel": params.get("channel"), "ts": ts,
                         "message": {"text": params.get("text"), "ts": ts}}
        return 200, {"ok": False, "error": "unknown_method"}


def signed(body: dict[str, Any], *, secret: str = SIGNING_SECRET,
           timestamp: int | None = None, retry: int | None = None
           ) -> tuple[bytes, dict[str, str]]:
    """``body`` as Slack posts it: its bytes and the signature headers."""
    raw = json.dumps(body).encode()
    ts = str(int(time.time()) if timestamp is None else timestamp)
    headers = {"Content-Type": "application/json", "X-Slack-Request-Timestamp": ts,
               "X-Slack-Signature": SignatureVerifier(secret).generate_signature(
                   timestamp=ts, body=raw)}
    if retry is not None:
        headers["X-Slack-Retry-Num"] = str(retry)
        headers["X-Slack-Retry-Reason"] = "http_timeout"
    return raw, headers


_EVENTS = iter(range(1, 1_000_000))


def message(channel: str, text: str, *, user: str = "U0ALICE", channel_type: str = "channel",
            thread_ts: str | None = None, event_id: str | None = None, team: str = TEAM,
            **fields: Any) -> dict[str, Any]:
    """An ``event_callback`` carrying one ``message`` event."""
    number = next(_EVENTS)
    event: dict[str, Any] = {"type": "message", "channel": channel, "user": user,
                             "text": text, "ts": f"1700000100.{number:06d}",
                             "channel_type": channel_type, "team": team, **fields}
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return {"token": "verification-token", "team_id": team, "api_app_id": "A0APP",
            "type": "event_callback", "event_id": event_id or f"Ev{number:08d}",
            "event_time": int(time.time()), "event": event}
