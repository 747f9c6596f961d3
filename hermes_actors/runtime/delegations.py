"""Background delegations (§8, §17.27, §17.44): work a turn starts and that reports back later.

Each delegation runs ``fn(cancel, progress)`` in its own worker; its completion is handed to
a callback that submits an internal wake-up to the session. The registry is selected by
routing key and originating ``session_id`` so ``/new``, ``/reset`` and ``/stop`` can stop a
session's delegations; cancelling twice stops once.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hermes_actors.runtime.guard import is_greenlet_exit

__all__ = ["Delegation", "DelegationRegistry", "format_completion"]


@dataclass
class Delegation:
    """One running delegation."""

    id: str
    session_key: str
    session_id: str
    label: str
    cancel: threading.Event = field(default_factory=threading.Event)
    progress: list[str] = field(default_factory=list)


def format_completion(delegation: Delegation, status: str, output: str) -> str:
    """The wake-up text: ``[delegation <label> <status>] <output>``."""
    return f"[delegation {delegation.label} {status}] {output}".rstrip()


def _outcome(delegation: Delegation, fn: Callable[..., Any]) -> tuple[str, str]:
    try:
        value = fn(delegation.cancel, delegation.progress.append)
        text = "" if value is None else str(value)
    except BaseException as exc:  # noqa: BLE001 - a failure is reported, SystemExit too
        partial = "\n".join(delegation.progress)
        if is_greenlet_exit(exc):
            return "interrupted", partial  # gevent killed the worker; fn has unwound
        error = f"error: {type(exc).__name__}: {exc}"
        return "failed", f"{partial}\n{error}" if partial else error
    partial = "\n".join(delegation.progress)
    if delegation.cancel.is_set():
        return "interrupted", partial
    return "completed", text or partial


class DelegationRegistry:
    """Thread-safe registry of running delegations."""

    def __init__(self, on_started: Callable[[], None], on_finished: Callable[[], None]) -> None:
        self._lock = threading.Condition()
        self._running: dict[str, Delegation] = {}
        #: Started and not yet reported (``_running`` loses a delegation before its report).
        self._unfinished = 0
        self._ids = itertools.count(1)
        self._on_started = on_started
        self._on_finished = on_finished

    def start(
        self,
        session_key: str,
        session_id: str,
        fn: Callable[..., Any],
        label: str,
        report: Callable[[Delegation, str, str], None],
    ) -> str:
        """Run ``fn`` in a worker; ``report(delegation, status, output)`` runs when it ends."""
        delegation = Delegation(f"d{next(self._ids)}", session_key, session_id, str(label))
        with self._lock:
            self._running[delegation.id] = delegation
            self._unfinished += 1
        self._on_started()

        def work() -> None:
            status, output = "failed", "error: the delegation's worker failed"
            try:
                status, output = _outcome(delegation, fn)
            finally:  # whatever ends the worker, the delegation ends and reports
                with self._lock:
                    self._running.pop(delegation.id, None)
                try:
                    report(delegation, status, output)
                finally:
                    with self._lock:
                        self._unfinished -= 1
                        self._lock.notify_all()
                    self._on_finished()

        threading.Thread(target=work, name=f"delegation-{delegation.id}", daemon=True).start()
        return delegation.id

    def cancel(self, session_key: str, session_id: str | None = None) -> int:
        """Stop the session's running delegations (of one ``session_id`` when given).

        Returns how many were newly asked to stop; asking again stops none.
        """
        stopped = 0
        with self._lock:
            for delegation in self._running.values():
                if delegation.session_key != session_key:
                    continue
                if session_id is not None and delegation.session_id != session_id:
                    continue
                if not delegation.cancel.is_set():
                    delegation.cancel.set()
                    stopped += 1
        return stopped

    def cancel_all(self) -> int:
        """Stop every running delegation (shutdown)."""
        with self._lock:
            pending = [d for d in self._running.values() if not d.cancel.is_set()]
            for delegation in pending:
                delegation.cancel.set()
        return len(pending)

    def wait_finished(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until every delegation has ended and reported;
        False if some still run."""
        with self._lock:
            return self._lock.wait_for(lambda: self._unfinished == 0, timeout=timeout)

    def stoppable(self, session_key: str) -> int:
        """How many of the session's delegations run and were not asked to stop yet (what
        :meth:`cancel` would stop now)."""
        with self._lock:
            return sum(1 for d in self._running.values()
                       if d.session_key == session_key and not d.cancel.is_set())

    def running(self, session_key: str | None = None) -> int:
        """How many delegations run (for one session key when given)."""
        with self._lock:
            return sum(
                1 for d in self._running.values() if session_key in (None, d.session_key)
            )
