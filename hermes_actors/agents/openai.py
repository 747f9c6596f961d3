"""``OpenAIAgent``: one non-streaming chat-completions request per turn.

Works with any OpenAI-compatible server (llama.cpp ``llama-server``, vLLM, Ollama, hosted
APIs). Built on ``http.client`` rather than a client library so that it needs no dependency
and is cooperative under ``gevent.monkey.patch_all()`` exactly as it is blocking with plain
threads, and so that an interrupt can reach the in-flight socket: ``interrupt()`` shuts the
socket down from the interrupting thread (or greenlet), which wakes the blocked read at once
in both worlds. The socket is in flight from before its connect: a server that does not
accept, or a slow TLS handshake, is interrupted too. The socket timeouts (``CONNECT_TIMEOUT``,
then ``agent.timeout``) are only a backstop.

URL rule: ``base_url`` is the API root as the server documents it, e.g.
``http://127.0.0.1:8080/v1``; ``/chat/completions`` is appended. A URL without any path
(``http://127.0.0.1:8080``) means ``/v1``; a URL that already ends in ``/chat/completions``
is used as it is; a query string is kept; a port that is not a number from 0 to 65535 is
refused.

Messages: the system prompt, then the history, then the new user message. History messages
with role ``user``, ``assistant`` or ``system`` and non-empty text are sent as they are;
``tool`` messages and the tool calls of assistant messages are skipped, because the
transcript does not carry the call ids a server needs to pair them (what the assistant said
about a tool result is in its own later reply). Consecutive messages with the same role are
joined with a blank line, since many chat templates require roles to alternate (a failed
turn leaves two user messages in a row). Media URLs are appended to the user message as
``[attachment: <url>]`` lines, which every model can read.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import SplitResult, urlsplit

from hermes_actors.agents.base import TurnRequest, TurnResult
from hermes_actors.errors import HermesActorsError

__all__ = [
    "OpenAIAgent",
    "OpenAIAgentError",
    "OpenAIAgentTimeout",
    "build_messages",
    "chat_completions_url",
    "parse_completion",
]

log = logging.getLogger("hermes_actors.agents.openai")

#: Seconds allowed to open a connection (the turn's own timeout applies after that).
CONNECT_TIMEOUT = 30.0
#: A response body larger than this is refused (bytes).
MAX_RESPONSE_BYTES = 32 * 2**20
_ERROR_SNIPPET = 300
_ROLES = ("user", "assistant", "system")
# Raised by a reused keep-alive connection the server has closed meanwhile: retried once.
_STALE = (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected,
          http.client.BadStatusLine)


class OpenAIAgentError(HermesActorsError, RuntimeError):
    """The server could not be reached, answered an error, or sent a malformed response."""


class OpenAIAgentTimeout(OpenAIAgentError):
    """The server did not answer within ``agent.timeout``."""


class _Interrupted(Exception):
    """Internal: the turn was interrupted before its request went out."""


class OpenAIAgent:
    """Chat completions over HTTP with an interruptible in-flight request (module docstring)."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 timeout: float = 1800.0) -> None:
        #: The full chat-completions URL derived from ``base_url`` (URL rule above).
        self.url = chat_completions_url(base_url)
        #: The model name sent with every request.
        self.model = model
        #: Seconds a turn may wait for the server (``agent.timeout``).
        self.timeout = timeout
        self._api_key = api_key
        self._lock = threading.Lock()
        self._interrupted = threading.Event()
        self._idle: http.client.HTTPConnection | None = None  # kept between turns
        self._inflight: socket.socket | None = None

    def run_turn(self, request: TurnRequest) -> TurnResult:
        """POST the conversation and return the first choice's text and the usage."""
        self._interrupted.clear()
        if request.interrupted():  # stopped before this call: its interrupt was cleared
            return TurnResult(None, "interrupted")
        body = json.dumps(
            {"model": self.model, "messages": build_messages(request), "stream": False},
            ensure_ascii=False,
        ).encode("utf-8")
        started = time.monotonic()
        try:
            status, reason, data = self._post(body)
        except _Interrupted:
            return TurnResult(None, "interrupted")
        except (OSError, http.client.HTTPException) as exc:
            if self._interrupted.is_set():
                return TurnResult(None, "interrupted")
            if isinstance(exc, TimeoutError):
                raise OpenAIAgentTimeout(
                    f"{self.url.geturl()} did not answer within {self.timeout:g}s (agent.timeout)"
                ) from exc
            raise OpenAIAgentError(f"request to {self.url.geturl()} failed: {exc!r}") from exc
        if self._interrupted.is_set():
            return TurnResult(None, "interrupted")
        result = parse_completion(status, reason, data, url=self.url.geturl())
        log.debug("chat completion model=%s took %.2fs usage=%s",
                  self.model, time.monotonic() - started, result.usage)
        return result

    def interrupt(self, reason: str | None = None) -> None:
        """Shut the in-flight socket down so ``run_turn`` returns ``interrupted`` now."""
        with self._lock:
            self._interrupted.set()
            sock = self._inflight
        if sock is not None:
            log.info("interrupting chat completion reason=%s", reason)
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed: the turn is ending anyway

    def release_clients(self) -> None:
        """Close the kept-alive connection (the next turn opens a new one)."""
        with self._lock:
            conn, self._idle = self._idle, None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Interrupt a running request and drop every connection."""
        self.interrupt("close")
        self.release_clients()

    # -- internals ---------------------------------------------------------------------------

    def _post(self, body: bytes) -> tuple[int, str, bytes]:
        """One request; a stale reused connection is replaced once."""
        with self._lock:
            conn, self._idle = self._idle, None
        while True:
            reused = conn is not None
            if conn is None:
                conn = self._connection()
            try:
                return self._exchange(conn, body)
            except _STALE:
                conn.close()
                if not reused or self._interrupted.is_set():
                    raise
                log.debug("kept-alive connection was closed by the server; reconnecting")
                conn = None
            except BaseException:
                conn.close()
                raise

    def _exchange(self, conn: http.client.HTTPConnection, body: bytes) -> tuple[int, str, bytes]:
        try:
            if conn.sock is None:
                conn.connect()  # in flight while it connects (_Connection)
                sock = conn.sock
                assert sock is not None  # connect() set it
                sock.settimeout(self.timeout)
            else:
                self._track(conn.sock)
            conn.request("POST", _target(self.url), body=body, headers=self._headers())
            response = conn.getresponse()
            data = response.read(MAX_RESPONSE_BYTES + 1)
        finally:
            with self._lock:
                self._inflight = None
                interrupted = self._interrupted.is_set()
        if len(data) > MAX_RESPONSE_BYTES:
            conn.close()
            raise OpenAIAgentError(f"response larger than {MAX_RESPONSE_BYTES} bytes")
        # A body shorter than its Content-Length (the server closed early) leaves the
        # response unfinished: the connection cannot carry another request.
        if response.will_close or interrupted or response.length:
            conn.close()
        else:
            with self._lock:
                self._idle = conn
        return response.status, response.reason, data

    def _connection(self) -> http.client.HTTPConnection:
        host, port = self.url.hostname or "", self.url.port
        if self.url.scheme == "https":
            return _TLSConnection(host, port, self._track, context=ssl.create_default_context())
        return _Connection(host, port, self._track)

    def _track(self, sock: socket.socket) -> None:
        """Make ``sock`` the one ``interrupt()`` shuts down; raises if already interrupted."""
        with self._lock:
            if self._interrupted.is_set():
                raise _Interrupted
            self._inflight = sock

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json",
                   "User-Agent": "hermes-actors"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers


class _Connection(http.client.HTTPConnection):
    """An HTTP connection that hands each socket to ``track`` before connecting it, so that
    ``interrupt()`` can shut it down while the connect blocks."""

    def __init__(self, host: str, port: int | None, track: Callable[[socket.socket], None],
                 **kwargs: Any) -> None:
        super().__init__(host, port, timeout=CONNECT_TIMEOUT, **kwargs)
        self._track = track
        self._create_connection = self._open  # http.client's hook: socket.create_connection

    def _open(self, address: tuple[str, int], timeout: float,
              source_address: Any = None) -> socket.socket:
        """``socket.create_connection`` (each address in turn), tracking each socket."""
        error: OSError | None = None
        for family, kind, proto, _, sockaddr in socket.getaddrinfo(*address, 0,
                                                                   socket.SOCK_STREAM):
            sock = socket.socket(family, kind, proto)
            try:
                self._track(sock)
                sock.settimeout(timeout)
                sock.connect(sockaddr)
                return sock
            except OSError as exc:
                sock.close()
                error = exc
            except BaseException:
                sock.close()
                raise
        raise error or OSError(f"no address found for {address[0]!r}")


class _TLSConnection(_Connection, http.client.HTTPSConnection):
    """HTTPS whose TLS socket is tracked before its handshake, so a slow one is interrupted."""

    def __init__(self, host: str, port: int | None, track: Callable[[socket.socket], None],
                 *, context: ssl.SSLContext) -> None:
        super().__init__(host, port, track, context=context)
        self._tls = context

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)  # TCP, tracked while it connects
        assert self.sock is not None
        self.sock = sock = self._tls.wrap_socket(self.sock, server_hostname=self.host,
                                                 do_handshake_on_connect=False)
        self._track(sock)
        sock.do_handshake()


def chat_completions_url(base_url: str) -> SplitResult:
    """The chat-completions URL for ``base_url`` (URL rule in the module docstring)."""
    parts = urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http:// or https:// URL, got {base_url!r}")
    try:
        parts.port  # noqa: B018 - read only to check it: a bad one raises on first use
    except ValueError as exc:
        raise ValueError(f"{exc} in {base_url!r}") from None
    path = parts.path.rstrip("/")
    if not path.endswith("/chat/completions"):
        path = (path or "/v1") + "/chat/completions"
    return parts._replace(path=path, fragment="")


def build_messages(request: TurnRequest) -> list[dict[str, str]]:
    """System prompt, mapped history and the new user message (module docstring)."""
    messages: list[dict[str, str]] = []

    def add(role: str, content: str) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"] += "\n\n" + content
        else:
            messages.append({"role": role, "content": content})

    if request.system_prompt.strip():
        add("system", request.system_prompt)
    for message in request.history:
        role, content = message.get("role"), message.get("content")
        if role in _ROLES and isinstance(content, str) and content.strip():
            add(role, content)
    text = request.message
    if request.media_urls:
        attachments = "\n".join(f"[attachment: {url}]" for url in request.media_urls)
        text = f"{text}\n\n{attachments}" if text else attachments
    add("user", text)
    return messages


def parse_completion(status: int, reason: str, data: bytes, *, url: str = "") -> TurnResult:
    """The first choice's text and the usage; an error status or a bad body raises."""
    text = data.decode("utf-8", errors="replace")
    try:
        doc: Any = json.loads(text)
    except ValueError:
        doc = None
    if not 200 <= status < 300:
        raise OpenAIAgentError(f"{url or 'server'} answered HTTP {status} {reason}: "
                               f"{_error_message(doc, text)}")
    if not isinstance(doc, dict):
        raise OpenAIAgentError(f"malformed response (not a JSON object): {text[:_ERROR_SNIPPET]!r}")
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices:
        if "error" in doc:
            raise OpenAIAgentError(f"server error: {_error_message(doc, text)}")
        raise OpenAIAgentError("malformed response: no 'choices'")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise OpenAIAgentError("malformed response: 'choices[0].message' is missing")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise OpenAIAgentError("malformed response: 'choices[0].message.content' is not text")
    if choices[0].get("finish_reason") == "length":
        log.warning("chat completion stopped at the token limit (finish_reason=length)")
    return TurnResult(content or None, "completed", _usage(doc.get("usage")))


def _usage(raw: Any) -> dict[str, int]:
    """OpenAI ``usage`` → the runtime's counters (``input``/``output``/``prompt`` tokens)."""
    if not isinstance(raw, dict):
        return {}
    usage: dict[str, int] = {}
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    if isinstance(prompt, int) and not isinstance(prompt, bool):
        usage["input_tokens"] = usage["prompt_tokens"] = prompt
    if isinstance(completion, int) and not isinstance(completion, bool):
        usage["output_tokens"] = completion
    return usage


def _error_message(doc: Any, text: str) -> str:
    if isinstance(doc, dict):
        error = doc.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"][:_ERROR_SNIPPET]
        if isinstance(error, str):
            return error[:_ERROR_SNIPPET]
    return text.strip()[:_ERROR_SNIPPET] or "(empty body)"


def _target(url: SplitResult) -> str:
    return url.path + (f"?{url.query}" if url.query else "")
