"""``BridgeClient``: the gateway process's end of the Discord bridge.

It starts ``python -m hermes_actors.adapters.discord.bridge`` (:mod:`.bridge`) with pipes
for its standard input and output, writes the hello (the token on the pipe), and then
talks JSON lines: :meth:`request` sends one request and waits for its answer (many may be
in flight: sends of several sessions, "typing…", a channel lookup), :meth:`taken` answers
one Gateway event. A reader (a greenlet under gevent, where ``subprocess`` is gevent's and
its pipes wait on the hub; else a daemon thread) hands each answer to its waiter and each
event and Gateway state to the callbacks given, in the order read.

The bridge's standard error is the gateway's own: its log lines (hikari's, the token
masked) appear there as they come. Closing the pipe ends the bridge; so does this process's
death (``kill -9`` included), since the bridge reads to the end of its input. Nothing here
ever holds the token in an error or a log line.
"""

from __future__ import annotations

import itertools
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from hermes_actors._green import spawn
from hermes_actors.errors import HermesActorsError

__all__ = ["BridgeClient", "BridgeError", "DiscordError"]

log = logging.getLogger("hermes_actors.discord")

#: Seconds the bridge may take to start (import hikari, start its REST client).
START_TIMEOUT = 60.0
#: Seconds a request may take (hikari's own timeouts end a REST call well before).
REQUEST_TIMEOUT = 90.0


class DiscordError(HermesActorsError):
    """A request the bridge answered with a failure (or could not answer); the text never
    contains the token."""

    def __init__(self, message: str, *, kind: str = "failed", status: int | None = None,
                 code: int = 0, retry_after: float | None = None) -> None:
        super().__init__(message)
        #: ``rate_limited``, ``http``, ``connection``, ``failed`` or ``bridge`` (it is gone).
        self.kind = kind
        #: The HTTP status of a refusal, else ``None``.
        self.status = status
        #: Discord's JSON error code (50001 Missing Access, 10003 Unknown Channel, ...).
        self.code = code
        #: Seconds Discord asked to wait (a 429), else ``None``.
        self.retry_after = retry_after

    @classmethod
    def of(cls, what: str, error: dict[str, Any]) -> DiscordError:
        kind = str(error.get("kind") or "failed")
        if kind == "rate_limited":
            return cls(f"{what}: rate limited", kind=kind,
                       retry_after=float(error.get("retry_after") or 1.0))
        if kind == "http":
            status = int(error.get("status") or 0)
            message = str(error.get("message") or "")
            return cls(f"{what}: {status} {message}".strip(), kind=kind, status=status,
                       code=int(error.get("code") or 0))
        return cls(f"{what}: {error.get('message') or kind}", kind=kind)


class BridgeError(DiscordError):
    """The bridge process is not there (it did not start, or it exited)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, kind="bridge")


class _Waiter:
    __slots__ = ("answer", "done")

    def __init__(self) -> None:
        self.done = threading.Event()  # (gevent's, once threading is patched)
        self.answer: dict[str, Any] | None = None


class BridgeClient:
    """One bridge process. ``on_event(message)`` gets each ``{"t": "event", ...}`` (answer
    it with :meth:`taken`); ``on_gateway(message)`` each Gateway state; ``on_exit(code)``
    is called once when the process has ended, unless :meth:`close` ended it."""

    def __init__(self, hello: dict[str, Any], *,
                 on_event: Callable[[dict[str, Any]], None],
                 on_gateway: Callable[[dict[str, Any]], None] = lambda message: None,
                 on_exit: Callable[[int | None], None] = lambda code: None,
                 argv: list[str] | None = None) -> None:
        self._hello = hello
        self._on_event = on_event
        self._on_gateway = on_gateway
        self._on_exit = on_exit
        self._argv = argv or [sys.executable, "-m", "hermes_actors.adapters.discord.bridge"]
        self._proc: Any = None
        self._numbers = itertools.count(1)
        self._waiters: dict[int, _Waiter] = {}
        self._lock = threading.Lock()  # (gevent's once patched: a write may yield)
        self._ready = threading.Event()
        self._ended = threading.Event()
        #: Set once the bridge said it is ready, or ended before.
        self._settled = threading.Event()
        self._closing = False

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def alive(self) -> bool:
        """Started, and neither ended nor closed."""
        return self._ready.is_set() and not self._ended.is_set() and not self._closing

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the process and wait until it is ready; :class:`BridgeError` otherwise."""
        try:
            self._proc = subprocess.Popen(self._argv, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, close_fds=True)
        except OSError as exc:
            raise BridgeError(f"cannot start the Discord bridge: {exc}") from None
        spawn(self._read, "discord-bridge-reader")
        self._write(self._hello)
        if not self._settled.wait(timeout) or not self._ready.is_set():
            self.close()
            raise BridgeError("the Discord bridge did not start (its errors are in the log "
                              "above)")

    def request(self, op: str, *, timeout: float = REQUEST_TIMEOUT, **params: Any) -> Any:
        """Send request ``op`` and return its answer's data; :class:`DiscordError` when the
        bridge answered a failure, :class:`BridgeError` when it is gone."""
        number = next(self._numbers)
        waiter = _Waiter()
        self._waiters[number] = waiter
        try:
            if self._ended.is_set():
                raise BridgeError("the Discord bridge is not running")
            self._write({"op": op, "n": number, **params})
            if not waiter.done.wait(timeout):
                raise DiscordError(f"{op}: no answer from the Discord bridge in {timeout:g}s",
                                   kind="connection")
        finally:
            self._waiters.pop(number, None)
        answer = waiter.answer
        if answer is None:
            raise BridgeError("the Discord bridge exited")
        if not answer.get("ok"):
            raise DiscordError.of(op, answer.get("error") or {})
        return answer.get("d")

    def taken(self, event: int, *, dropped: bool = False) -> None:
        """Answer event ``event``: kept (durable), or ``dropped``."""
        try:
            self._write({"op": "taken", "e": event, **({"dropped": True} if dropped else {})})
        except BridgeError:
            pass  # gone: the event went with it

    def close(self, timeout: float = 10.0) -> None:
        """End the process (its input closed; killed if it lingers)."""
        self._closing = True
        proc = self._proc
        if proc is None:
            return
        try:
            with self._lock:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)
        self._ended.wait(timeout)

    def kill(self) -> None:
        """End the process at once (a Gateway that must stop now)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()

    # -- the pipes --------------------------------------------------------------------------

    def _write(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self._lock:
            try:
                self._proc.stdin.write(data)
                self._proc.stdin.flush()
            except (OSError, ValueError, AttributeError):  # closed, or never opened
                raise BridgeError("the Discord bridge is not running") from None

    def _read(self) -> None:
        proc = self._proc
        try:
            for line in proc.stdout:
                try:
                    message = json.loads(line)
                except ValueError:
                    log.warning("event=discord_bridge_garbled bytes=%d", len(line))
                    continue
                kind = message.get("t")
                if kind == "result":
                    waiter = self._waiters.get(message.get("n"))
                    if waiter is not None:
                        waiter.answer = message
                        waiter.done.set()
                elif kind == "event":
                    self._on_event(message)
                elif kind == "gateway":
                    self._on_gateway(message)
                elif kind == "ready":
                    self._ready.set()
                    self._settled.set()
        except (OSError, ValueError):
            pass
        finally:
            try:
                code = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                code = None
            self._ended.set()
            self._settled.set()
            for waiter in list(self._waiters.values()):
                waiter.done.set()  # (no answer: the bridge exited)
            if not self._closing:
                self._on_exit(code)
