"""Real gateway processes for the cluster scenarios: ``hermes-actors run`` nodes on the
run's PostgreSQL server, their log lines with arrival times, their CPU time, an HTTP
client, and the questions the scenarios ask the database.

A node is ``python -m hermes_actors run --home HOME --port 0`` configured by environment
(``HERMES_*``), exactly as an operator runs one: the HTTP adapter on loopback, the outbox
for the HTTP platforms, the agent the scenario names (``scripted`` or ``echo``). Its stderr
is read by a greenlet that stamps every line with ``time.perf_counter()`` on arrival, so a
scenario can say *when* a node logged ``event=ready`` or ``event=cluster_shards_serving``.

Imported only in (gevent-patched) children, after patching.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

__all__ = ["HttpClient", "NodeProcess", "node_env", "process_cpu", "sql", "until"]


def node_env(dsn: str, *, cluster: bool, agent: str, shards: int = 64,
             lease_ttl: float = 10.0, heartbeat: float = 2.0,
             extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a node (or, ``cluster=False``, of a single gateway) on ``dsn``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update({
        "HERMES_STORE_BACKEND": "postgres", "HERMES_STORE_DSN": dsn,
        "HERMES_AGENT_KIND": agent, "HERMES_BUSY_INPUT_MODE": "queue",
    })
    if cluster:
        env.update({
            "HERMES_CLUSTER_ENABLED": "true", "HERMES_CLUSTER_SHARDS": str(shards),
            "HERMES_CLUSTER_LEASE_TTL": str(lease_ttl),
            "HERMES_CLUSTER_HEARTBEAT": str(heartbeat),
        })
    env.update(extra or {})
    return env


class NodeProcess:
    """One ``hermes-actors run`` process; ready (its port known) once constructed."""

    def __init__(self, home: Path, env: dict[str, str], *, timeout: float = 120.0) -> None:
        self.home = home
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hermes_actors", "run", "--home", str(home), "--port", "0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, env=env,
        )
        self.pid = self.proc.pid
        #: ``(perf_counter at arrival, line)`` of every stderr line so far.
        self.lines: list[tuple[float, str]] = []
        self._grew = threading.Condition()
        self._ended = False
        threading.Thread(target=self._pump, daemon=True).start()
        try:
            _, ready = self.wait_line(r"event=ready", timeout=timeout)
        except BaseException:
            self.kill()
            raise
        self.ready_at = self.lines[-1][0] if self.lines else time.perf_counter()
        match = re.search(r"port=(\d+)", ready)
        assert match is not None, ready
        self.port = int(match.group(1))
        node_id = home / "node_id"
        self.node_id = node_id.read_text().strip() if node_id.exists() else ""

    def _pump(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._grew:
                self.lines.append((time.perf_counter(), line.rstrip("\n")))
                self._grew.notify_all()
        with self._grew:
            self._ended = True
            self._grew.notify_all()

    def wait_line(self, pattern: str, *, after: float = 0.0,
                  timeout: float = 120.0) -> tuple[float, str]:
        """The first line logged at or after ``after`` (a ``perf_counter``) matching
        ``pattern``, with its arrival time; waits for it up to ``timeout`` seconds."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._grew:
            while True:
                for t, line in self.lines[seen:]:
                    if t >= after and regex.search(line):
                        return t, line
                seen = len(self.lines)
                if self._ended:
                    tail = [line for _, line in self.lines[-15:]]
                    raise RuntimeError(f"the node exited before {pattern!r}: {tail}")
                left = deadline - time.monotonic()
                if left <= 0:
                    tail = [line for _, line in self.lines[-15:]]
                    raise RuntimeError(f"no {pattern!r} within {timeout:.0f} s: {tail}")
                self._grew.wait(min(left, 1.0))

    def cpu_seconds(self) -> float:
        """The process's CPU seconds so far (user + system, with any children)."""
        return process_cpu(self.pid)

    def kill(self) -> None:
        """SIGKILL, if still running, and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM and wait (SIGKILL after ``timeout``)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` and its live children; 0 when gone."""
    try:
        proc = psutil.Process(pid)
        times = proc.cpu_times()
        total = times.user + times.system + times.children_user + times.children_system
        for child in proc.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                t = child.cpu_times()
                total += t.user + t.system
        return total
    except psutil.Error:
        return 0.0


class HttpClient:
    """One keep-alive connection to a node (``TCP_NODELAY``, as curl and browsers)."""

    def __init__(self, port: int, timeout: float = 60.0) -> None:
        self.port = port
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            conn.connect()
            assert conn.sock is not None
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._conn = conn
        return self._conn

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One request (reconnecting once after a dropped connection); status and JSON."""
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        for attempt in (1, 2):
            try:
                conn = self._connection()
                conn.request(method, path, data, headers)
                answer = conn.getresponse()
                payload = answer.read()
                return answer.status, json.loads(payload) if payload else None
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def post(self, chat: str, text: str) -> str:
        """``POST /v1/messages``; the event id (asserts 202)."""
        status, body = self.request("POST", "/v1/messages", {"chat_id": chat, "text": text})
        if status != 202:
            raise RuntimeError(f"POST /v1/messages answered {status}: {body}")
        return str(body["event_id"])

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def sql(dsn: str, statement: str, params: tuple = ()) -> list[tuple]:
    """One statement on a fresh autocommit connection; its rows."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description is not None else []


def until(check: Callable[[], bool], what: str, *, timeout: float, every: float = 0.05
          ) -> float:
    """Wait until ``check()`` holds, asked every ``every`` seconds; the ``perf_counter``
    of the first time it held. Raises ``RuntimeError`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {timeout:.0f} s: {what}")
        time.sleep(every)
    return time.perf_counter()
