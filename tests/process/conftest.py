"""Real ``hermes-actors run`` processes for the tests, driven over HTTP and signals.

Tests synchronise on what the process says: its ``event=...`` log lines on stderr, its
stdout, and HTTP answers (the outbox long poll waits for replies). Nothing sleeps.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

#: The token of the shared gateway.
TOKEN = "s3cret-token"


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test runner's environment without any ``HERMES_*`` setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_")}
    env.update(extra or {})
    return env


class Stream:
    """The lines of one pipe, read by a thread; ``expect`` waits for a matching line."""

    def __init__(self, pipe) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._next = 0
        threading.Thread(target=self._pump, args=(pipe,), daemon=True).start()

    def _pump(self, pipe) -> None:
        for line in pipe:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def expect(self, pattern: str, timeout: float = 30.0) -> str:
        """The next line (after the last one matched) containing ``pattern`` (a regex)."""
        while True:
            while self._next < len(self.lines):
                line = self.lines[self._next]
                self._next += 1
                if re.search(pattern, line):
                    return line
            try:
                line = self._queue.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r} within {timeout}s; "
                                     f"saw: {self.lines[-20:]}") from None
            if line is None:
                self._queue.put(None)
                raise AssertionError(f"stream ended before {pattern!r}; saw: {self.lines[-20:]}")
            self.lines.append(line)

    def text(self) -> str:
        """Everything read so far."""
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                break
            if line is None:
                self._queue.put(None)
                break
            self.lines.append(line)
        return "\n".join(self.lines)


class GatewayProcess:
    """One ``hermes-actors run`` process; ready (port known) once constructed."""

    def __init__(self, home: Path, *args: str, env: dict[str, str] | None = None,
                 argv: list[str] | None = None, cwd: Path | None = None,
                 token: str | None = None) -> None:
        self.home = home
        self.token = token
        command = argv or [sys.executable, "-m", "hermes_actors", "run", "--home", str(home),
                           "--port", "0", *args]
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=clean_env(env), cwd=cwd,
        )
        self.stdout = Stream(self.proc.stdout)
        self.stderr = Stream(self.proc.stderr)
        ready = self.stderr.expect(r"event=ready")
        self.port = int(re.search(r"port=(\d+)", ready).group(1))
        self.url = f"http://127.0.0.1:{self.port}"

    def recovery(self) -> str:
        """The recovery summary the process logged before it was ready (exactly one)."""
        lines = [line for line in self.stderr.lines if " recovery: " in line]
        assert len(lines) == 1, lines
        return lines[0][lines[0].index("recovery: "):]

    # -- HTTP -------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: object = None, *, raw: bytes | None = None,
                headers: dict[str, str] | None = None, token: str | None | bool = True,
                timeout: float = 70.0) -> tuple[int, dict[str, str], object]:
        """One request; returns status, headers and the decoded body (JSON, else text)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        sent = dict(headers or {})
        if token is True and self.token:
            sent["Authorization"] = f"Bearer {self.token}"
        elif isinstance(token, str):
            sent["Authorization"] = f"Bearer {token}"
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        try:
            conn.request(method, path, body=data, headers=sent)
            response = conn.getresponse()
            payload = response.read()
            got = {k.lower(): v for k, v in response.getheaders()}
        finally:
            conn.close()
        if got.get("content-type", "").startswith("application/json"):
            return response.status, got, json.loads(payload)
        return response.status, got, payload.decode("utf-8")

    def post(self, chat_id: object = "42", text: str = "hello", **fields) -> dict:
        """POST a message; asserts 202 and returns the answer."""
        status, _, body = self.request("POST", "/v1/messages",
                                       {"chat_id": chat_id, "text": text, **fields})
        assert status == 202, body
        return body

    def outbox(self, chat_id: str = "42", after: object = 0, wait: float = 30.0,
               **params) -> dict:
        """GET the outbox (a long poll of ``wait`` seconds); asserts 200."""
        query = urllib.parse.urlencode({"chat_id": chat_id, "after": after, "wait": wait,
                                        **params})
        status, _, body = self.request("GET", f"/v1/outbox?{query}")
        assert status == 200, body
        return body

    def replies(self, chat_id: str, count: int, after: int = 0) -> list[dict]:
        """Long-poll until ``count`` messages arrived for the chat after ``after``."""
        found: list[dict] = []
        while len(found) < count:
            page = self.outbox(chat_id, after=after, wait=30)
            assert page["messages"], f"no reply for {chat_id!r} within 30s; got {found}"
            found += page["messages"]
            after = page["cursor"]
        return found

    def session(self, key: str) -> tuple[int, object]:
        """GET /v1/sessions/<key> (percent-encoded)."""
        status, _, body = self.request("GET", "/v1/sessions/" + urllib.parse.quote(key, safe=""))
        return status, body

    # -- process ----------------------------------------------------------------------------

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the process."""
        self.proc.send_signal(signum)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL if still running."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


@contextlib.contextmanager
def stopped_after() -> Iterator[list[GatewayProcess]]:
    """A list for the gateways a fixture starts: each is stopped (or killed) at the end."""
    started: list[GatewayProcess] = []
    try:
        yield started
    finally:
        for gateway in started:
            try:
                gateway.stop(timeout=30)
            except subprocess.TimeoutExpired:
                gateway.kill()


def platform_home(tmp_path: Path, config: dict) -> Path:
    """``<tmp_path>/home`` with ``config`` as its ``config.yaml`` (JSON is YAML)."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.yaml").write_text(json.dumps(config), encoding="utf-8")
    return home


@pytest.fixture
def start_gateway(tmp_path):
    """``start_gateway(*args, home=None, env=None, token=None)`` → a ready GatewayProcess;
    every process is stopped (or killed) after the test."""
    with stopped_after() as started:
        def start(*args: str, home: Path | None = None, env: dict[str, str] | None = None,
                  token: str | None = None) -> GatewayProcess:
            gateway = GatewayProcess(home or tmp_path / "home", *args, env=env, token=token)
            started.append(gateway)
            return gateway

        yield start


@pytest.fixture(scope="module")
def shared_gateway(tmp_path_factory):
    """One gateway for a module's tests: scripted agent, bearer token :data:`TOKEN`."""
    home = tmp_path_factory.mktemp("shared") / "home"
    gateway = GatewayProcess(home, "--agent", "scripted", env={"HERMES_HTTP_TOKEN": TOKEN},
                             token=TOKEN)
    yield gateway
    try:
        assert gateway.stop(timeout=30) == 0
    finally:
        gateway.kill()


def run_cli(*args: str, env: dict[str, str] | None = None, stdin: str | None = None,
            cwd: Path | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """``python -m hermes_actors ARGS`` to completion, output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "hermes_actors", *args], input=stdin, capture_output=True,
        text=True, env=clean_env(env), cwd=cwd, timeout=timeout,
    )
