"""The HTTP client behind ``hermes-actors send`` and ``chat --url`` (§17.35, §17.49), on the
standard library.

``send --wait`` must not miss a fast reply, so the order is: open the conversation's event
stream (``GET /v1/stream``, from the outbox's current end), post the message, then read the
stream. Only messages that answer the posted event (its id is in their ``in_reply_to``)
count: a late reply to an earlier message of the same chat is skipped (``chat`` shows
everything of its conversation). A ``reply``/``recovered`` ends the wait; a ``notice`` (an
acknowledgement such as "Queued for the next turn.") is printed and the wait goes on, unless
the session is idle by then, because then the notice was the whole answer (``/status``, a
failure notice, a silenced turn); the outbox is then read once more (``GET /v1/outbox``), so
an answer still on its way through the stream is not missed either.
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

from hermes_actors.process.sse import StreamReader, StreamRefused, bearer_header

__all__ = ["AnswerWaiter", "ClientError", "GatewayClient", "SendOptions", "is_refusal",
           "readable_text", "send"]

#: Kinds of outbox messages that answer a message (a ``notice`` may only acknowledge it).
ANSWER_KINDS = ("reply", "recovered")
#: Seconds between checks whether the session went idle, once a notice arrived.
_NOTICE_POLL = 1.0


#: Client errors (4xx) that say "not now", not "wrong": the same request may succeed later
#: (a full queue, a body that came too slowly), so they are runtime failures (exit 1).
RETRY_LATER = frozenset({408, 429})


def is_refusal(status: int) -> bool:
    """Whether an HTTP ``status`` refuses the request itself (a client mistake: exit 2)."""
    return 400 <= status < 500 and status not in RETRY_LATER


def readable_text(text: str) -> str:
    """``text`` as typed (a console line, a command-line argument) with every byte that was
    not UTF-8 as U+FFFD: Python keeps such a byte as a lone surrogate, which no store can
    write and JSON carries only as an escape the gateway refuses."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no decoding made: not from a terminal
        raw = text.encode("utf-8", "replace")
    return raw.decode("utf-8", "replace")


class ClientError(Exception):
    """A request failed: ``refused`` (the server answered a 4xx that is a client mistake)
    or not (unreachable, 5xx, or a 408/429 that may succeed later)."""

    def __init__(self, message: str, *, refused: bool = False, status: int | None = None,
                 ) -> None:
        super().__init__(message)
        #: Whether the server refused the request (a client mistake: exit code 2; see
        #: :func:`is_refusal`).
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
            request.add_header("Authorization", bearer_header(self._token))
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            raise ClientError(
                f"the gateway answered {exc.code}: {_error_text(exc)}",
                refused=is_refusal(exc.code), status=exc.code,
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

    def stream(self, chat_id: str, platform: str, after: int | str = "latest",
               timeout: float | None = None) -> StreamReader:
        """``GET /v1/stream``, opened within ``timeout`` seconds (its start is fixed when
        this returns)."""
        reader = StreamReader(self.url, chat_id, platform, token=self._token, after=after)
        try:
            return reader.open(timeout)
        except StreamRefused as exc:
            raise ClientError(f"the gateway answered {exc.status}: {exc}",
                              refused=is_refusal(exc.status), status=exc.status) from None
        except (OSError, ValueError) as exc:
            raise ClientError(f"no gateway answered at {self.url} ({exc})") from None


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
    # (a gateway that takes the connection and says nothing is given up within the wait)
    stream = (client.stream(options.chat_id, options.platform, timeout=options.timeout)
              if options.wait else None)
    try:
        accepted = client.post_message({
            "chat_id": options.chat_id, "user_id": options.user_id,
            "platform": options.platform, "text": readable_text(options.text),
        })  # fmt: skip
        if stream is None:
            out(f"accepted session_key={accepted['session_key']} "
                f"event_id={accepted['event_id']} queue_depth={accepted['queue_depth']}")
            return True
        waiter = AnswerWaiter(client, stream, options.chat_id, options.platform, out)
        return waiter.wait(accepted["session_key"], accepted["event_id"], options.timeout)
    finally:
        if stream is not None:
            stream.close()


class AnswerWaiter:
    """Reads a conversation's stream until the answer to one posted event came.

    With ``show_all`` every message of the conversation is printed (the console), else only
    those answering the event. A message is printed once, however it was read.
    """

    def __init__(self, client: GatewayClient, stream: StreamReader, chat_id: str,
                 platform: str, out: Callable[[str], None], *, show_all: bool = False) -> None:
        self._client = client
        self._stream = stream
        self._chat_id = chat_id
        self._platform = platform
        self._out = out
        self._show_all = show_all
        self._printed: set[int] = set()
        #: The last cursor taken from the stream (where a catch-up read starts).
        self._cursor = stream.last_id or 0

    def wait(self, key: str, event_id: str, timeout: float) -> bool:
        """True once an answer to ``event_id`` came (or a notice, and the session is idle);
        False when nothing answered it within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        noticed = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 and not noticed:
                return False
            wait = max(0.0, min(remaining, _NOTICE_POLL)) if noticed else remaining
            message = self._stream.next(wait)
            if message is not None:
                self._cursor = max(self._cursor, int(message["cursor"]))
            if message is None:
                if noticed and (_idle(self._client, key) or remaining <= 0):
                    # Idle now: whatever answers it is in the outbox already.
                    return self._catch_up(event_id) or _idle(self._client, key)
                continue
            answered = self._show(message, event_id)
            if answered is True:
                return True
            noticed = noticed or answered is False

    def _show(self, message: dict[str, Any], event_id: str) -> bool | None:
        """Print ``message`` if it is to be shown; True: it answers ``event_id``, False: it
        is a notice for it, None: it is about something else."""
        mine = event_id in message.get("in_reply_to", ())
        if message["cursor"] in self._printed or not (mine or self._show_all):
            return None
        self._printed.add(message["cursor"])
        self._out(message["text"])
        if not mine:
            return None
        return message["kind"] in ANSWER_KINDS

    def _catch_up(self, event_id: str) -> bool:
        page = self._client.outbox(self._chat_id, self._platform, self._cursor, 0.0)
        return any(self._show(m, event_id) for m in page["messages"])


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
