"""A fake Slack Socket Mode server on loopback, written for these tests with the standard
library (no websocket package is needed).

It speaks just enough RFC 6455 for slack_sdk's built-in client: the upgrade handshake, text,
ping/pong and close frames (the client's frames are masked, the server's are not). Like
Slack, it says ``hello`` on each new connection, sends events in envelopes
(``events_api``, ``envelope_id``, ``payload``, ``retry_attempt``), and keeps every envelope
not yet acknowledged: each new connection receives them again (a new envelope id, the same
event, ``retry_attempt`` one higher). The fake Web API's ``apps.connections.open`` hands out
:attr:`FakeSocketMode.url`. Tests wait on a condition notified at every frame: nothing
sleeps.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

from loopback import wait_notified

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_TEXT, _CLOSE, _PING, _PONG = 0x1, 0x8, 0x9, 0xA


def _frame(opcode: int, data: bytes) -> bytes:
    head = bytes([0x80 | opcode])
    if len(data) < 126:
        head += bytes([len(data)])
    elif len(data) < 1 << 16:
        head += bytes([126]) + struct.pack("!H", len(data))
    else:
        head += bytes([127]) + struct.pack("!Q", len(data))
    return head + data


def _read_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _read_frame(sock: socket.socket) -> tuple[int, bytes]:
    first, second = _read_exact(sock, 2)
    length = second & 0x7F
    if length == 126:
        length = struct.unpack("!H", _read_exact(sock, 2))[0]
    elif length == 127:
        length = struct.unpack("!Q", _read_exact(sock, 8))[0]
    mask = _read_exact(sock, 4) if second & 0x80 else b"\0\0\0\0"
    data = bytes(b ^ mask[i % 4] for i, b in enumerate(_read_exact(sock, length)))
    return first & 0x0F, data


class _Connection:
    def __init__(self, sock: socket.socket, number: int) -> None:
        self.sock = sock
        self.number = number
        self.lock = threading.Lock()
        self.open = True

    def send(self, opcode: int, data: bytes) -> None:
        with self.lock:
            self.sock.sendall(_frame(opcode, data))


class FakeSocketMode:
    """The server; :attr:`url` is what ``apps.connections.open`` answers."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"ws://127.0.0.1:{self._listener.getsockname()[1]}/link/?ticket=fake"
        self._live: list[_Connection] = []
        #: Connections ever opened; the most open at once.
        self.opened = 0
        self.max_open = 0
        #: Envelope ids acknowledged, in order.
        self.acks: list[str] = []
        #: Envelopes sent and not acknowledged yet, by envelope id.
        self.pending: dict[str, dict[str, Any]] = {}
        self._ids = itertools.count(1)
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self.cond:
            live = list(self._live)
        for conn in live:
            conn.sock.close()

    @property
    def open_now(self) -> int:
        with self.cond:
            return len(self._live)

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
        return wait_notified(self.cond, predicate, timeout, lambda: (
            f"open={len(self._live)} acks={self.acks} pending={list(self.pending)}"))

    def send(self, payload: dict[str, Any], *, retry_attempt: int = 0) -> str:
        """Send an ``events_api`` envelope carrying ``payload`` on the newest connection
        (waiting for one); its envelope id."""
        self.wait_for(lambda: self._live)
        with self.cond:
            envelope = {"envelope_id": f"env-{next(self._ids)}", "type": "events_api",
                        "payload": payload, "accepts_response_payload": False,
                        "retry_attempt": retry_attempt,
                        "retry_reason": "timeout" if retry_attempt else ""}
            self.pending[envelope["envelope_id"]] = envelope
            conn = self._live[-1]
        conn.send(_TEXT, json.dumps(envelope).encode())
        return envelope["envelope_id"]

    def acked(self, envelope_id: str) -> bool:
        with self.cond:
            return envelope_id in self.acks

    # -- the server -------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _handshake(self, sock: socket.socket) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = sock.recv(1024)
            if not chunk:
                raise ConnectionError("closed during the handshake")
            request += chunk
        headers = {}
        for line in request.decode().split("\r\n")[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        accept = base64.b64encode(hashlib.sha1(
            (headers["sec-websocket-key"] + _GUID).encode()).digest()).decode()
        sock.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                      f"Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n").encode())

    def _serve(self, sock: socket.socket) -> None:
        try:
            self._handshake(sock)
        except (OSError, KeyError):
            sock.close()
            return
        with self.cond:
            self.opened += 1
            conn = _Connection(sock, self.opened)
            self._live.append(conn)
            self.max_open = max(self.max_open, len(self._live))
            # what was never acknowledged comes again, on the new connection
            again = []
            for envelope_id, envelope in list(self.pending.items()):
                del self.pending[envelope_id]
                retry = {**envelope, "envelope_id": f"env-{next(self._ids)}",
                         "retry_attempt": envelope["retry_attempt"] + 1,
                         "retry_reason": "timeout"}
                self.pending[retry["envelope_id"]] = retry
                again.append(retry)
            self.cond.notify_all()
        try:
            conn.send(_TEXT, json.dumps({"type": "hello", "num_connections": 1,
                                         "connection_info": {"app_id": "A0APP"}}).encode())
            for envelope in again:
                conn.send(_TEXT, json.dumps(envelope).encode())
            while True:
                opcode, data = _read_frame(sock)
                if opcode == _PING:
                    conn.send(_PONG, data)
                elif opcode == _CLOSE:
                    conn.send(_CLOSE, data[:2])
                    break
                elif opcode == _TEXT:
                    message = json.loads(data)
                    with self.cond:
                        envelope_id = message.get("envelope_id")
                        if envelope_id:
                            self.acks.append(envelope_id)
                            self.pending.pop(envelope_id, None)
                        self.cond.notify_all()
        except (OSError, ConnectionError, ValueError):
            pass
        finally:
            sock.close()
            with self.cond:
                if conn in self._live:
                    self._live.remove(conn)
                self.cond.notify_all()
