"""The "typing…" indicator of a platform runs exactly while the agent works (§9)."""

from __future__ import annotations

import threading

from hermes_actors import Gateway, MessageEvent, SendResult, SessionSource, load_config
from hermes_actors.agents.command import CommandAgent
from hermes_actors.testing import Gates, ScriptedAgent


class TypingAdapter:
    """Records typing starts, stops and sends, in order."""

    platform = "telegram"
    connected = True

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def send(self, target, text):
        self.events.append(("send", text))
        return SendResult(True)

    def start_typing(self, target):
        self.events.append(("typing", target.chat_id))
        adapter = self

        class _Indicator:
            def stop(self) -> None:
                adapter.events.append(("stopped", target.chat_id))

        return _Indicator()


class TestTypingAroundTheTurn:
    """Started when the agent starts, stopped before its answer is sent."""

    def test_order(self, tmp_path):
        adapter, gates = TypingAdapter(), Gates()
        gateway = Gateway(tmp_path / "home", load_config({}, env={}), adapters=[adapter],
                          agent_factory=lambda ctx: ScriptedAgent(gates=gates))
        gateway.start()
        try:
            gateway.submit(MessageEvent(source=SessionSource("telegram", chat_id="42"),
                                        text="wait g"))
            assert gates.wait_until_waiting("g")
            assert adapter.events == [("typing", "42")]  # shown while the agent works
            gates.open("g")
            assert gateway.wait_idle(timeout=30)
        finally:
            gateway.stop(drain_timeout=5)
        assert [kind for kind, _ in adapter.events] == ["typing", "stopped", "send"]

    def test_a_failing_indicator_does_not_fail_the_turn(self, tmp_path):
        class Broken(TypingAdapter):
            def start_typing(self, target):
                raise RuntimeError("no typing today")

        adapter = Broken()
        gateway = Gateway(tmp_path / "home", load_config({}, env={}), adapters=[adapter])
        gateway.start()
        try:
            gateway.submit(MessageEvent(source=SessionSource("telegram", chat_id="42"),
                                        text="hi"))
            assert gateway.wait_idle(timeout=30)
        finally:
            gateway.stop(drain_timeout=5)
        assert adapter.events == [("send", "echo: hi")]


class TestStopJustBeforeTheAgentStarts:
    """A /stop that reaches the agent after the runtime's last check, before ``run_turn``
    starts, still stops the turn (the typing indicator starts exactly in that window)."""

    def test_the_turn_does_not_run_on(self, tmp_path):
        interrupted = threading.Event()

        class Watched(CommandAgent):
            def interrupt(self, reason=None):
                super().interrupt(reason)
                interrupted.set()

        class StopOnTyping(TypingAdapter):
            gateway: Gateway

            def start_typing(self, target):
                self.gateway.submit(MessageEvent(source=target, text="/stop"))
                assert interrupted.wait(10)  # the agent was told before its run_turn
                return super().start_typing(target)

        adapter = StopOnTyping()
        argv = ["sh", "-c", "cat >/dev/null; sleep 1.5; echo late reply"]
        gateway = Gateway(tmp_path / "home", load_config({}, env={}), adapters=[adapter],
                          agent_factory=lambda ctx: Watched(argv, timeout=30))
        adapter.gateway = gateway
        gateway.start()
        try:
            gateway.submit(MessageEvent(source=SessionSource("telegram", chat_id="42"),
                                        text="work"))
            assert gateway.wait_idle(timeout=30)
        finally:
            gateway.stop(drain_timeout=5)
        assert interrupted.is_set()
        assert [text for kind, text in adapter.events if kind == "send"] == ["Stopped"]
