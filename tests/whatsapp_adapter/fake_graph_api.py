"""A fake WhatsApp Cloud API (Graph API) server on loopback, written for these tests.

It answers the two calls the adapter makes, ``GET /<phone number id>`` and ``POST /<phone
number id>/messages`` (``Authorization: Bearer <token>``, Meta's ``{"error": {"message",
"code"}}`` on failure), and posts webhooks to the gateway the way Meta does (signed with the
app secret). Tests inject failures (:meth:`FakeGraphApi.fail`) and wait for what the gateway
sent (:meth:`FakeGraphApi.wait_sent`) on a condition notified at every request: nothing
sleeps.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from loopback import serve, wait_notified

TOKEN = "EAAG-test-access-token-for-the-fake-graph-api"
APP_SECRET = "test-app-secret-0123456789"
VERIFY_TOKEN = "test-verify-token-42"
PHONE_NUMBER_ID = "106540352242922"
_wamids = itertools.count(1)


@dataclass
class Call:
    """One request the fake answered."""

    method: str
    path: str
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


@dataclass
class _Failure:
    status: int
    code: int
    message: str
    to: str | None
    times: int
    retry_after: float | None
    skip: int = 0


class FakeGraphApi:
    """The server; ``url`` is its base URL (``whatsapp.api_base_url``)."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.cond = threading.Condition()
        self.calls: list[Call] = []
        self.failures: list[_Failure] = []
        self.server = serve(self._handle)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v21.0"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- what tests do ------------------------------------------------------------------------

    def fail(self, status: int, code: int, message: str, *, to: str | None = None,
             times: int = 1, retry_after: float | None = None, skip: int = 0) -> None:
        """Answer the next ``times`` sends (to ``to``, when given), after ``skip`` of them
        went through, with this error."""
        with self.cond:
            self.failures.append(_Failure(status, code, message, to, times, retry_after, skip))

    def sends(self, to: str | None = None) -> list[Call]:
        """The sends answered with success (to ``to``, when given), in order."""
        with self.cond:
            return [c for c in self.calls if c.path.endswith("/messages")
                    and c.body.get("ok") and (to is None or c.body["to"] == to)]

    def attempts(self, to: str) -> list[Call]:
        """Every send to ``to``, answered or refused."""
        with self.cond:
            return [c for c in self.calls if c.path.endswith("/messages") and c.body["to"] == to]

    def texts(self, to: str) -> list[str]:
        return [c.body["text"]["body"] for c in self.sends(to)]

    def wait_for(self, condition: Callable[[], Any], timeout: float = 30.0) -> Any:
        return wait_notified(self.cond, condition, timeout, lambda: (
            f"calls: {[(c.path, c.body) for c in self.calls][-10:]}"))

    def wait_sent(self, count: int, to: str | None = None, timeout: float = 30.0) -> list[Call]:
        return self.wait_for(lambda: (lambda s: s if len(s) >= count else None)(
            self.sends(to)), timeout)

    # -- the server ---------------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else {}
        path = handler.path.split("?", 1)[0]
        if handler.headers.get("Authorization") != f"Bearer {self.token}":
            return self._answer(handler, 401, {"error": {
                "message": "Invalid OAuth access token.", "type": "OAuthException",
                "code": 190}})
        if handler.command == "GET" and path.endswith(f"/{PHONE_NUMBER_ID}"):
            return self._answer(handler, 200, {"display_phone_number": "+1 555 0100",
                                               "verified_name": "Hermes", "id": PHONE_NUMBER_ID})
        if handler.command != "POST" or not path.endswith(f"/{PHONE_NUMBER_ID}/messages"):
            return self._answer(handler, 404, {"error": {"message": "unknown path", "code": 100}})
        with self.cond:
            failure = next((f for f in self.failures if f.times > 0
                            and f.to in (None, body.get("to"))), None)
            if failure is not None and failure.skip > 0:
                failure.skip -= 1
                failure = None
            elif failure is not None:
                failure.times -= 1
            body = {**body, "ok": failure is None}
            self.calls.append(Call(handler.command, path, body))
            self.cond.notify_all()
        if failure is not None:
            headers = {"Retry-After": str(failure.retry_after)} if failure.retry_after else {}
            return self._answer(handler, failure.status, {"error": {
                "message": failure.message, "type": "OAuthException", "code": failure.code}},
                headers)
        return self._answer(handler, 200, {
            "messaging_product": "whatsapp", "contacts": [{"input": body["to"],
                                                            "wa_id": body["to"]}],
            "messages": [{"id": f"wamid.OUT{next(_wamids)}"}]})

    def _answer(self, handler: BaseHTTPRequestHandler, status: int, data: Any,
                headers: dict[str, str] | None = None) -> None:
        payload = json.dumps(data).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(payload)


# -- webhook bodies, as Meta posts them ---------------------------------------------------------


def text_message(sender: str, text: str, *, wamid: str | None = None, name: str = "Alice",
                 **extra: Any) -> dict[str, Any]:
    """A webhook body carrying one text message from ``sender`` (digits)."""
    message = {"from": sender, "id": wamid or f"wamid.IN{next(_wamids)}",
               "timestamp": str(int(time.time())), "type": "text", "text": {"body": text}}
    message.update(extra)
    return webhook({"contacts": [{"profile": {"name": name}, "wa_id": sender}],
                    "messages": [message]})


def statuses(recipient: str) -> dict[str, Any]:
    """A webhook body carrying only a delivery status."""
    return webhook({"statuses": [{"id": "wamid.OUT1", "status": "delivered",
                                  "timestamp": str(int(time.time())),
                                  "recipient_id": recipient}]})


def webhook(value: dict[str, Any]) -> dict[str, Any]:
    return {"object": "whatsapp_business_account", "entry": [{"id": "WABA1", "changes": [{
        "field": "messages", "value": {"messaging_product": "whatsapp", "metadata": {
            "display_phone_number": "15550100", "phone_number_id": PHONE_NUMBER_ID},
            **value}}]}]}


def sign(body: bytes, secret: str = APP_SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def post_webhook(port: int, payload: Any, *, signature: str | None | bool = True,
                 timeout: float = 30.0) -> tuple[int, str]:
    """POST ``payload`` to the gateway's webhook as Meta does; returns status and body."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = {"Content-Type": "application/json"}
    if signature is True:
        headers["X-Hub-Signature-256"] = sign(body)
    elif isinstance(signature, str):
        headers["X-Hub-Signature-256"] = signature
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/whatsapp/webhook", body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()
