"""The ``Agent`` protocol and the records of one turn (§1.1, §9).

An agent is a plain object the runtime calls from a turn worker, never from an actor's
mailbox, so it may block for as long as the turn takes; ``interrupt`` is called from another
thread (or greenlet) and must make a running ``run_turn`` return soon.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from hermes_actors.model.context import SessionContext

__all__ = ["Agent", "TurnRequest", "TurnResult", "TurnStatus"]

TurnStatus = Literal["completed", "interrupted", "failed", "partial"]


@dataclass(frozen=True)
class TurnResult:
    """What an agent returns: the final reply (``None`` for nothing), a status and usage."""

    reply: str | None = None
    status: TurnStatus = "completed"
    #: Token counters, e.g. ``{"input_tokens": 10, "output_tokens": 3, "prompt_tokens": 10}``.
    usage: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TurnRequest:
    """Everything one turn needs; built by the runtime for each turn."""

    session_key: str
    session_id: str
    #: The user message (``[sender] `` prefixed in shared sessions, or the recovery note).
    message: str
    #: The persisted transcript before this turn, as §17.13 message dicts.
    history: list[dict[str, Any]]
    context: SessionContext
    system_prompt: str
    internal: bool = False
    media_urls: tuple[str, ...] = ()
    _emit: Callable[[dict[str, Any]], None] | None = field(default=None, repr=False)
    _delegate: Callable[..., str] | None = field(default=None, repr=False)

    def emit(self, message: dict[str, Any]) -> None:
        """Persist an intermediate message (tool call, tool result) of this turn now."""
        if self._emit is None:
            raise RuntimeError("this TurnRequest cannot emit messages")
        self._emit(message)

    def delegate(self, fn: Callable[..., Any], *, label: str = "task") -> str:
        """Start ``fn(cancel, progress)`` in the background; returns the delegation id.

        Its completion arrives later as an internal wake-up of this session with the text
        ``[delegation <label> <status>] <output>`` (§17.27).
        """
        if self._delegate is None:
            raise RuntimeError("this TurnRequest cannot start delegations")
        return self._delegate(fn, label=label)


@runtime_checkable
class Agent(Protocol):
    """What the runtime needs of an agent. ``commit_memory`` and ``steer`` are optional."""

    def run_turn(self, request: TurnRequest) -> TurnResult:
        """Run one turn and return its result; raising counts as a failed turn."""
        ...

    def interrupt(self, reason: str | None = None) -> None:
        """Ask a running turn to stop soon (called from another thread)."""
        ...

    def release_clients(self) -> None:
        """Soft release: drop network clients and caches, keep background resources."""
        ...

    def close(self) -> None:
        """Full cleanup at a real boundary (``/new``, ``/reset``, shutdown)."""
        ...
