"""The ``Agent`` protocol and the records of one turn (§1.1, §9).

An agent is a plain object the runtime calls from a turn worker, never from an actor's
mailbox, so it may block for as long as the turn takes; ``interrupt`` is called from another
thread (or greenlet) and must make a running ``run_turn`` return soon. Only ``run_turn`` is
required: ``interrupt``, ``release_clients``, ``close``, ``commit_memory`` and ``steer`` are
called when the agent has them.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from hermes_actors.errors import ConfigError
from hermes_actors.model.context import SessionContext

__all__ = ["Agent", "TurnRequest", "TurnResult", "TurnStatus", "check_agent",
           "check_agent_factory"]

TurnStatus = Literal["completed", "interrupted", "failed", "partial"]


@dataclass(frozen=True)
class TurnResult:
    """What an agent returns: the final reply (``None`` for nothing), a status and usage."""

    reply: str | None = None
    status: TurnStatus = "completed"
    #: Token counters, e.g. ``{"input_tokens": 10, "output_tokens": 3, "prompt_tokens": 10}``.
    usage: dict[str, Any] = field(default_factory=dict)


class TurnRequest:
    """Everything one turn needs; built by the runtime for each turn (immutable).

    ``history`` is the persisted transcript before this turn. The runtime passes a loader
    instead of a list, so the transcript is read from the store only if the agent looks at
    it: an agent that keeps its own context (or an echo) costs no read per turn.
    """

    __slots__ = ("session_key", "session_id", "message", "_history", "_load_history",
                 "context", "system_prompt", "internal", "media_urls", "_emit", "_delegate",
                 "_interrupted")

    session_key: str
    session_id: str
    message: str
    _history: list[dict[str, Any]] | None
    _load_history: Callable[[], list[dict[str, Any]]] | None
    context: SessionContext | None
    system_prompt: str
    internal: bool
    media_urls: tuple[str, ...]
    _emit: Callable[[dict[str, Any]], None] | None
    _delegate: Callable[..., str] | None
    _interrupted: Callable[[], bool] | None

    def __init__(
        self,
        session_key: str,
        session_id: str,
        message: str,
        history: list[dict[str, Any]] | None = None,
        context: SessionContext | None = None,
        system_prompt: str = "",
        internal: bool = False,
        media_urls: tuple[str, ...] = (),
        *,
        load_history: Callable[[], list[dict[str, Any]]] | None = None,
        _emit: Callable[[dict[str, Any]], None] | None = None,
        _delegate: Callable[..., str] | None = None,
        _interrupted: Callable[[], bool] | None = None,
    ) -> None:
        setattr_ = object.__setattr__
        #: The session's routing key.
        setattr_(self, "session_key", session_key)
        #: The session id this turn runs in.
        setattr_(self, "session_id", session_id)
        #: The user message (``[sender] `` prefixed in shared sessions, or the recovery note).
        setattr_(self, "message", message)
        setattr_(self, "_history", None if history is None else list(history))
        setattr_(self, "_load_history", load_history)
        #: The session context (source, platforms, home channels, key and id).
        setattr_(self, "context", context)
        #: The static prompt plus the rendered session context.
        setattr_(self, "system_prompt", system_prompt)
        #: Whether the turn is an internal wake-up (delegation, auto-continue).
        setattr_(self, "internal", bool(internal))
        #: Media attached to the message.
        setattr_(self, "media_urls", tuple(media_urls))
        setattr_(self, "_emit", _emit)
        setattr_(self, "_delegate", _delegate)
        setattr_(self, "_interrupted", _interrupted)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("TurnRequest is immutable")

    def __repr__(self) -> str:
        return (f"TurnRequest(session_key={self.session_key!r}, session_id={self.session_id!r}, "
                f"message={self.message!r}, internal={self.internal!r})")

    @property
    def history(self) -> list[dict[str, Any]]:
        """The persisted transcript before this turn, as §17.13 message dicts."""
        history = self._history
        if history is None:
            loaded = self._load_history() if self._load_history is not None else []
            history = list(loaded)
            object.__setattr__(self, "_history", history)
        return history

    def interrupted(self) -> bool:
        """Whether this turn has been asked to stop (``False`` for a request built elsewhere
        than the runtime).

        An interrupt can reach the agent after the runtime's last check but before
        ``run_turn`` starts; an agent that clears its own interrupt flag at the start of
        ``run_turn`` asks this after clearing it, so that interrupt is not lost.
        """
        return self._interrupted is not None and self._interrupted()

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


def _no_run_turn(what: str, name: str) -> str:
    return (f"{what}, and {name} has no run_turn(request) method: an agent needs run_turn "
            "(interrupt, release_clients and close are optional)")


def check_agent_factory(factory: Any) -> None:
    """Refuse an ``agent_factory`` that cannot make agents, as far as can be told before it
    makes one: not callable, or a class (or a function whose return annotation is a class)
    without ``run_turn``. Raises :class:`~hermes_actors.errors.ConfigError` (one line)."""
    if not callable(factory):
        raise ConfigError(f"the agent factory is a {type(factory).__name__}, not a callable "
                          "that makes agents")
    made = factory if isinstance(factory, type) else None
    if made is None:
        try:
            annotation = typing.get_type_hints(factory).get("return")
        except Exception:  # noqa: BLE001 - an annotation that does not resolve says nothing
            annotation = None
        made = annotation if isinstance(annotation, type) else None
    if made is not None and not callable(getattr(made, "run_turn", None)):
        raise ConfigError(_no_run_turn(f"the agent factory makes {made.__name__} objects",
                                       made.__name__))


def check_agent(agent: Any) -> Any:
    """``agent``, if it has ``run_turn``; else a :class:`~hermes_actors.errors.ConfigError`
    (the factory made something that is not an agent: the turn fails with that line)."""
    if not callable(getattr(agent, "run_turn", None)):
        name = type(agent).__name__
        raise ConfigError(_no_run_turn(f"the agent factory made a {name}", name))
    return agent


@runtime_checkable
class Agent(Protocol):
    """What the runtime needs of an agent: ``run_turn``. ``interrupt``, ``release_clients``,
    ``close``, ``commit_memory`` and ``steer`` are optional (called when present)."""

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
