"""The HTTP load drivers of the ``http`` and ``sse`` scenarios: the same clients for the
gateway and for its raw bound (:mod:`benchmarks.rawhttp`).

* :func:`long_poll_load`: closed loops, one keep-alive connection each (like an HTTP chat
  client): POST a message, then long-poll the chat's outbox after the cursor it last saw
  until the reply naming the message's event id (``in_reply_to``) arrives, then send the
  next. A latency runs from the POST to the moment the client read the reply.
* :func:`stream_load`: one open ``GET /v1/stream`` per chat, and ``posters`` keep-alive
  connections POSTing; a chat's next message is posted when its answer (a ``final``
  event) arrived on its stream. A latency runs from the POST to the event read.

The clients are threads (greenlets: the children are gevent-patched). ``python -m
benchmarks._driver long-poll|stream PORT ...`` runs a driver in a process of its own, to
tell whether the driver in the measured process is what limits a figure
(:mod:`benchmarks._driver`).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import queue
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable

__all__ = ["DriverProcess", "cpu_seconds", "long_poll_load", "measured", "stream_load"]

Progress = Callable[[str], None]


def cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process and its live children (the
    SQLite writer process, a driver process)."""
    import psutil

    total = time.process_time()
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:  # exited meanwhile
            continue
        total += times.user + times.system
    return total


def measured(load: Callable[[], tuple[float, list[float]]],
             count: int) -> tuple[float, list[float], float]:
    """Run ``load`` (``count`` turns); its rate (per second), its sorted latencies (s) and
    the CPU it cost per turn (µs), this process and its children together."""
    cpu = cpu_seconds()
    elapsed, latencies = load()
    return count / elapsed, latencies, (cpu_seconds() - cpu) * 1e6 / count


def _connect(port: int) -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.connect()  # as curl and browsers do: no Nagle delay on a request's two writes
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def _post(conn: http.client.HTTPConnection, chat: str, text: str) -> str:
    body = json.dumps({"chat_id": chat, "text": text})
    conn.request("POST", "/v1/messages", body, {"Content-Type": "application/json"})
    answer = conn.getresponse()
    data = answer.read()
    if answer.status != 202:
        raise RuntimeError(f"POST /v1/messages answered {answer.status}: {data[:200]!r}")
    return json.loads(data)["event_id"]


def _wait_done(done: threading.Event, count: Callable[[], int], total: int, what: str,
               progress: Progress | None, timeout: float, errors: list[BaseException]) -> None:
    deadline = time.perf_counter() + timeout
    while not done.wait(0.5):
        if errors:
            raise errors[0]
        if progress is not None:
            progress(f"{what}: {count():,}/{total:,}")
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{what}: only {count()} of {total} after {timeout:.0f} s")
    if errors:
        raise errors[0]


def long_poll_load(port: int, sessions: int, messages: int, clients: int, *,
                   progress: Progress | None = None,
                   timeout: float = 120.0) -> tuple[float, list[float]]:
    """``sessions`` chats x ``messages`` turns through POST + long poll from ``clients``
    closed loops; the seconds from the first POST to the last reply, and the sorted
    latencies (s)."""
    ready: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    latencies: list[float] = []
    left = [messages] * sessions
    cursors = [0] * sessions
    done = threading.Event()
    errors: list[BaseException] = []
    total = sessions * messages

    def client() -> None:
        try:
            conn = _connect(port)
            while (n := ready.get()) is not None:
                chat = f"c{n}"
                began = time.perf_counter()
                event_id = _post(conn, chat, f"message of {n}")
                after = cursors[n]
                while True:
                    query = urllib.parse.urlencode({"chat_id": chat, "after": after,
                                                    "wait": 30})
                    conn.request("GET", f"/v1/outbox?{query}")
                    page = json.loads(conn.getresponse().read())
                    after = page["cursor"]
                    if any(event_id in m["in_reply_to"] for m in page["messages"]):
                        break
                cursors[n] = after
                latencies.append(time.perf_counter() - began)
                left[n] -= 1
                if left[n] > 0:
                    ready.put(n)
                if len(latencies) >= total:
                    done.set()
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by _wait_done
            errors.append(exc)

    for n in range(sessions):
        ready.put(n)
    started = time.perf_counter()
    workers = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for w in workers:
        w.start()
    try:
        _wait_done(done, lambda: len(latencies), total, "turns", progress, timeout, errors)
        elapsed = time.perf_counter() - started
    finally:
        for _ in workers:
            ready.put(None)
    return elapsed, sorted(latencies)


class _Stream:
    """One open ``GET /v1/stream`` of chat ``n``; ``answered(n, time)`` per final event."""

    def __init__(self, port: int, n: int) -> None:
        self.conn = _connect(port)
        self.conn.request("GET", f"/v1/stream?chat_id=c{n}&after=latest")
        self.response = self.conn.getresponse()
        if self.response.status != 200:
            raise RuntimeError(f"GET /v1/stream answered {self.response.status}: "
                               f"{self.response.read(200)!r}")
        while self.response.readline() not in (b"\n", b""):  # the opening event
            pass

    def read(self, n: int, answered: Callable[[int, float], None]) -> None:
        readline = self.response.readline
        try:
            while line := readline():
                if line.startswith(b"data: ") and b'"final":true' in line:
                    answered(n, time.perf_counter())
        except (OSError, ValueError, http.client.HTTPException):
            pass  # closed at the end of the run

    def shutdown(self) -> None:
        """End the connection under its reader (which then sees the end and returns)."""
        with contextlib.suppress(OSError):
            self.conn.sock.shutdown(socket.SHUT_RDWR)


def stream_load(port: int, streams: int, messages: int, posters: int, *,
                progress: Progress | None = None,
                timeout: float = 120.0) -> tuple[float, list[float]]:
    """``streams`` open streams (one chat each), ``messages`` answers on each, messages
    POSTed by ``posters`` connections, a chat's next when its answer arrived; the seconds
    from the first POST to the last answer, and the sorted latencies (s)."""
    ready: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    latencies: list[float] = []
    posted = [0.0] * streams
    left = [messages] * streams
    done = threading.Event()
    errors: list[BaseException] = []
    total = streams * messages

    def answered(n: int, at: float) -> None:
        latencies.append(at - posted[n])
        left[n] -= 1
        if left[n] > 0:
            ready.put(n)
        if len(latencies) >= total:
            done.set()

    def poster() -> None:
        try:
            conn = _connect(port)
            while (n := ready.get()) is not None:
                posted[n] = time.perf_counter()
                _post(conn, f"c{n}", f"message of {n}")
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by _wait_done
            errors.append(exc)

    opened: list[_Stream] = []
    readers: list[threading.Thread] = []
    try:
        for n in range(streams):
            stream = _Stream(port, n)
            opened.append(stream)
            readers.append(threading.Thread(target=stream.read, args=(n, answered),
                                            daemon=True))
            if progress is not None and n % 100 == 0:
                progress(f"streams: {n:,}/{streams:,} open")
        for r in readers:
            r.start()
        for n in range(streams):
            ready.put(n)
        started = time.perf_counter()
        workers = [threading.Thread(target=poster, daemon=True) for _ in range(posters)]
        for w in workers:
            w.start()
        try:
            _wait_done(done, lambda: len(latencies), total, "answers", progress, timeout,
                       errors)
            elapsed = time.perf_counter() - started
        finally:
            for _ in workers:
                ready.put(None)
    finally:
        for stream in opened:
            stream.shutdown()
        for r in readers:
            if r.is_alive():
                r.join(5)
        for stream in opened:
            stream.conn.close()
    return elapsed, sorted(latencies)


class DriverProcess:
    """A driver run in a process of its own (``python -m benchmarks._driver``)."""

    def __init__(self, kind: str, port: int, *sizes: int) -> None:
        import subprocess
        import sys

        self._proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks._driver", kind, str(port),
             *(str(s) for s in sizes)], stdout=subprocess.PIPE)

    def result(self, timeout: float = 180.0) -> tuple[float, list[float]]:
        """The driver's ``(seconds, sorted latencies)``; raises when it failed."""
        try:
            out, _ = self._proc.communicate(timeout=timeout)
        except BaseException:  # (a timeout): the driver does not outlive the run
            self._proc.kill()
            self._proc.wait()
            raise
        if self._proc.returncode != 0:
            raise RuntimeError(f"the load driver exited {self._proc.returncode}")
        data = json.loads(out)
        return data["elapsed"], data["latencies"]
