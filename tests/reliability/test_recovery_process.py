"""§7 recovery with real processes: killed with SIGKILL (or at a crash point), then restarted."""

from __future__ import annotations

import json

import pytest

from hermes_actors.runtime.delivery import RECOVERED_PREFIX
from hermes_actors.runtime.recovery_rules import resume_note
from hermes_actors.testing import db_rows, node_values
from hermes_actors.testing.reconcile import Accepted, reconcile, suspension_evidence

from .conftest import crash_at, outbox

pytestmark = pytest.mark.slow
KEY = "agent:main:telegram:dm:42"


@pytest.fixture
def harness_store(every_backend):
    """Every recovery here runs on each store backend."""
    return every_backend


def evidence(child):
    """The reconciliation's evidence, from the rows the child's store holds."""
    return suspension_evidence(**{table: db_rows(child.home, table, config=child.config)
                                  for table in ("inbox", "sessions", "routing", "messages")})


def routing(child):
    """The canonical routing entry's text part, read from the child's store (the mirror is
    coalesced)."""
    (row,) = [row for row in db_rows(child.home, "routing", config=child.config)
              if row["session_key"] == KEY]
    return json.loads(row["entry"])


class TestKillMidTurn:
    """A turn killed mid-way is auto-continued once, with the restart note."""

    def test_auto_continued_once(self, spawn):
        first = spawn()
        first.send("sleep 60")
        first.expect("TURN")
        first.kill()
        second = spawn()
        assert second.report["clean_shutdown"] is False
        assert second.report["resumed"] == [KEY]
        turn = json.loads(second.expect("TURN")[5:])
        assert turn == resume_note("restart_interrupted")
        second.idle()
        assert second.sent() == ["resumed: sleep 60"]
        second.stop()
        third = spawn()
        assert third.report["resumed"] == []
        third.idle()
        assert third.turns() == []


class TestContinuationInterruptedAgain:
    """A continuation killed in its turn too is continued once more; its final reply names
    both messages of the chain (the reconciliation is by event id)."""

    def test_a_chain_of_two_kills_answers_both_messages(self, spawn):
        config = {"busy_input_mode": "queue"}
        first = spawn(config)
        sent = [Accepted(first.send("sleep 60"), "42", "sleep 60")]
        first.expect("TURN")
        sent.append(Accepted(first.send("sleep 61"), "42", "sleep 61"))  # queued behind
        first.kill()
        second = spawn(config)
        note = resume_note("restart_interrupted")
        turn = second.expect("TURN", keep=True)
        assert json.loads(turn[5:]) == note + "\n\nsleep 61"  # the note rode on it
        second.kill()
        third = spawn(config)
        third.idle()
        assert third.sent() == ["resumed: " + note + "\n\nsleep 61"]
        third.stop()
        rows = [{"kind": row["kind"], "text": row["content"],
                 "in_reply_to": row["in_reply_to"],
                 **({"final": row["final"]} if "final" in row else {})}
                for row in db_rows(third.home, "deliveries", config=third.config)]
        verdict = reconcile(sent, {"42": rows}, evidence(third))
        assert verdict.ok and verdict.lost == [], verdict.line()
        # by event id: the continuation of the continuation names both messages
        assert sorted(verdict.continued) == sorted(m.event_id for m in sent)


class TestCrashPoints:
    """Replies persisted or sent before the crash are delivered once, never re-run."""

    def test_after_reply_persisted(self, spawn):
        # With the ledger on, the reply, its obligation (claimed) and the marker's clearing
        # are one transaction: the crash leaves an uncertain attempt, not a marked turn.
        first = crash_at(spawn, "after_reply_persisted", "hello")
        home = first.home
        assert outbox(home) == []
        second = spawn()
        assert second.report["recovered_replies"] == 0
        assert second.report["interrupted"] == []
        assert second.report["redelivered"] == 1
        second.idle()
        assert second.turns() == []
        assert outbox(home) == [RECOVERED_PREFIX + "echo: hello"]

    def test_after_reply_persisted_without_ledger(self, spawn):
        # Without the ledger the reply is persisted before the marker is cleared: recovery
        # finds the marked turn's reply in the transcript and sends it, not re-running it.
        config = {"delivery_ledger": False}
        first = crash_at(spawn, "after_reply_persisted", "hello", config)
        home = first.home
        assert outbox(home) == []
        second = spawn(config)
        assert second.report["recovered_replies"] == 1
        second.idle()
        assert second.turns() == []
        assert outbox(home) == [RECOVERED_PREFIX + "echo: hello"]

    def test_after_send_before_delivered(self, spawn):
        first = crash_at(spawn, "after_send_before_delivered", "hello")
        second = spawn()
        second.idle()
        assert second.turns() == []
        assert outbox(first.home) == ["echo: hello", RECOVERED_PREFIX + "echo: hello"]

    def test_after_ledger_recorded(self, spawn):
        # The reply was recorded and claimed (attempting) in one transaction, so the crash
        # leaves an uncertain attempt: delivered once, with the recovered prefix.
        first = crash_at(spawn, "after_ledger_recorded", "hello")
        second = spawn()
        second.idle()
        assert second.turns() == []
        assert outbox(first.home) == [RECOVERED_PREFIX + "echo: hello"]

    def test_after_user_persisted_resumes(self, spawn):
        crash_at(spawn, "after_user_persisted", "hello")
        second = spawn()
        assert second.report["resumed"] == [KEY]
        second.idle()
        assert second.turns() == [resume_note("restart_interrupted")]


class TestStuckLoop:
    """Three consecutive restarts mid-turn suspend the session; the next message rotates."""

    def test_suspended_after_three(self, spawn):
        config = {"agent": {"auto_continue_freshness": 0}}
        interrupted = []
        for n in range(3):
            child = spawn(config)
            assert child.report["suspended"] == []
            interrupted.append(Accepted(child.send(f"sleep 6{n}"), "42", f"sleep 6{n}"))
            child.expect("TURN")
            child.kill()
        old = routing(child)["session_id"]
        last = spawn(config)
        assert last.report["suspended"] == [KEY]
        # suspended, not rotated yet: the routing row is the evidence
        assert reconcile(interrupted, {}, evidence(child)).suspended == [
            m.event_id for m in interrupted]
        status = Accepted(last.send("/status"), "42", "/status")  # a command, not a turn
        last.send("hi")
        last.idle()
        last.stop()
        entry = routing(child)
        assert entry["session_id"] != old
        assert entry["was_auto_reset"] is True and entry["prev_session_id"] == old
        counts = node_values(child.home, child.config).get("restart_counts", {})
        assert KEY not in counts
        # rotated: the old session's row ended "suspended"; the three interrupted turns
        # are its abandoned ones, anything else unanswered stays lost
        verdict = reconcile([*interrupted, status], {}, evidence(child))
        assert verdict.suspended == [m.event_id for m in interrupted]
        assert verdict.lost == [status.event_id]

    def test_a_crash_during_recovery_keeps_the_count(self, spawn):
        # Boot 1 dies mid-turn; boot 2 counts it, flags the session for resume and dies
        # during recovery; boot 3 must not read the unresumed session as idle.
        config = {"agent": {"auto_continue_freshness": 0}}
        child = spawn(config)
        child.send("sleep 60")
        child.expect("TURN")
        child.kill()
        crashed = spawn(config, env={"HERMES_ACTORS_CRASHPOINT": "during_recovery"},
                        ready=False)
        assert crashed.wait_exit() == 137
        third = spawn(config)
        assert node_values(child.home, child.config).get("restart_counts", {}) == {KEY: 1}
        third.send("hi")
        third.idle()
        assert node_values(child.home, child.config).get("restart_counts", {}) == {}
        third.stop()

    def test_successful_turn_resets_counter(self, spawn):
        config = {"agent": {"auto_continue_freshness": 0}}
        child = spawn(config)
        child.send("sleep 60")
        child.expect("TURN")
        child.kill()
        child = spawn(config)
        counts = node_values(child.home, child.config).get("restart_counts", {})
        assert counts == {KEY: 1}
        child.send("hi")
        child.idle()
        counts = node_values(child.home, child.config).get("restart_counts", {})
        assert counts == {}
        child.stop()


class TestGracefulStop:
    """SIGTERM writes the marker and resumes nothing; a drain timeout marks for resume."""

    def test_clean_sigterm(self, spawn):
        child = spawn()
        child.send("hello")
        child.idle()
        assert child.terminate() == 0
        assert "clean_shutdown" in node_values(child.home, child.config)
        again = spawn()
        assert again.report["clean_shutdown"] is True
        assert again.report["resumed"] == []
        assert "clean_shutdown" not in node_values(child.home, child.config)
        again.idle()
        assert again.turns() == []

    def test_drain_timeout_resumes_with_shutdown_note(self, spawn):
        child = spawn()
        child.send("sleep 60")
        child.expect("TURN")
        assert child.stop(drain=0.2) == 0
        assert "clean_shutdown" in node_values(child.home, child.config)
        assert routing(child)["resume_reason"] == "shutdown_timeout"
        again = spawn()
        assert again.report["resumed"] == [KEY]
        again.idle()
        assert again.turns() == [resume_note("shutdown_timeout")]


class TestQueuedMessagesSurvive:
    """Messages queued behind a killed turn are replayed in order, each answered once."""

    def test_replayed_in_order(self, spawn):
        config = {"busy_input_mode": "queue"}
        first = spawn(config)
        first.send("sleep 60")
        first.expect("TURN")
        first.send("/queue a")
        first.send("/queue b")
        first.send("c")
        first.kill()
        second = spawn(config)
        assert second.report["replayed_inbox"] == 3
        assert second.report["resumed"] == [KEY]
        second.idle()
        note = resume_note("restart_interrupted")
        assert second.turns() == [f"{note}\n\na", "b", "c"]
        second.stop()
        third = spawn(config)
        assert third.report["replayed_inbox"] == 0
        third.idle()
        assert third.turns() == []
        replies = [t for t in outbox(first.home) if t.startswith(("echo:", "resumed:"))]
        assert replies == ["resumed: sleep 60\necho: a", "echo: b", "echo: c"]


class TestTimeZones:
    """A marker written under one host time zone is judged by epoch seconds under another."""

    def test_tz_change_between_runs(self, spawn):
        first = spawn(env={"TZ": "Asia/Tokyo"})
        first.send("sleep 60")
        first.expect("TURN")
        first.kill()
        second = spawn(env={"TZ": "America/New_York"})
        assert second.report["resumed"] == [KEY]


class TestExactlyOnceIngress:
    """Embedded ``submit``: killed between the durable accept and the acknowledgement, the
    retried message (same ``message_id``) is recognised after the restart: one reply."""

    def test_retry_after_kill_is_answered_once(self, spawn):
        first = spawn(env={"HERMES_ACTORS_CRASHPOINT": "after_message_accepted"})
        first.submit_nowait("hello", message_id="m-1")
        assert first.wait_exit() == 137
        assert not any(line.startswith("ACK") for line in first.seen)  # never acknowledged
        second = spawn()
        assert second.report["replayed_inbox"] == 1  # it was durable
        retried = second.send("hello", message_id="m-1")
        second.idle()
        assert second.turns() == ["hello"]
        assert outbox(second.home) == ["echo: hello"]
        # the retry got the first event's id: a third try after a clean restart is known too
        second.stop()
        third = spawn()
        assert third.send("hello", message_id="m-1") == retried
        third.idle()
        assert third.turns() == [] and outbox(third.home) == ["echo: hello"]
