"""An agent needs only ``run_turn`` (issue 37 §4): ``interrupt``, ``release_clients`` and
``close`` are called when present; an object without ``run_turn`` is refused at start."""

from __future__ import annotations

import logging
import threading

import pytest

from hermes_actors import Gateway, InMemoryAdapter, MessageEvent, SessionSource, load_config
from hermes_actors.agents.base import TurnResult, check_agent_factory
from hermes_actors.errors import ConfigError, HermesActorsError
from hermes_actors.testing import FakeClock, FakeMemoryProbe, wait_until


class OnlyRunTurn:
    """The least an agent can be: ``run_turn``, which polls ``request.interrupted()``."""

    started = threading.Event()

    def __init__(self, context=None) -> None:
        self.context = context

    def run_turn(self, request):
        if request.message == "wait":
            OnlyRunTurn.started.set()
            wait_until(request.interrupted, 10, 0.005, "the interrupt")
            return TurnResult(None, "interrupted")
        return TurnResult(f"ok: {request.message}")


class NoRunTurn:
    def __init__(self, context=None) -> None:
        self.context = context

    def answer(self, request):
        return TurnResult("never")


def _send(gw, chat: str, text: str) -> None:
    gw.submit(MessageEvent(source=SessionSource("telegram", chat_id=chat, user_id="7"),
                           text=text))


def _gateway(tmp_path, factory) -> tuple[Gateway, InMemoryAdapter]:
    adapter = InMemoryAdapter("telegram")
    config = load_config({"agent": {"agent_cache": {"max_size": 1}}}, env={})
    gw = Gateway(tmp_path / "home", config=config, agent_factory=factory, adapters=[adapter],
                 clock=FakeClock(), memory_probe=FakeMemoryProbe(anon_mb=100.0))
    return gw, adapter


def test_an_agent_with_only_run_turn_runs_is_interrupted_evicted_and_stopped(tmp_path,
                                                                             caplog):
    caplog.set_level(logging.WARNING)
    OnlyRunTurn.started.clear()
    gw, adapter = _gateway(tmp_path, OnlyRunTurn)
    gw.start()
    try:
        _send(gw, "1", "hello")
        assert gw.wait_idle(timeout=20)
        _send(gw, "1", "wait")
        assert OnlyRunTurn.started.wait(10)
        _send(gw, "1", "/stop")
        assert gw.wait_idle(timeout=20)
        _send(gw, "2", "other")       # the cache holds one agent: chat 1's is evicted
        assert gw.wait_idle(timeout=20)
        _send(gw, "2", "/new")        # a boundary: chat 2's agent is closed
        assert gw.wait_idle(timeout=20)
        assert gw.stats()["cache"]["evictions"]["lru"] >= 1
        assert "ok: hello" in adapter.texts() and "ok: other" in adapter.texts()
    finally:
        gw.stop(drain_timeout=5)
    problems = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert problems == []


def test_an_object_without_run_turn_is_refused_at_start(tmp_path):
    gw, _ = _gateway(tmp_path, NoRunTurn)
    with pytest.raises(ConfigError, match="NoRunTurn objects, and NoRunTurn has no run_turn"):
        gw.start()
    assert issubclass(ConfigError, HermesActorsError)


def test_a_factory_annotated_with_a_class_without_run_turn_is_refused():
    def factory(context) -> NoRunTurn:
        return NoRunTurn()

    with pytest.raises(ConfigError, match="no run_turn"):
        check_agent_factory(factory)
    with pytest.raises(ConfigError, match="not a callable"):
        check_agent_factory(NoRunTurn())
    check_agent_factory(lambda context: OnlyRunTurn())  # (checked when it makes one)


def test_a_factory_making_something_else_fails_the_turn_with_one_clear_line(tmp_path,
                                                                          caplog):
    gw, adapter = _gateway(tmp_path, lambda context: NoRunTurn())
    gw.start()
    try:
        _send(gw, "1", "hello")
        assert gw.wait_idle(timeout=20)
    finally:
        gw.stop(drain_timeout=5)
    assert any("made a NoRunTurn, and NoRunTurn has no run_turn" in r.getMessage()
               for r in caplog.records)
