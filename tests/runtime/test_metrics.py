"""``/metrics``' turn and ingress families, and a scrape whose cost does not grow with the
number of live sessions (issue 17.7)."""

from __future__ import annotations

import re

from hermes_actors import MessageEvent, SessionSource
from hermes_actors.adapters.http_metrics import GatewayMetrics
from hermes_actors.runtime.router import SessionRouter


def _scrape(gw) -> str:
    return GatewayMetrics(gw).render().decode()


def _value(text: str, sample: str) -> float:
    match = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.M)
    assert match, sample
    return float(match.group(1))


class TestTurnsAndMessages:
    """Finished turns by status, their durations, and accepted and refused messages."""

    def test_turns_by_status_and_their_durations(self, make_harness):
        h = make_harness()
        h.send("a")
        h.send("fail", chat_id="43")
        h.idle()
        h.send("b")
        h.idle()
        text = _scrape(h.gw)
        assert _value(text, 'hermes_turns_total{status="completed"}') == 2
        assert _value(text, 'hermes_turns_total{status="failed"}') == 1
        assert _value(text, 'hermes_turns_total{status="interrupted"}') == 0
        assert _value(text, "hermes_turn_duration_seconds_count") == 3
        assert _value(text, 'hermes_turn_duration_seconds_bucket{le="+Inf"}') == 3
        assert _value(text, "hermes_turn_duration_seconds_sum") >= 0

    def test_a_turn_cut_by_stop_counts_as_interrupted(self, make_harness):
        h = make_harness()
        h.hold("g", command="wait")
        h.clock.advance(3)
        h.send("/stop")
        h.idle()
        text = _scrape(h.gw)
        assert _value(text, 'hermes_turns_total{status="interrupted"}') == 1
        # the fake clock ran 3 s during the turn: it lands above the 2.5 s bucket
        assert _value(text, 'hermes_turn_duration_seconds_bucket{le="2.5"}') == 0
        assert _value(text, 'hermes_turn_duration_seconds_bucket{le="5.0"}') == 1

    def test_accepted_and_refused_messages(self, make_harness):
        h = make_harness()
        source = SessionSource("telegram", chat_id="42", user_id="7", message_id="m1")
        h.gw.submit(MessageEvent(source=source, text="x"))
        h.gw.submit(MessageEvent(source=source, text="x"))  # a repeat
        h.send("y")
        h.idle()
        text = _scrape(h.gw)
        assert _value(text, "hermes_messages_accepted_total") == 2
        assert _value(text, 'hermes_messages_refused_total{reason="duplicate"}') == 1
        for reason in ("queue_full", "stopping", "invalid"):
            assert _value(text, f'hermes_messages_refused_total{{reason="{reason}"}}') == 0


class TestSupervisorFamilies:
    def test_counts_since_start_are_counters_the_live_count_a_gauge(self, make_harness):
        text = _scrape(make_harness().gw)
        for name in ("suspensions", "redelivered", "drain_timeouts"):
            assert f"# TYPE hermes_supervisor_{name}_total counter" in text
            assert _value(text, f"hermes_supervisor_{name}_total") == 0
        assert "# TYPE hermes_supervisor_counted_sessions gauge" in text
        assert _value(text, "hermes_supervisor_counted_sessions") == 0


class TestScrapeCost:
    """A scrape asks no session actor: it reads running totals, whatever the live count."""

    def test_no_session_actor_is_asked(self, make_harness, monkeypatch):
        h = make_harness(busy_input_mode="queue")
        for chat in range(20):
            h.send("hi", chat_id=str(100 + chat))
        h.idle()
        h.hold("g")
        h.send("queued 1")
        h.send("queued 2")
        assert h.gw.queue_depth(h.key()) == 2  # answered after both were handled

        def refuse(*_args, **_kwargs):
            raise AssertionError("a scrape broadcast to the session actors")

        monkeypatch.setattr(SessionRouter, "broadcast", refuse)
        text = _scrape(h.gw)
        assert _value(text, "hermes_queue_depth") == 2
        assert _value(text, "hermes_sessions_live") == 21
        monkeypatch.undo()
        h.gates.open("g")
        h.idle()
        assert _value(_scrape(h.gw), "hermes_queue_depth") == 0
