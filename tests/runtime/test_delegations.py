"""Background delegations report back as internal wake-ups; /stop and /new interrupt them."""

from __future__ import annotations

import threading

import pytest

from hermes_actors.runtime.delegations import DelegationRegistry
from hermes_actors.runtime.session_actor import NOTHING_TO_STOP, STOPPED


@pytest.fixture
def harness_store(every_backend):
    """Every scenario here runs on each store backend."""
    return every_backend


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


class TestRegistryOutcomes:
    """§17.44: output rules for returned, cancelled and raising delegation functions."""

    def run(self, fn, cancel_first=False):
        done = threading.Event()
        result = {}
        reg = DelegationRegistry(lambda: None, lambda: None)

        def report(d, status, output):
            result.update(status=status, output=output, label=d.label)
            done.set()

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
