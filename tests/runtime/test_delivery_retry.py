"""Rate limits and refusals in delivery: waited out within the ledger's attempts (§7)."""

from __future__ import annotations

import threading

import pytest

from hermes_actors import (
    Gateway,
    InMemoryAdapter,
    MessageEvent,
    SendResult,
    SessionSource,
    load_config,
)
from hermes_actors.runtime.delivery import MAX_RETRY_WAIT, RECOVERED_PREFIX
from hermes_actors.testing import FakeClock


class ScriptedAdapter:
    """A ``telegram`` adapter that answers sends from a script, then succeeds."""

    platform = "telegram"
    connected = True

    def __init__(self, *results: SendResult) -> None:
        self.script = list(results)
        self.calls: list[str] = []

    def send(self, target, text):
        self.calls.append(text)
        return self.script.pop(0) if self.script else SendResult(True, message_id="m")


@pytest.fixture
def run(tmp_path):
    gateways = []

    def start(adapter: ScriptedAdapter, clock: FakeClock) -> Gateway:
        gateway = Gateway(tmp_path / f"home{len(gateways)}", load_config({}, env={}),
                          adapters=[adapter], clock=clock)
        gateways.append(gateway)
        gateway.start()
        gateway.submit(MessageEvent(source=SessionSource("telegram", chat_id="42"),
                                    text="hello"))
        assert gateway.wait_idle(timeout=30)
        return gateway

    yield start
    for gateway in gateways:
        gateway.stop(drain_timeout=5)


def _row(gateway: Gateway) -> dict:
    [row] = gateway.store.ledger_rows()
    return row


LIMITED = SendResult(False, error="429 Too Many Requests", retry_after=3.0)


class TestRateLimit:
    """A ``retry_after`` is waited out on the gateway's clock, each try a ledger attempt."""

    def test_waited_out_then_delivered(self, run):
        clock, adapter = FakeClock(), ScriptedAdapter(LIMITED)
        gateway = run(adapter, clock)
        assert adapter.calls == ["echo: hello", "echo: hello"]
        assert clock.slept == [3.0]
        row = _row(gateway)
        assert (row["state"], row["attempts"]) == ("delivered", 2)

    def test_abandoned_after_the_ledgers_attempts(self, run):
        clock, adapter = FakeClock(), ScriptedAdapter(LIMITED, LIMITED, LIMITED, LIMITED)
        gateway = run(adapter, clock)
        assert len(adapter.calls) == 3 and clock.slept == [3.0, 3.0]
        row = _row(gateway)
        assert (row["state"], row["attempts"]) == ("abandoned", 3)

    def test_only_the_unsent_rest_is_retried(self, run):
        clock = FakeClock()
        adapter = ScriptedAdapter(SendResult(False, error="429", retry_after=1.0,
                                             unsent="the rest"))
        gateway = run(adapter, clock)
        assert adapter.calls == ["echo: hello", "the rest"]
        assert _row(gateway)["state"] == "delivered"

    def test_a_wait_too_long_for_a_worker_is_left_to_the_sweep(self, run):
        clock = FakeClock()
        adapter = ScriptedAdapter(SendResult(False, error="429", retry_after=MAX_RETRY_WAIT + 1))
        gateway = run(adapter, clock)
        assert len(adapter.calls) == 1 and clock.slept == []
        assert (_row(gateway)["state"], _row(gateway)["attempts"]) == ("failed", 1)


class HeldClock(FakeClock):
    """A fake clock whose ``sleep`` says it began, then blocks until the test releases it."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeping, self.release = threading.Event(), threading.Event()

    def sleep(self, seconds: float) -> None:
        self.sleeping.set()
        assert self.release.wait(timeout=30), "the test never released the sleep"
        super().sleep(seconds)


class FirstPartThenLimited(InMemoryAdapter):
    """Delivers the first part of the first text, then answers a 429 for the rest; every
    later send goes out whole."""

    def __init__(self, wait: float = 5.0) -> None:
        super().__init__("telegram")
        self.wait = wait
        self.limited = False

    def send(self, target, text):
        if self.limited or "\n\n" not in text:
            return super().send(target, text)
        self.limited = True
        first, rest = text.split("\n\n", 1)
        super().send(target, first)
        return SendResult(False, error="429 Too Many Requests", retry_after=self.wait,
                          unsent=rest)


class TestRateLimitedRest:
    """While a worker waits out a rate limit its row stays claimed, so a sweep meanwhile
    sends nothing; whatever is left owed is only the parts not sent yet."""

    @pytest.fixture
    def gateway(self, tmp_path):
        made = []

        def start(adapter, clock) -> Gateway:
            gateway = Gateway(tmp_path / "home", load_config({}, env={}), adapters=[adapter],
                              clock=clock)
            made.append(gateway)
            gateway.start()
            gateway.submit(MessageEvent(source=SessionSource("telegram", chat_id="42"),
                                        text="part one\n\npart two"))
            return gateway

        yield start
        for gateway in made:
            gateway.stop(drain_timeout=5)

    def test_a_sweep_during_the_wait_sends_nothing(self, gateway):
        clock, adapter = HeldClock(), FirstPartThenLimited()
        gw = gateway(adapter, clock)
        assert clock.sleeping.wait(timeout=30)
        try:
            [waiting] = gw.store.ledger_rows()
            gw.housekeeping_tick()  # its sweep finds the row this boot holds: leaves it
            swept = adapter.texts()
        finally:
            clock.release.set()
        assert gw.wait_idle(timeout=30)
        assert swept == ["echo: part one"]
        assert adapter.texts() == ["echo: part one", "part two"]  # in order, once each
        assert (waiting["state"], waiting["attempts"]) == ("attempting", 1)
        [row] = gw.store.ledger_rows()
        assert (row["state"], row["attempts"]) == ("delivered", 2)

    def test_a_wait_too_long_leaves_only_the_rest_to_the_sweep(self, gateway):
        clock, adapter = FakeClock(), FirstPartThenLimited(wait=MAX_RETRY_WAIT + 1)
        gw = gateway(adapter, clock)
        assert gw.wait_idle(timeout=30)
        [row] = gw.store.ledger_rows()
        assert (row["state"], row["content"]) == ("failed", "part two")
        gw.housekeeping_tick()
        assert gw.wait_idle(timeout=30)
        assert adapter.texts() == ["echo: part one", RECOVERED_PREFIX + "part two"]
        assert clock.slept == []


class TestRefusal:
    """A refusal without ``retry_after`` is one failed attempt, no storm; a refusal for good
    (a blocked bot) abandons the row, so no sweep sends it again."""

    def test_one_attempt_marked_failed(self, run):
        clock = FakeClock()
        adapter = ScriptedAdapter(SendResult(False, error="500 Internal Server Error"))
        gateway = run(adapter, clock)
        assert len(adapter.calls) == 1 and clock.slept == []
        row = _row(gateway)
        assert (row["state"], row["attempts"]) == ("failed", 1)
        assert "500" in row["last_error"]

    def test_a_refusal_for_good_is_abandoned_and_never_swept(self, run):
        clock = FakeClock()
        adapter = ScriptedAdapter(SendResult(False, error="403 Forbidden: bot was blocked",
                                             permanent=True))
        gateway = run(adapter, clock)
        row = _row(gateway)
        assert (row["state"], row["attempts"]) == ("abandoned", 1)
        assert "blocked" in row["last_error"]
        gateway.housekeeping_tick()  # its ledger sweep retries failed rows, not this one
        assert gateway.wait_idle(timeout=30) and len(adapter.calls) == 1


class HeldAdapter(ScriptedAdapter):
    """Refuses the first send; the next (the sweep's) blocks until the test releases it."""

    def __init__(self) -> None:
        super().__init__(SendResult(False, error="500 Internal Server Error"))
        self.sending, self.release = threading.Event(), threading.Event()

    def send(self, target, text):
        if self.calls:
            self.sending.set()
            assert self.release.wait(timeout=30), "the test never released the send"
        return super().send(target, text)


class TestSweepOutsideTheSupervisor:
    def test_a_slow_send_of_a_sweep_holds_up_no_ask_of_the_supervisor(self, run):
        adapter = HeldAdapter()
        gateway = run(adapter, FakeClock())
        assert _row(gateway)["state"] == "failed"
        tick = threading.Thread(target=gateway.housekeeping_tick)
        tick.start()
        try:
            assert adapter.sending.wait(timeout=30)
            answered = []
            asking = threading.Thread(target=lambda: answered.append(gateway.stats()))
            asking.start()
            asking.join(timeout=10)  # (a supervisor mailbox busy with the send: no answer)
            assert answered and answered[0]["supervisor"]["redelivered"] == 0
        finally:
            adapter.release.set()
            tick.join(timeout=30)
        assert _row(gateway)["state"] == "delivered"
        assert gateway.stats()["supervisor"]["redelivered"] == 1


class ExitingAdapter(ScriptedAdapter):
    """Its second send (the notice) raises ``SystemExit`` (a plugin's bug)."""

    def send(self, target, text):
        if len(self.calls) == 1:
            self.calls.append(text)
            raise SystemExit(3)
        return super().send(target, text)


class TestAdapterBug:
    def test_a_send_raising_system_exit_is_a_failed_attempt(self, run):
        adapter = ExitingAdapter()
        gateway = run(adapter, FakeClock())
        source = SessionSource("telegram", chat_id="42")
        gateway.submit(MessageEvent(source=source, text="/help"))  # sent by a notice actor
        assert gateway.wait_idle(timeout=30)
        notice = [r for r in gateway.store.ledger_rows() if r["kind"] == "notice"]
        assert [(r["state"], "SystemExit" in r["last_error"]) for r in notice] == [
            ("failed", True)]
        gateway.submit(MessageEvent(source=source, text="again"))
        assert gateway.wait_idle(timeout=30)
        assert adapter.calls[-1] == "echo: again" and gateway.stats()["state"] == "running"


class TestStopDuringASweep:
    def test_a_stop_waits_for_the_sweep_sending_so_the_reply_is_not_sent_again(
            self, run, tmp_path):
        adapter = HeldAdapter()
        gateway = run(adapter, FakeClock())
        assert _row(gateway)["state"] == "failed"
        tick = threading.Thread(target=gateway.housekeeping_tick)
        tick.start()
        assert adapter.sending.wait(timeout=30)  # the sweep's send is under way
        stopper = threading.Thread(target=gateway.stop, kwargs={"drain_timeout": 5})
        stopper.start()
        # (a stop that does not wait for the sweep is over by now; one that does still waits)
        stopper.join(timeout=5)
        adapter.release.set()
        tick.join(timeout=30)
        stopper.join(timeout=30)
        assert not stopper.is_alive() and gateway.stopped_cleanly
        again = ScriptedAdapter()
        restarted = Gateway(tmp_path / "home0", load_config({}, env={}), adapters=[again],
                            clock=FakeClock())
        restarted.start()
        try:
            assert restarted.wait_idle(timeout=30)
            assert again.calls == []  # delivered once: not '♻️ Recovered reply' again
            assert [r["state"] for r in restarted.store.ledger_rows()] == ["delivered"]
        finally:
            restarted.stop(drain_timeout=5)
