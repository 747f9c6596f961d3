"""Fixtures for the agent tests: request builder, agent programs, fake chat server."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.agents.base import TurnRequest
from hermes_actors.model.context import SessionContext
from hermes_actors.model.source import SessionSource

from .fake_chat import FakeChatServer
from .programs import Started, write_programs


def make_request(message: str = "hi there", *, history: list[dict[str, Any]] | None = None,
                 system_prompt: str = "You are a test.", internal: bool = False,
                 media_urls: tuple[str, ...] = (), interrupted: bool = False) -> TurnRequest:
    """A ``TurnRequest`` as the runtime would build it, with a real ``SessionContext``;
    ``interrupted``: the turn was interrupted before its ``run_turn`` began."""
    source = SessionSource("telegram", chat_id="42", user_id="7")
    return TurnRequest(
        session_key="agent:main:telegram:dm:42",
        session_id="20260101_000000_abcd",
        message=message,
        history=list(history or []),
        context=SessionContext(source=source),
        system_prompt=system_prompt,
        internal=internal,
        media_urls=media_urls,
        _interrupted=(lambda: True) if interrupted else None,
    )


@pytest.fixture
def programs(tmp_path: Path) -> dict[str, Path]:
    """The agent programs of ``programs.py``, written to ``tmp_path``."""
    folder = tmp_path / "programs"
    folder.mkdir()
    return write_programs(folder)


@pytest.fixture
def started() -> Iterator[Started]:
    """A listener ``block`` programs report to."""
    listener = Started()
    yield listener
    listener.close()


@pytest.fixture
def worker() -> Iterator[ThreadPoolExecutor]:
    """A thread to run a turn in while the test interrupts it from its own thread."""
    pool = ThreadPoolExecutor(1)
    yield pool
    pool.shutdown(wait=True)


@pytest.fixture
def chat_server() -> Iterator[FakeChatServer]:
    """A fake chat-completions server on 127.0.0.1."""
    server = FakeChatServer()
    yield server
    server.close()
