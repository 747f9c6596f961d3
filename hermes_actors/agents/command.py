"""``CommandAgent``: runs an external program per turn, JSON on stdin, reply on stdout.

Why a fresh process per turn: the program can be written in anything, holds no state the
runtime must manage, and an interrupt or a timeout is a signal, not a protocol. The session
lives in ``history``, which the runtime loads from the store for every turn.

Protocol (one turn = one process)::

    stdin  (UTF-8, then closed)
        {"session_key": str, "session_id": str, "message": str,
         "history": [{"role", "content", ...}, ...], "system_prompt": str,
         "internal": bool, "media_urls": [str, ...]}
    stdout, either a JSON object (the reply record)
        {"reply": str | null, "status"?: "completed"|"interrupted"|"failed"|"partial",
         "usage"?: {"input_tokens": int, "output_tokens": int, "prompt_tokens": int, ...}}
    or anything that does not parse as a JSON object: the whole stdout is the reply text
    (trailing whitespace removed; empty stdout means no reply).

Exit status 0 is required; any other status is a failed turn (``CommandAgentError``, stderr
goes to the log, truncated). stderr is otherwise free for the program's own logging.

The child runs in its own process group, so an interrupt, a timeout or ``close()`` stops
everything it started: SIGTERM to the group, SIGKILL to the group after ``grace`` seconds
(``close()``: SIGKILL at once). The SIGKILL goes to the group whether or not the child has
exited meanwhile, so a helper that ignores SIGTERM dies with it. A program that exits while
a helper it started still holds its stdout or stderr is answered once ``grace`` seconds
have passed: the group is SIGKILLed then (else the turn would wait for the helper). The child is always reaped
before ``run_turn`` returns (a pending SIGKILL may fire after that). Rejected: a long-lived child speaking a line
protocol (it would need its own supervision, restarts and framing rules).

An ``interrupt`` affects only a ``run_turn`` in progress (each turn starts clean), like
``ScriptedAgent``; a turn whose request says it was interrupted already
(``TurnRequest.interrupted()``) starts no program.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

from hermes_actors._green import spawn
from hermes_actors.agents.base import TurnRequest, TurnResult
from hermes_actors.errors import HermesActorsError

__all__ = [
    "CommandAgent",
    "CommandAgentError",
    "CommandAgentTimeout",
    "decode_reply",
    "encode_request",
]

log = logging.getLogger("hermes_actors.agents.command")

#: Seconds between SIGTERM and SIGKILL when a child is stopped.
DEFAULT_GRACE = 2.0
#: How much of stderr reaches the log (the tail, in characters).
STDERR_LOG_CHARS = 2000
#: How much of stderr an exception message quotes (the tail, in characters).
STDERR_ERROR_CHARS = 300

_STATUSES = ("completed", "interrupted", "failed", "partial")


class CommandAgentError(HermesActorsError, RuntimeError):
    """The agent program could not run, failed, or broke the reply protocol."""


class CommandAgentTimeout(CommandAgentError):
    """The agent program ran longer than ``agent.timeout`` and was stopped."""


class CommandAgent:
    """Runs ``argv`` once per turn (module docstring: protocol, signals, reaping)."""

    def __init__(self, argv: Sequence[str], *, timeout: float = 1800.0,
                 grace: float = DEFAULT_GRACE) -> None:
        if not argv:
            raise ValueError("CommandAgent needs a program to run")
        #: The program and its arguments.
        self.argv: tuple[str, ...] = tuple(argv)
        #: Seconds a turn may take before the child is stopped (``agent.timeout``).
        self.timeout = timeout
        #: Seconds between SIGTERM and SIGKILL.
        self.grace = grace
        self._lock = threading.Lock()
        self._interrupted = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._kill_timer: threading.Timer | None = None

    def run_turn(self, request: TurnRequest) -> TurnResult:
        """Run the program on ``request``; a timeout or a bad exit raises ``CommandAgentError``."""
        self._interrupted.clear()
        if request.interrupted():  # stopped before this call: its interrupt was cleared
            return TurnResult(None, "interrupted")
        payload = encode_request(request)
        started = time.monotonic()
        proc = self._spawn()
        try:
            with self._lock:
                self._proc = proc
            if self._interrupted.is_set():  # interrupted while spawning
                self.interrupt()
            done = threading.Event()
            spawn(lambda: self._stop_holders(proc, done), "agent-command-exit")
            try:
                out, err = proc.communicate(payload, timeout=self.timeout)
            except subprocess.TimeoutExpired:
                if self._interrupted.is_set():
                    return TurnResult(None, "interrupted")
                self._terminate(proc, "timeout")
                try:
                    proc.wait(timeout=self.grace)
                except subprocess.TimeoutExpired:
                    pass  # killed (with its group) by the pending SIGKILL and _finish
                raise CommandAgentTimeout(
                    f"agent command {self.argv[0]!r} took longer than {self.timeout:g}s "
                    "(agent.timeout) and was stopped"
                ) from None
            finally:
                done.set()
            if self._interrupted.is_set():
                return TurnResult(None, "interrupted")
            return self._result(proc.returncode, out, err, time.monotonic() - started)
        finally:
            self._finish(proc)

    def interrupt(self, reason: str | None = None) -> None:
        """Stop the running child: SIGTERM to its group now, SIGKILL to the group after
        ``grace``."""
        with self._lock:
            self._interrupted.set()
            proc = self._proc
        if proc is not None:
            self._terminate(proc, reason)

    def release_clients(self) -> None:
        """Nothing is kept between turns."""

    def close(self) -> None:
        """Kill a running child at once (its ``run_turn`` returns ``interrupted``)."""
        with self._lock:
            self._interrupted.set()
            proc = self._proc
        if proc is not None:
            _kill_group(proc.pid)  # start_new_session: the group id is the child's pid

    # -- internals ---------------------------------------------------------------------------

    def _spawn(self) -> subprocess.Popen[bytes]:
        try:
            return subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
            )
        except OSError as exc:
            raise CommandAgentError(f"cannot start agent command {self.argv[0]!r}: {exc}") from exc

    def _terminate(self, proc: subprocess.Popen[bytes], reason: str | None) -> None:
        """SIGTERM the child's group now and SIGKILL the group after ``grace`` (once a turn)."""
        with self._lock:
            if self._kill_timer is not None or proc is not self._proc:
                return
            # start_new_session: the group id is the child's pid, remembered here because the
            # SIGKILL is sent even once the child itself is reaped (its helpers may live on).
            timer = self._kill_timer = threading.Timer(self.grace, _kill_group, (proc.pid,))
            timer.daemon = True
        log.info("stopping agent command pid=%s reason=%s", proc.pid, reason)
        _signal(proc, signal.SIGTERM)
        timer.start()

    def _stop_holders(self, proc: subprocess.Popen[bytes], done: threading.Event) -> None:
        """Once the program has exited, give what it started ``grace`` seconds to let go of
        its stdout and stderr, then SIGKILL the group: the reply is complete, and a helper
        left holding the pipes would otherwise keep the turn waiting until agent.timeout
        (the group cannot be another's meanwhile: a member still holds the pipes)."""
        proc.wait()
        if not done.wait(self.grace):
            log.info("agent command pid=%s exited; stopping what it started, which still "
                     "holds its output", proc.pid)
            _kill_group(proc.pid)

    def _finish(self, proc: subprocess.Popen[bytes]) -> None:
        """Forget the child and make sure it is reaped. A pending SIGKILL is left to fire:
        what else runs in the child's group has had no more than SIGTERM yet."""
        with self._lock:
            self._proc = None
            self._kill_timer = None
        if proc.returncode is None:
            _signal(proc, signal.SIGKILL)
            proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass

    def _result(self, returncode: int, out: bytes, err: bytes, elapsed: float) -> TurnResult:
        stderr = err.decode("utf-8", errors="replace")
        if returncode != 0:
            how = (f"was killed by {_signal_name(-returncode)}" if returncode < 0
                   else f"exited with status {returncode}")
            log.warning("agent command %r %s after %.1fs; stderr tail:\n%s",
                        self.argv[0], how, elapsed, stderr[-STDERR_LOG_CHARS:])
            tail = stderr.strip()[-STDERR_ERROR_CHARS:]
            raise CommandAgentError(
                f"agent command {self.argv[0]!r} {how}"
                + (f"; stderr: {tail}" if tail else " (no stderr)")
            )
        if stderr.strip():
            log.debug("agent command %r stderr:\n%s", self.argv[0], stderr[-STDERR_LOG_CHARS:])
        return decode_reply(out.decode("utf-8", errors="replace"))


def encode_request(request: TurnRequest) -> bytes:
    """The JSON the program reads on stdin (module docstring)."""
    body = {
        "session_key": request.session_key,
        "session_id": request.session_id,
        "message": request.message,
        "history": request.history,
        "system_prompt": request.system_prompt,
        "internal": request.internal,
        "media_urls": list(request.media_urls),
    }
    return json.dumps(body, ensure_ascii=False, default=str).encode("utf-8")


def decode_reply(stdout: str) -> TurnResult:
    """A JSON object is the reply record; anything else is the reply text itself."""
    try:
        record: Any = json.loads(stdout)
    except ValueError:
        record = None
    if not isinstance(record, dict):
        text = stdout.rstrip()
        return TurnResult(text or None, "completed")
    if "reply" not in record:
        raise CommandAgentError("agent command printed a JSON object without a 'reply' key")
    reply, status, usage = record["reply"], record.get("status", "completed"), record.get("usage")
    if reply is not None and not isinstance(reply, str):
        raise CommandAgentError(
            f"agent command reply must be a string or null, got {type(reply).__name__}"
        )
    if status not in _STATUSES:
        raise CommandAgentError(
            f"agent command status must be one of {', '.join(_STATUSES)}, got {status!r}"
        )
    if usage is not None and not isinstance(usage, dict):
        raise CommandAgentError("agent command usage must be a JSON object")
    return TurnResult(reply, status, dict(usage or {}))


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Signal the child's process group unless the child is known to be reaped.

    An unreaped child keeps its pid (and so its group id) from being reused, so the signal
    cannot reach a stranger; the only gap is the instant between this check and a reap in
    the turn's own thread, the same gap ``Popen.send_signal`` accepts.
    """
    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_group(pgid: int) -> None:
    """SIGKILL process group ``pgid``, whether or not its leader (the child) is reaped.

    While any member lives, the group id cannot be taken by a new process; once the group
    is empty, a reused pid would be hit only if it made itself a group leader within the
    grace period.
    """
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
