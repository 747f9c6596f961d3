"""A driver for gateway child processes that tests kill with SIGKILL and start again."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("gateway_child.py")


class Child:
    """One gateway process over ``home``."""

    def __init__(self, home: Path, config: dict, env: dict | None = None,
                 ready: bool = True) -> None:
        self.home = home
        #: The settings the child was started with (its store among them).
        self.config = config
        full_env = dict(os.environ)
        full_env.pop("HERMES_ACTORS_CRASHPOINT", None)
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(home), json.dumps(config)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=full_env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self._backlog: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        self.report: dict = {}
        if ready:
            line = self.expect("READY", keep=True)
            self.report = json.loads(line[len("READY "):])

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put("<EOF>")

    def expect(self, prefix: str, timeout: float = 30.0, *, keep: bool = False) -> str:
        """The next stdout line starting with ``prefix`` (fails on EOF or timeout); lines
        skipped on the way are dropped, or with ``keep`` left for the next ``expect``
        (the resumed turn may announce itself before the READY line)."""
        while self._backlog:
            line = self._backlog.pop(0)
            if line.startswith(prefix):
                return line
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no {prefix!r} line within {timeout}s; saw {self.seen}") from None
            if line == "<EOF>":
                raise AssertionError(
                    f"child ended before {prefix!r}; saw {self.seen}; "
                    f"stderr: {self.proc.stderr.read()[-2000:]}")
            self.seen.append(line)
            if line.startswith(prefix):
                return line
            if keep:
                self._backlog.append(line)

    def turns(self) -> list[str]:
        """Messages that reached the agent so far (as read)."""
        return [json.loads(x[5:]) for x in self.seen if x.startswith("TURN ")]

    def send(self, text: str, **fields) -> str:
        self.proc.stdin.write(json.dumps({"text": text, **fields}) + "\n")
        self.proc.stdin.flush()
        return self.expect("ACK")[4:]

    def idle(self, timeout: float = 30.0) -> None:
        self.proc.stdin.write(json.dumps({"idle": timeout}) + "\n")
        self.proc.stdin.flush()
        assert self.expect("IDLE", timeout + 5) == "IDLE true"

    def submit_nowait(self, text: str, **fields) -> None:
        """Write a message without waiting for its ACK (the process may die first)."""
        self.proc.stdin.write(json.dumps({"text": text, **fields}) + "\n")
        self.proc.stdin.flush()

    def idle_or_exit(self, timeout: float = 30.0) -> int | None:
        """Ask for idle; returns None once idle, or the exit code if the process died."""
        try:
            self.proc.stdin.write(json.dumps({"idle": timeout}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self.proc.wait(timeout=30)
        while True:
            line = self.lines.get(timeout=timeout + 5)
            if line == "<EOF>":
                return self.proc.wait(timeout=30)
            self.seen.append(line)
            if line.startswith("IDLE"):
                assert line == "IDLE true"
                return None

    def sent(self) -> list[str]:
        """Texts sent so far (as read)."""
        return [json.loads(x[5:]) for x in self.seen if x.startswith("SENT ")]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def wait_exit(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self, drain: float = 5.0) -> int:
        self.proc.stdin.write(json.dumps({"stop": drain}) + "\n")
        self.proc.stdin.flush()
        self.expect("STOPPED")
        return self.proc.wait(timeout=30)

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


def outbox(home: Path) -> list[str]:
    path = home / "outbox.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["text"] for line in path.read_text().splitlines() if line]


@pytest.fixture
def spawn(tmp_path, harness_store):
    """Start gateway children on one home, with the store of ``harness_store`` (the
    default backend unless a module runs on every backend)."""
    children: list[Child] = []

    def start(config: dict | None = None, env: dict | None = None, ready: bool = True) -> Child:
        child = Child(tmp_path / "home", {**harness_store, **(config or {})}, env, ready)
        children.append(child)
        return child

    yield start
    for child in children:
        if child.proc.poll() is None:
            child.proc.kill()
            child.proc.wait(timeout=30)


def crash_at(spawn, point: str, text: str = "hello", config: dict | None = None) -> Child:
    """A child armed at ``point`` that is sent ``text`` and has died there (exit 137)."""
    child = spawn(config, env={"HERMES_ACTORS_CRASHPOINT": point})
    child.submit_nowait(text)
    assert child.wait_exit() == 137, child.seen
    return child
