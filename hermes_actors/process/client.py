"""The HTTP client behind ``hermes-actors send`` (§17.35, §17.49), on the standard library.

``send --wait`` must not miss a fast reply, so the order is: ask the outbox for its current
end (``after=latest``), post the message, then long-poll for that chat from the end it read
before posting. Only messages that answer the posted event (its id is in their
``in_reply_to``) count: a late reply to an earlier message of the same chat is skipped.
A ``reply``/``recovered`` ends the wait; a ``notice`` (an acknowledgement such as "Queued for
the next turn.") is printed and the wait goes on, unless the session is idle by then,
because then the notice was the whole answer (``/status``, a failure notice, a silenced
turn).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ClientError", "GatewayClient", "SendOptions", "send"]

#: Kinds of outbox messages that answer a message (a ``notice`` may only acknowledge it).
ANSWER_KINDS = ("reply", "recovered")
#: Longest single long poll, in seconds (the server caps ``wait`` at 60).
_POLL = 25.0
#: Poll length once a notice arrived, to re-check whether the session went idle.
_NOTICE_POLL = 1.0


class ClientError(Exception):
    """A request failed: ``refused`` (the server answered 4xx) or not (unreachable, 5xx)."""

    def __init__(self, message: str, *, refused: bool = False, status: int | None = None,
                 ) -> None:
        super().__init__(message)
        #: Whether the server refused the request (a client mistake: exit code 2).
        self.refused = refused
        #: The HTTP status of the answer, if one came.
        self.status = status


class GatewayClient:
    """JSON over HTTP to one gateway at ``url`` with an optional bearer ``token``."""

    def __init__(self, url: str, token: str | None = None) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ClientError(f"invalid gateway URL {url!r} (expected http://host:port)",
                              refused=True)
        self.url = url.rstrip("/")
        self._token = token

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None,
                body: dict[str, Any] | None = None, timeout: float = 10.0) -> Any:
        """One request; returns the decoded JSON body of a 2xx answer."""
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self._token:
            request.add_header("Authorization", f"Bearer {self._token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            raise ClientError(
                f"the gateway answered {exc.code}: {_error_text(exc)}", refused=exc.code < 500,
                status=exc.code,
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ClientError(f"no gateway answered at {self.url} ({reason})") from None

    def post_message(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/messages``: ``{"session_key", "event_id", "queue_depth"}``."""
        return self.request("POST", "/v1/messages", body=fields)

    def outbox(self, chat_id: str, platform: str, after: int | str, wait: float = 0.0,
               ) -> dict[str, Any]:
        """``GET /v1/outbox`` (the socket timeout covers the long poll)."""
        query = {"chat_id": chat_id, "platform": platform, "after": after, "wait": f"{wait:g}"}
        return self.request("GET", "/v1/outbox", query=query, timeout=wait + 10.0)

    def session(self, key: str) -> dict[str, Any]:
        """``GET /v1/sessions/<key>``."""
        return self.request("GET", "/v1/sessions/" + urllib.parse.quote(key, safe=""))


@dataclass(frozen=True)
class SendOptions:
    """What ``send`` posts and how long it waits."""

    text: str
    chat_id: str = "cli"
    user_id: str = "cli"
    platform: str = "webhook"
    wait: bool = False
    timeout: float = 30.0


def send(client: GatewayClient, options: SendOptions,
         out: Callable[[str], None] = print) -> bool:
    """Post the message; with ``wait``, print the replies that follow it. Returns False when
    ``wait`` was asked and no answer came within the timeout (:class:`ClientError` when a
    request fails)."""
    start = None
    if options.wait:
        start = client.outbox(options.chat_id, options.platform, "latest")["cursor"]
    accepted = client.post_message({
        "chat_id": options.chat_id, "user_id": options.user_id,
        "platform": options.platform, "text": options.text,
    })  # fmt: skip
    if not options.wait:
        out(f"accepted session_key={accepted['session_key']} event_id={accepted['event_id']} "
            f"queue_depth={accepted['queue_depth']}")
        return True
    assert start is not None  # read before posting (wait is set)
    return _await_answer(client, options, accepted["session_key"], accepted["event_id"], start,
                         out)


def _await_answer(client: GatewayClient, options: SendOptions, key: str, event_id: str,
                  cursor: int, out: Callable[[str], None]) -> bool:
    deadline = time.monotonic() + options.timeout
    noticed = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 and not noticed:
            return False
        poll = max(0.0, min(remaining, _NOTICE_POLL if noticed else _POLL))
        cursor, answered, noticed_now = _read_answers(client, options, event_id, cursor, poll,
                                                      out)
        noticed = noticed or noticed_now
        if answered:
            return True
        if noticed and (_idle(client, key) or remaining <= 0):
            # Idle now: whatever answers it is in the outbox already (written before the
            # turn ended), so one more read cannot miss it.
            return _read_answers(client, options, event_id, cursor, 0.0, out)[1] \
                or _idle(client, key)


def _read_answers(client: GatewayClient, options: SendOptions, event_id: str, cursor: int,
                  wait: float, out: Callable[[str], None]) -> tuple[int, bool, bool]:
    """One outbox poll: prints the messages answering ``event_id``; returns the new cursor,
    whether an answer came and whether a notice did."""
    page = client.outbox(options.chat_id, options.platform, cursor, wait)
    noticed = False
    for message in page["messages"]:
        if event_id not in message.get("in_reply_to", ()):
            continue  # the answer to another message of this chat
        out(message["text"])
        if message["kind"] in ANSWER_KINDS:
            return page["cursor"], True, noticed
        noticed = True
    return page["cursor"], False, noticed


def _idle(client: GatewayClient, key: str) -> bool:
    try:
        state = client.session(key)
    except ClientError as exc:
        return exc.status == 404  # a command answered before any session existed
    return not state["running"] and not state["queue_depth"]


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read().decode("utf-8"))["error"])
    except Exception:  # noqa: BLE001 - not our JSON error body
        return exc.reason or "error"
