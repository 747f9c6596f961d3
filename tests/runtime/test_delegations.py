"""Background delegations report back as internal wake-ups; /stop and /new interrupt them."""

from __future__ import annotations

import threading

import pytest

from hermes_actors import (
    Gateway,
    InMemoryAdapter,
    MessageEvent,
    SessionSource,
    TurnResult,
    load_config,
)
from hermes_actors.runtime import gateway as gateway_module
from hermes_actors.runtime.delegations import DelegationRegistry
from hermes_actors.runtime.session_actor import NOTHING_TO_STOP, STOPPED
from hermes_actors.testing import ScriptedAgent


@pytest.fixture
def harness_store(every_backend):
    """Every scenario here runs on each store backend."""
    return every_backend


SRC = SessionSource("telegram", chat_id="42", user_id="7")


def _gevent_patched() -> bool:
    import gevent.monkey

    return gevent.monkey.is_module_patched("threading")


def wakeups(h) -> list:
    return [s for s in h.log if s.internal]


class TestCompletion:
    """A finished delegation wakes its session with the completion text."""

    def test_completed_delegation_wakes_session(self, make_harness):
        h = make_harness()
        h.send("delegate 0")
        h.idle()
        assert h.texts()[0] == "delegated 0"
        assert [w.message for w in wakeups(h)] == ["[delegation task completed] delegation done"]
        assert h.texts()[-1] == "echo: [delegation task completed] delegation done"


class TestInterrupt:
    """/stop interrupts running delegations; they still report with partial output."""

    def test_stop_interrupts_and_reports(self, make_harness):
        h = make_harness()
        h.send("delegate 60")
        assert h.adapter.wait_for(1)
        h.send("/stop")
        h.idle()
        assert STOPPED in h.texts()
        assert [w.message for w in wakeups(h)] == [
            "[delegation task interrupted] delegation started"]

    def test_stop_twice_stops_once(self, make_harness):
        h = make_harness()
        h.send("delegate 60")
        assert h.adapter.wait_for(1)
        h.send("/stop")
        h.idle()
        h.send("/stop")
        h.idle()
        assert h.texts().count(STOPPED) == 1
        assert h.texts()[-1] == NOTHING_TO_STOP
        assert len(wakeups(h)) == 1

    def test_new_interrupts_and_wakeup_is_recorded_in_old_session(self, make_harness):
        h = make_harness()
        h.send("delegate 60")
        assert h.adapter.wait_for(1)
        old = h.gw.store.get(h.key()).session_id
        h.send("/new")
        h.idle()
        assert wakeups(h) == []
        rows = h.gw.store.load_transcript(old)
        assert rows[-1]["content"] == "[delegation task interrupted] delegation started"


class _DelegatingAgent(ScriptedAgent):
    """Starts ``fn`` as a delegation on ``go``; echoes anything else."""

    def __init__(self, fn, seen: list[str]) -> None:
        super().__init__()
        self.fn, self.seen = fn, seen

    def run_turn(self, request):
        self.seen.append(request.message)
        if request.message == "go":
            request.delegate(self.fn, label="job")
            return TurnResult(reply="started")
        return TurnResult(reply=f"echo: {request.message}")


class TestShutdown:
    """A delegation stopped by a graceful stop still reports back, durably (§8)."""

    @pytest.fixture
    def restartable(self, tmp_path, harness_store):
        """``start(fn)``: a gateway on one home whose agent delegates ``fn`` on ``go``."""
        seen: list[str] = []
        gateways: list[Gateway] = []

        def start(fn, agent=_DelegatingAgent):
            adapter = InMemoryAdapter("telegram")
            gw = Gateway(tmp_path / "home", config=load_config(harness_store, env={}),
                         agent_factory=lambda ctx: agent(fn, seen), adapters=[adapter])
            gw.start()
            gateways.append(gw)
            return gw, adapter

        yield start, seen
        for gw in gateways:
            gw.stop(drain_timeout=5)

    def test_slow_to_stop_delegation_reports_after_restart(self, restartable, monkeypatch):
        start, seen = restartable
        started, stop_waits = threading.Event(), threading.Event()
        wait_finished = DelegationRegistry.wait_finished

        def seen_waiting(registry, timeout):
            stop_waits.set()
            return wait_finished(registry, timeout)

        monkeypatch.setattr(DelegationRegistry, "wait_finished", seen_waiting)

        def slow_to_stop(cancel, progress):
            progress("half")
            started.set()
            cancel.wait()
            # its cleanup outlasts the stop's cancel: it ends while the stop waits for it
            assert stop_waits.wait(10)
            progress("cleaned up")

        gw, _ = start(slow_to_stop)
        gw.submit(MessageEvent(source=SRC, text="go"))
        assert started.wait(10)
        gw.stop(drain_timeout=5)
        assert gw.stopped_cleanly
        completion = "[delegation job interrupted] half\ncleaned up"
        gw, adapter = start(slow_to_stop)
        assert gw.wait_idle(timeout=20)
        assert seen == ["go", completion]
        assert adapter.texts() == [f"echo: {completion}"]

    def test_completion_after_the_actors_stopped_is_kept(self, restartable, monkeypatch,
                                                         caplog):
        """Past the stop's wait for delegations, a completion is still recorded while the
        store is open (the session actors are gone by then) and answered next start."""
        start, seen = restartable
        monkeypatch.setattr(gateway_module, "_DELEGATIONS_STOP_TIMEOUT", 0.0)
        started, closing = threading.Event(), threading.Event()

        def outlives_the_wait(cancel, progress):
            started.set()
            assert closing.wait(10)  # the stop is closing the agents: the actors are gone
            progress("late")

        class ClosesLate(_DelegatingAgent):
            def close(self):
                closing.set()
                assert registry.wait_finished(10)
                super().close()

        gw, _ = start(outlives_the_wait, ClosesLate)
        registry = gw.services.delegations
        gw.submit(MessageEvent(source=SRC, text="go"))
        assert started.wait(10)
        gw.stop(drain_timeout=5)
        assert closing.is_set() and registry.running() == 0
        assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []
        gw, _ = start(outlives_the_wait)
        assert gw.wait_idle(timeout=20)
        assert seen == ["go", "[delegation job interrupted] late"]


class TestRegistryOutcomes:
    """§17.44: output rules for returned, cancelled and raising delegation functions."""

    @staticmethod
    def recording():
        """A registry whose completions are recorded: ``(registry, report, result, done,
        finished)``; ``done`` is set at the report, ``finished`` when a delegation ends."""
        done, finished = threading.Event(), threading.Event()
        result = {}
        reg = DelegationRegistry(lambda: None, finished.set)

        def report(d, status, output):
            result.update(status=status, output=output, label=d.label)
            done.set()

        return reg, report, result, done, finished

    def run(self, fn, cancel_first=False):
        reg, report, result, done, _ = self.recording()
        if cancel_first:
            gate = threading.Event()

            def gated(cancel, progress):
                gate.wait(5)
                return fn(cancel, progress)

            reg.start("k", "s", gated, "job", report)
            assert reg.cancel("k", "s") == 1
            assert reg.cancel("k", "s") == 0
            gate.set()
        else:
            reg.start("k", "s", fn, "job", report)
        assert done.wait(5)
        return result

    def test_returned_value(self):
        assert self.run(lambda c, p: "out") == {
            "status": "completed", "output": "out", "label": "job"}

    def test_progress_when_nothing_returned(self):
        def fn(cancel, progress):
            progress("a")
            progress("b")

        assert self.run(fn)["output"] == "a\nb"

    def test_cancelled_is_interrupted_whatever_it_returns(self):
        def fn(cancel, progress):
            progress("partial")
            return "full"

        assert self.run(fn, cancel_first=True) == {
            "status": "interrupted", "output": "partial", "label": "job"}

    def test_raising_is_failed_with_error_line(self):
        def fn(cancel, progress):
            progress("half")
            raise ValueError("boom")

        out = self.run(fn)
        assert out["status"] == "failed"
        assert out["output"] == "half\nerror: ValueError: boom"

    def test_system_exit_is_failed_and_the_delegation_ends(self):
        """argparse rejecting input, or sys.exit() in a tool: reported like any failure."""
        reg, report, result, done, finished = self.recording()

        def exits(cancel, progress):
            progress("parsing")
            raise SystemExit(2)

        reg.start("k", "s", exits, "job", report)
        assert done.wait(5) and finished.wait(5)
        assert result == {"status": "failed", "output": "parsing\nerror: SystemExit: 2",
                          "label": "job"}
        assert reg.running() == 0
        assert reg.wait_finished(5)

    @pytest.mark.skipif(not _gevent_patched(), reason="a greenlet kill needs gevent")
    def test_killed_worker_is_interrupted_and_the_delegation_ends(self):
        import gevent

        reg, report, result, done, finished = self.recording()
        started, workers = threading.Event(), []

        def blocks(cancel, progress):
            progress("half")
            workers.append(gevent.getcurrent())
            started.set()
            cancel.wait()

        reg.start("k", "s", blocks, "job", report)
        assert started.wait(5)
        gevent.kill(workers[0])
        assert done.wait(5) and finished.wait(5)
        assert result == {"status": "interrupted", "output": "half", "label": "job"}
        assert reg.running() == 0
