"""``ScriptedAgent``: an agent that obeys its message text, for tests and crash drills.

``sleep <s>`` sleeps interruptibly then replies ``slept <s>``; ``silent`` replies
``NO_REPLY``; ``fail`` raises; ``delegate <s>`` starts a background delegation that completes
after ``<s>`` seconds with ``delegation done`` and replies ``delegated <s>``; ``wait <gate>``
blocks until a test opens that gate or the turn is interrupted (see :class:`Gates`);
``hold <gate>`` blocks until the gate opens even when interrupted (then reports the
interruption), so a test decides exactly when a turn ends; anything else → ``echo: <text>``.
An auto-continue turn "continues the interrupted task" by answering ``resumed: <the last
user message in the history>``; when the note rode on a waiting message, that message's
own answer follows on the next line. Crash tests and the soak tie each answer to the
message it completes.
The command is read from the last line of the message, after a ``[sender] `` prefix, so a
recovery note or a shared-session prefix does not hide it.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

from hermes_actors.agents.base import TurnRequest, TurnResult

__all__ = ["Gates", "ScriptedAgent", "ScriptedFailure"]

_SENDER = re.compile(r"^\[[^\]\n]*\] ")


class ScriptedFailure(RuntimeError):
    """Raised by ``ScriptedAgent`` for the ``fail`` command."""


class Gates:
    """Named gates a ``wait <name>`` turn blocks on; tests open them and see who waits."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._open: set[str] = set()
        self._waiting: dict[str, int] = {}
        self._all_open = False

    def open(self, name: str) -> None:
        """Let every turn waiting on ``name`` (now or later) continue."""
        with self._cond:
            self._open.add(name)
            self._cond.notify_all()

    def open_all(self) -> None:
        """Open every gate now and later (test teardown)."""
        with self._cond:
            self._all_open = True
            self._cond.notify_all()

    def close(self, name: str) -> None:
        """Make later ``wait <name>`` turns block again."""
        with self._cond:
            self._open.discard(name)

    def wait_until_waiting(self, name: str, count: int = 1, timeout: float = 10.0) -> bool:
        """Block until ``count`` turns have started waiting on ``name``."""
        with self._cond:
            return self._cond.wait_for(lambda: self._waiting.get(name, 0) >= count, timeout)

    def _wait(self, name: str, interrupted: threading.Event | None) -> bool:
        with self._cond:
            self._waiting[name] = self._waiting.get(name, 0) + 1
            self._cond.notify_all()
            while not self._is_open(name) and not (interrupted and interrupted.is_set()):
                self._cond.wait(0.05)
            return self._is_open(name)

    def _is_open(self, name: str) -> bool:
        return self._all_open or name in self._open


@dataclass(frozen=True)
class _Seen:
    message: str
    session_id: str
    history_len: int
    internal: bool


class ScriptedAgent:
    """A deterministic agent driven by its message text (module docstring)."""

    def __init__(self, gates: Gates | None = None, log: list | None = None) -> None:
        #: The gates ``wait <name>`` blocks on.
        self.gates = gates or Gates()
        #: Every request seen, shared between agents when the test passes one list.
        self.log: list = log if log is not None else []
        self._interrupted = threading.Event()
        self.closed = False
        #: How many times ``close()`` was called (a boundary closes an agent exactly once).
        self.closes = 0
        self.released = 0
        self.committed: list[list[dict]] = []

    def run_turn(self, request: TurnRequest) -> TurnResult:
        """Obey the command on the message's last line."""
        self._interrupted.clear()
        if request.interrupted():  # stopped before this call: its interrupt was cleared
            return TurnResult(reply=None, status="interrupted")
        self.log.append(
            _Seen(request.message, request.session_id, len(request.history), request.internal)
        )
        if request.message.startswith("[System note:"):
            last = next((m.get("content", "") for m in reversed(request.history)
                         if m.get("role") == "user"), "")
            if _is_bare_note(request.message):
                return TurnResult(reply=f"resumed: {last}")
            # The note rode on a waiting message: continue the task, then answer it.
            result = self._obey(request, request.message.partition("\n\n")[2])
            reply = f"resumed: {last}\n{result.reply}" if result.reply else f"resumed: {last}"
            return TurnResult(reply=reply, status=result.status)
        return self._obey(request, request.message)

    def _obey(self, request: TurnRequest, message: str) -> TurnResult:
        lines = message.strip().splitlines() or [""]
        text = _SENDER.sub("", lines[-1].strip())
        word, _, arg = text.partition(" ")
        word = word.lower()
        if word == "sleep":
            seconds = _seconds(arg)
            if self._interrupted.wait(seconds):
                return TurnResult(reply=None, status="interrupted")
            return TurnResult(reply=f"slept {arg.strip()}")
        if word == "silent":
            return TurnResult(reply="NO_REPLY")
        if word == "fail":
            raise ScriptedFailure("scripted failure")
        if word == "delegate":
            seconds = _seconds(arg)

            def work(cancel, progress):
                progress("delegation started")
                if cancel.wait(seconds):
                    return None
                return "delegation done"

            request.delegate(work, label="task")
            return TurnResult(reply=f"delegated {arg.strip()}")
        if word == "wait":
            if not self.gates._wait(arg.strip(), self._interrupted):
                return TurnResult(reply=None, status="interrupted")
            return TurnResult(reply=f"passed {arg.strip()}")
        if word == "hold":
            self.gates._wait(arg.strip(), None)
            if self._interrupted.is_set():
                return TurnResult(reply=None, status="interrupted")
            return TurnResult(reply=f"held {arg.strip()}")
        return TurnResult(reply=f"echo: {message}")

    def interrupt(self, reason: str | None = None) -> None:
        """Make a running ``sleep``/``wait`` return ``interrupted`` now."""
        self._interrupted.set()

    def commit_memory(self, messages: list[dict]) -> None:
        """Remember what was committed (tests check eviction commits)."""
        self.committed.append(list(messages))

    def release_clients(self) -> None:
        """Count soft releases."""
        self.released += 1

    def close(self) -> None:
        """Mark closed (and count it)."""
        self.closed = True
        self.closes += 1
        self._interrupted.set()


def _is_bare_note(message: str) -> bool:
    text = message.strip()
    return text.startswith("[System note:") and text.endswith("]") and "\n" not in text


def _seconds(arg: str) -> float | None:
    """The seconds of ``sleep``/``delegate``; ``None`` (until interrupted) beyond what a
    timer can wait (``inf``, ``1e10``: a wait on those raised OverflowError)."""
    try:
        seconds = max(0.0, float(arg.strip()))
    except ValueError:
        return 0.0
    return None if seconds >= threading.TIMEOUT_MAX else seconds
