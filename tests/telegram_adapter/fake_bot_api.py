"""A fake Telegram Bot API server on loopback, written for these tests.

It speaks the four methods the adapter uses (``getMe``, ``getUpdates``, ``sendMessage``,
``sendChatAction``) the way Telegram does: ``/bot<token>/<method>``, parameters in the query
string or the body, ``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code",
"description", "parameters"}``. ``getUpdates`` confirms every update below its ``offset`` and
long-polls up to its ``timeout`` for new ones. Tests add updates (:meth:`FakeBotApi.message`),
inject errors (:meth:`FakeBotApi.fail`, :meth:`FakeBotApi.block`) and wait for what the
gateway did (:meth:`FakeBotApi.wait_for`) on a condition notified at every request, so
nothing sleeps.
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

#: The token the fake accepts.
TOKEN = "123456789:TEST-secret-token-for-the-fake-api"
BOT = {"id": 123456789, "is_bot": True, "first_name": "Hermes", "username": "hermes_test_bot"}
#: The longest a getUpdates long poll is held, whatever the client asks.
MAX_HOLD = 30.0


@dataclass
class Call:
    """One request the fake answered."""

    method: str
    params: dict[str, str]
    at: float = field(default_factory=time.monotonic)


@dataclass
class _Failure:
    method: str
    status: int
    description: str
    retry_after: float | None
    chat_id: str | None
    times: int
    after: int
    offset_from: int | None = None


class FakeBotApi:
    """The server; ``url`` is its base URL (``api_base_url``)."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.cond = threading.Condition()
        self.calls: list[Call] = []
        self.pending: list[dict[str, Any]] = []
        self.next_update = 1000
        self.next_message = 1
        self.failures: list[_Failure] = []
        self.blocked: set[str] = set()
        self.closed = False
        #: getUpdates calls being answered now, and the most there ever were at once (one
        #: bot polled by two processes shows 2: Telegram answers that with 409 Conflict).
        self.polling = 0
        self.max_polling = 0
        #: Seconds every getUpdates is held at least, whatever its timeout (a slow server).
        self.min_hold = 0.0
        self.server = serve(self._handle)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    # -- what tests do ------------------------------------------------------------------------

    def message(self, chat: dict[str, Any], text: str | None = None, *, user: dict | None = None,
                thread_id: int | None = None, **content: Any) -> int:
        """Queue an update carrying a message in ``chat``; returns its ``update_id``."""
        with self.cond:
            update_id = self.next_update
            self.next_update += 1
            message_id = self.next_message
            self.next_message += 1
            message: dict[str, Any] = {
                "message_id": message_id, "date": int(time.time()), "chat": chat,
                "from": user or {"id": 7, "is_bot": False, "first_name": "Alice"},
            }
            if text is not None:
                message["text"] = text
            if thread_id is not None:
                message["message_thread_id"] = thread_id
                message["is_topic_message"] = True
            message.update(content)
            self.pending.append({"update_id": update_id, "message": message})
            self.cond.notify_all()
        return update_id

    def fail(self, method: str, status: int, description: str, *, retry_after: float | None = None,
             chat_id: object = None, times: int = 1, after: int = 0,
             offset_from: int | None = None) -> None:
        """Answer ``times`` calls of ``method`` (to ``chat_id``, if given; for getUpdates,
        only those with an ``offset`` of at least ``offset_from``, if given: polls that
        would acknowledge) with an error, once ``after`` such calls have succeeded."""
        with self.cond:
            self.failures.append(_Failure(method, status, description, retry_after,
                                          None if chat_id is None else str(chat_id), times,
                                          after, offset_from))

    def block(self, chat_id: object) -> None:
        """Every send to ``chat_id`` from now on is refused with 403 (the bot was blocked)."""
        with self.cond:
            self.blocked.add(str(chat_id))

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
        """Wait until ``predicate()`` (called under the lock) is truthy; returns its value."""
        return wait_notified(self.cond, predicate, timeout, lambda: (
            f"fake Bot API calls: {[(c.method, c.params) for c in self.calls][-15:]}"))

    def of(self, method: str) -> list[Call]:
        """The calls of ``method`` so far."""
        with self.cond:
            return [c for c in self.calls if c.method == method]

    def sent(self, chat_id: object = None) -> list[Call]:
        """Successful ``sendMessage`` calls (to ``chat_id``, if given)."""
        with self.cond:
            return [c for c in self.calls if c.method == "sendMessage" and c.params.get("ok")
                    and (chat_id is None or c.params["chat_id"] == str(chat_id))]

    def wait_sent(self, count: int, chat_id: object = None, timeout: float = 30.0) -> list[Call]:
        """Wait for ``count`` successful sends (to ``chat_id``); returns them."""
        return self.wait_for(lambda: (lambda s: s if len(s) >= count else None)(
            [c for c in self.calls if c.method == "sendMessage" and c.params.get("ok")
             and (chat_id is None or c.params["chat_id"] == str(chat_id))]), timeout)

    def acknowledged(self) -> int:
        """The highest offset any getUpdates sent (every update below it is confirmed)."""
        with self.cond:
            offsets = [int(c.params.get("offset") or 0) for c in self.calls
                       if c.method == "getUpdates"]
            return max(offsets, default=0)

    # -- the API ------------------------------------------------------------------------------

    def _handle(self, request: BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(request.path)
        params = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        length = int(request.headers.get("Content-Length") or 0)
        if length:
            body = request.rfile.read(length).decode("utf-8")
            if request.headers.get("Content-Type", "").startswith("application/json"):
                params.update({k: str(v) for k, v in json.loads(body).items()})
            else:
                params.update(urllib.parse.parse_qsl(body, keep_blank_values=True))
        prefix, _, method = url.path.lstrip("/").partition("/")
        if prefix != f"bot{self.token}":
            status, answer = 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
            self._record(method, params)
        else:
            status, answer = self._answer(method, params)
        data = json.dumps(answer).encode("utf-8")
        try:
            request.send_response(status)
            request.send_header("Content-Type", "application/json")
            request.send_header("Content-Length", str(len(data)))
            request.end_headers()
            request.wfile.write(data)
        except OSError:
            pass  # the client went away (a killed gateway)

    def _record(self, method: str, params: dict[str, str]) -> Call:
        with self.cond:
            call = Call(method, params)
            self.calls.append(call)
            self.cond.notify_all()
            return call

    def _failure(self, method: str, params: dict[str, str]) -> tuple[int, dict] | None:
        with self.cond:
            chat = params.get("chat_id")
            if method in ("sendMessage", "sendChatAction") and chat in self.blocked:
                return 403, _error(403, "Forbidden: bot was blocked by the user")
            for failure in self.failures:
                if failure.offset_from is not None and int(
                        params.get("offset") or 0) < failure.offset_from:
                    continue
                if failure.method == method and failure.chat_id in (None, chat):
                    if failure.after > 0:
                        failure.after -= 1
                        continue
                    failure.times -= 1
                    if failure.times <= 0:
                        self.failures.remove(failure)
                    return failure.status, _error(failure.status, failure.description,
                                                  failure.retry_after)
        return None

    def _answer(self, method: str, params: dict[str, str]) -> tuple[int, dict]:
        call = self._record(method, params)
        if method == "getUpdates":
            return self._failure(method, params) or (200, {"ok": True,
                                                           "result": self._get_updates(params)})
        failed = self._failure(method, params)
        if failed is not None:
            return failed
        if method == "getMe":
            return 200, {"ok": True, "result": BOT}
        if method == "sendChatAction":
            return 200, {"ok": True, "result": True}
        if method == "sendMessage":
            with self.cond:
                call.params["ok"] = "1"
                message_id = self.next_message
                self.next_message += 1
                self.cond.notify_all()
            return 200, {"ok": True, "result": {
                "message_id": message_id, "date": int(time.time()), "text": params.get("text"),
                "chat": {"id": int(params["chat_id"]), "type": "private"}, "from": BOT,
            }}  # fmt: skip
        return 404, _error(404, "Not Found: method not found")

    def _get_updates(self, params: dict[str, str]) -> list[dict]:
        offset = int(params.get("offset") or 0)
        start = time.monotonic()
        # held until an update comes or the timeout passes, and never less than min_hold
        deadline = start + max(min(float(params.get("timeout") or 0), MAX_HOLD),
                               self.min_hold)
        with self.cond:
            self.polling += 1
            self.max_polling = max(self.max_polling, self.polling)
            try:
                # An offset confirms every update below it: Telegram forgets them.
                self.pending = [u for u in self.pending if u["update_id"] >= offset]
                while not self.closed:
                    now = time.monotonic()
                    until = min(deadline, start + self.min_hold) if self.pending else deadline
                    if now >= until:
                        break
                    self.cond.wait(until - now)
                return list(self.pending[:100])
            finally:
                self.polling -= 1
                self.cond.notify_all()


def _error(status: int, description: str, retry_after: float | None = None) -> dict:
    answer: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if retry_after is not None:
        answer["parameters"] = {"retry_after": retry_after}
    return answer


def private(chat_id: int = 42, first_name: str = "Alice") -> dict[str, Any]:
    """A private chat."""
    return {"id": chat_id, "type": "private", "first_name": first_name}


def group(chat_id: int = -100123, title: str = "Ops room", *, forum: bool = False) -> dict:
    """A supergroup (a forum when ``forum``)."""
    chat: dict[str, Any] = {"id": chat_id, "type": "supergroup", "title": title}
    if forum:
        chat["is_forum"] = True
    return chat
