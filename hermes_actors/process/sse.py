"""``StreamReader``: the client side of ``GET /v1/stream`` (Server-Sent Events), for ``send
--wait`` and ``chat --url``; standard library only.

The first connection is made in the caller's thread, up to the opening event, so a refusal
(a wrong token, a full gateway: 401, 503) or an unreachable gateway is an error at once and,
when it returns, the stream's starting cursor is fixed: nothing written after that is
missed. A daemon thread then reads events into a queue; when the connection ends (the
gateway stopped or restarted) it reconnects with ``Last-Event-ID`` (and ``after=``) set to
the last id seen, so across a restart nothing is lost or repeated. :meth:`StreamReader.next` waits for the
next message with a timeout, so callers never block on a socket.
"""

from __future__ import annotations

import http.client
import json
import queue
import threading
import time
import urllib.parse
from typing import Any

__all__ = ["StreamReader", "StreamRefused", "bearer_header"]

#: Seconds without a byte (keep-alives come every 15 s) before a connection counts as dead.
_READ_TIMEOUT = 60.0
#: Pauses between reconnection attempts, in seconds (the last one repeats).
_RECONNECT = (0.1, 0.25, 0.5, 1.0, 2.0)


def bearer_header(token: str) -> str:
    """The ``Authorization`` value for ``token``, its bytes UTF-8 (``http.client`` writes a
    header as latin-1, which cannot hold a token with other characters)."""
    return "Bearer " + token.encode("utf-8").decode("latin-1")


class StreamRefused(Exception):
    """The gateway answered the stream request with an error."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        #: The HTTP status of the answer.
        self.status = status


class StreamReader:
    """The events of one conversation (``platform``, ``chat_id``) of the gateway at
    ``url``, from cursor ``after`` (``"latest"``: from now)."""

    def __init__(self, url: str, chat_id: str, platform: str = "webhook", *,
                 token: str | None = None, after: int | str = "latest") -> None:
        parsed = urllib.parse.urlsplit(url)
        self._host = parsed.hostname or "127.0.0.1"
        self._port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self._https = parsed.scheme == "https"
        self._base = parsed.path.rstrip("/")
        self._query = {"chat_id": chat_id, "platform": platform, "after": str(after)}
        self._token = token
        self._events: queue.Queue[dict[str, Any]] = queue.Queue()
        self._closed = threading.Event()
        self._conn: http.client.HTTPConnection | None = None
        #: The cursor of the last event read (the stream's start before any message).
        self.last_id: int | None = None
        #: Connections made so far (1 + reconnections).
        self.connections = 0
        #: Reconnection attempts that failed so far (no gateway answered, or refused).
        self.failed_reconnections = 0

    def open(self, timeout: float | None = None) -> StreamReader:
        """Connect and read the opening event, within ``timeout`` seconds (default: the
        read timeout); raises :class:`StreamRefused` (the gateway answered with an error)
        or ``OSError`` (no gateway answered)."""
        response = self._connect(timeout)
        threading.Thread(target=self._pump, args=(response,), name="stream-reader",
                         daemon=True).start()
        return self

    def next(self, timeout: float) -> dict[str, Any] | None:
        """The next outbox message, or ``None`` when none came within ``timeout`` s."""
        try:
            return self._events.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None

    def close(self) -> None:
        """Stop reading (the connection is closed)."""
        self._closed.set()
        conn = self._conn
        if conn is not None:
            try:
                if conn.sock is not None:
                    conn.sock.shutdown(2)
            except OSError:
                pass
            conn.close()

    # -- the connection -----------------------------------------------------------------------

    def _connect(self, timeout: float | None = None) -> http.client.HTTPResponse:
        query = dict(self._query)
        headers = {"Accept": "text/event-stream"}
        if self.last_id is not None:  # a reconnection: on from the last cursor read
            headers["Last-Event-ID"] = query["after"] = str(self.last_id)
        if self._token:
            headers["Authorization"] = bearer_header(self._token)
        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = kind(self._host, self._port, timeout=min(timeout or _READ_TIMEOUT,
                                                        _READ_TIMEOUT))
        conn.request("GET", f"{self._base}/v1/stream?{urllib.parse.urlencode(query)}",
                     headers=headers)
        response = conn.getresponse()
        if response.status != 200:
            body = response.read().decode("utf-8", "replace")
            conn.close()
            try:
                text = str(json.loads(body)["error"])
            except Exception:  # noqa: BLE001 - not our JSON error body
                text = body.strip() or response.reason
            raise StreamRefused(response.status, text)
        self._conn = conn
        self.connections += 1
        self._read_event(response)  # the opening: retry and the starting id
        if conn.sock is not None:  # from now on events may be a keep-alive apart
            conn.sock.settimeout(_READ_TIMEOUT)
        return response

    def _pump(self, response: http.client.HTTPResponse) -> None:
        failures = 0
        while not self._closed.is_set():
            try:
                while self._read_event(response):
                    failures = 0
            except Exception:  # noqa: BLE001 - any broken connection: reconnect (or stop)
                pass
            if self._closed.is_set():
                return
            while not self._closed.is_set():
                time.sleep(_RECONNECT[min(failures, len(_RECONNECT) - 1)])
                failures += 1
                try:
                    response = self._connect()
                    break
                except (OSError, http.client.HTTPException, StreamRefused):
                    self.failed_reconnections += 1
                    continue

    def _read_event(self, response: http.client.HTTPResponse) -> bool:
        """Read one event (up to its blank line); False at the end of the stream."""
        fields: dict[str, str] = {}
        while True:
            raw = response.readline()
            if not raw:
                return False
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line:
                break
            if line.startswith(":"):
                continue  # a comment: keep-alive
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
        if fields.get("id", "").isdigit():
            self.last_id = int(fields["id"])
        if "data" in fields:
            self._events.put(json.loads(fields["data"]))
        return True
