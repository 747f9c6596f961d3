"""The HTTP client behind ``hermes-actors send`` and ``chat --url`` (§17.35, §17.49), on the
standard library.

``send --wait`` must not miss a fast reply, so the order is: open the conversation's event
stream (``GET /v1/stream``, from the outbox's current end), post the message, then read the
stream. Only messages that answer the posted event (its id is in their ``in_reply_to``)
count: a late reply to an earlier message of the same chat is skipped (``chat`` shows
everything of its conversation). The wait ends with the event's *final* answer (see
:func:`is_final`): an acknowledgement ("Queued for the next turn.") is not one.

The wait keeps its word across a restart of the gateway within ``--timeout``: the stream
reconnects from the last cursor it read (``Last-Event-ID`` and ``after=``), so an answer
written while it was away is read on its return; a gateway that cannot be reached yet (or
answers 5xx while it stops) is tried again with a short backoff until the deadline. The
message is posted with a ``message_id`` of its own, so a post repeated because its answer was
lost is accepted once.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hermes_actors.model.commands import parse_command
from hermes_actors.process.sse import StreamReader, StreamRefused, bearer_header
from hermes_actors.store.ledger import is_final

__all__ = ["ANSWER_KINDS", "AnswerWaiter", "ClientError", "GatewayClient", "SendOptions",
           "SendResult", "is_final", "is_refusal", "readable_text", "send", "succeeded"]

#: Kinds of outbox messages that answer a message (a ``notice`` may refuse or acknowledge it).
ANSWER_KINDS = ("reply", "recovered")
#: Pauses between attempts to reach the gateway, in seconds (the last one repeats); each is
#: cut to the time left.
RETRY_PAUSES = (0.1, 0.25, 0.5, 1.0, 2.0)
#: The longest a post waits for its answer (seconds) before it counts as lost.
POST_TIMEOUT = 10.0


#: Client errors (4xx) that say "not now", not "wrong": the same request may succeed later
#: (a full queue, a body that came too slowly), so they are runtime failures (exit 1).
RETRY_LATER = frozenset({408, 429})


def is_refusal(status: int) -> bool:
    """Whether an HTTP ``status`` refuses the request itself (a client mistake: exit 2)."""
    return 400 <= status < 500 and status not in RETRY_LATER


def succeeded(text: str, answer: dict[str, Any]) -> bool:
    """Whether ``answer``, the final answer to a message of ``text``, is a success (exit 0):
    a reply (``reply``/``recovered``), or a notice answering a gateway command that is no
    agent turn (``/status``, ``/new``, ``/stop``...). A notice answering anything else says it
    was not answered: the agent failed, the turn was cancelled, the session suspended."""
    if answer.get("kind") in ANSWER_KINDS:
        return True
    command = parse_command(text)
    return command is not None and not command.becomes_turn


def _retryable(exc: ClientError) -> bool:
    """Whether a failed request may succeed if made again soon: no gateway answered (it is
    restarting), it answered 5xx (it is stopping, its store is away) or 408."""
    return exc.status is None or exc.status >= 500 or exc.status == 408


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

    def post_message(self, fields: dict[str, Any], timeout: float = POST_TIMEOUT,
                     ) -> dict[str, Any]:
        """``POST /v1/messages``: ``{"session_key", "event_id", "queue_depth"}``."""
        return self.request("POST", "/v1/messages", body=fields, timeout=timeout)

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


@dataclass(frozen=True)
class SendResult:
    """What came of a ``send``: the gateway's acceptance and, with ``wait``, the final
    answer (``None`` when none came within the timeout)."""

    accepted: dict[str, Any]
    answer: dict[str, Any] | None = None
    #: Whether the message was answered as asked (exit 0): accepted (without ``wait``), or
    #: answered by a reply or a command's notice (:func:`succeeded`).
    ok: bool = True


def send(client: GatewayClient, options: SendOptions, out: Callable[[str], None] = print,
         note: Callable[[str], None] | None = None) -> SendResult:
    """Post the message; with ``wait``, print (``out``) its final answer, once it came, and
    its acknowledgements (``note``, when given) meanwhile. Raises :class:`ClientError` when a
    request fails for good: refused (4xx), or, with ``wait``, no gateway could be reached in
    the whole timeout."""
    fields = {"chat_id": options.chat_id, "user_id": options.user_id,
              "platform": options.platform, "text": readable_text(options.text)}
    if not options.wait:
        accepted = client.post_message(fields)
        out(f"accepted session_key={accepted['session_key']} "
            f"event_id={accepted['event_id']} queue_depth={accepted['queue_depth']}")
        return SendResult(accepted)
    deadline = time.monotonic() + options.timeout
    # a repeated post (its answer lost to a restart) is then the same message, accepted once
    fields["message_id"] = f"cli-{uuid.uuid4().hex}"
    # (a gateway that takes the connection and says nothing is given up within the wait)
    stream = _retrying(lambda left: client.stream(options.chat_id, options.platform,
                                                  timeout=left), deadline)
    try:
        accepted = _retrying(lambda left: client.post_message(fields, min(left, POST_TIMEOUT)),
                             deadline)
        waiter = AnswerWaiter(client, stream, options.chat_id, options.platform, out,
                              note=note)
        answer = waiter.wait(accepted["event_id"], deadline - time.monotonic())
    finally:
        stream.close()
    ok = answer is not None and succeeded(fields["text"], answer)
    return SendResult(accepted, answer, ok)


def _retrying(attempt: Callable[[float], Any], deadline: float) -> Any:
    """``attempt(seconds_left)`` until it succeeds, again after each failure that may pass
    (:func:`_retryable`) with a short pause, as long as time is left; then the last error."""
    failures = 0
    while True:
        left = deadline - time.monotonic()
        try:
            return attempt(max(left, 0.001))
        except ClientError as exc:
            left = deadline - time.monotonic()
            if not _retryable(exc) or left <= 0:
                raise
        time.sleep(min(RETRY_PAUSES[min(failures, len(RETRY_PAUSES) - 1)], left))
        failures += 1


class AnswerWaiter:
    """Reads a conversation's stream until the final answer to one posted event came.

    With ``show_all`` every message of the conversation is printed (``out``: the console),
    else only the final answer of the event (``out``) and its acknowledgements (``note``).
    A message is printed once, however often it was read. The stream reconnects by itself,
    from the last cursor it read, when its connection drops (a gateway restart).
    """

    def __init__(self, client: GatewayClient, stream: StreamReader, chat_id: str,
                 platform: str, out: Callable[[str], None], *, show_all: bool = False,
                 note: Callable[[str], None] | None = None) -> None:
        self._client = client
        self._stream = stream
        self._chat_id = chat_id
        self._platform = platform
        self._out = out
        self._note = note
        self._show_all = show_all
        self._printed: set[int] = set()

    def wait(self, event_id: str, timeout: float) -> dict[str, Any] | None:
        """The final answer to ``event_id`` (printed), or ``None`` when none came within
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            message = self._stream.next(remaining)
            if message is not None and self._show(message, event_id):
                return message

    def _show(self, message: dict[str, Any], event_id: str) -> bool:
        """Print ``message`` if it is to be shown; True when it is the final answer to
        ``event_id``."""
        mine = event_id in message.get("in_reply_to", ())
        cursor = message["cursor"]
        final = mine and is_final(message)
        if cursor not in self._printed and (mine or self._show_all):
            self._printed.add(cursor)
            if final or self._show_all:
                self._out(message["text"])
            elif self._note is not None:
                self._note(message["text"])
        return final


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read().decode("utf-8"))["error"])
    except Exception:  # noqa: BLE001 - not our JSON error body
        return exc.reason or "error"
