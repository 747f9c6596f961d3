"""§8 queueing through the Gateway: /queue FIFO, follow-ups, caps, /stop, /new, wake-ups."""

from __future__ import annotations

import pytest

from hermes_actors.runtime.session_actor import (
    INTERRUPT_ACK,
    NEW_SESSION_CUT,
    NOTHING_TO_STOP,
    QUEUE_FULL,
    QUEUE_USAGE,
    QUEUED_ACK,
    STOPPED,
)


@pytest.fixture
def harness_store(every_backend):
    """Every scenario here runs on each store backend."""
    return every_backend


class TestQueueCommand:
    """Each /queue item is one complete turn, in FIFO order, never merged."""

    def test_ten_queue_items_during_a_turn(self, make_harness):
        h = make_harness()
        h.hold("g")
        for i in range(10):
            h.send(f"/queue item {i}")
        h.handled()  # (the messages reach the actor before the turn ends)
        h.gates.open("g")
        h.idle()
        assert h.seen() == ["hold g"] + [f"item {i}" for i in range(10)]
        replies = [t for t in h.texts() if t.startswith(("echo", "held"))]
        assert replies == ["held g"] + [f"echo: item {i}" for i in range(10)]
        acks = [t for t in h.texts() if t.startswith(QUEUED_ACK)]
        assert acks == [QUEUED_ACK] + [f"{QUEUED_ACK} ({n} queued)" for n in range(2, 11)]

    def test_queue_with_nothing_running_runs_at_once(self, make_harness):
        h = make_harness()
        h.send("/queue x")
        h.idle()
        assert h.texts() == ["echo: x"]

    def test_q_alias_and_usage(self, make_harness):
        h = make_harness()
        h.send("/Q y")
        h.send("/queue")
        h.idle()
        assert sorted(h.texts()) == sorted(["echo: y", QUEUE_USAGE])

    def test_queue_cap(self, make_harness):
        h = make_harness(queue_max=2)
        h.hold("g")
        for i in range(3):
            h.send(f"/queue {i}")
        h.handled()  # (the messages reach the actor before the turn ends)
        h.gates.open("g")
        h.idle()
        assert QUEUE_FULL.format(2) in h.texts()
        assert h.seen() == ["hold g", "0", "1"]


class TestInterruptMode:
    """Follow-ups interrupt the running turn and collapse into one next turn, nothing lost."""

    def test_followups_merge_and_first_is_acked(self, make_harness):
        h = make_harness()
        h.hold("g")
        h.send("first")
        h.send("second")
        h.send("third")
        h.handled()  # (the messages reach the actor before the turn ends)
        h.gates.open("g")
        h.idle()
        assert h.seen() == ["hold g", "first\nsecond\nthird"]
        assert h.texts().count(INTERRUPT_ACK) == 1
        assert "held g" not in h.texts()  # the interrupted turn owes nothing

    def test_followup_displaces_queue_item(self, make_harness):
        h = make_harness()
        h.hold("g")
        h.send("/queue q1")
        h.send("follow")
        h.handled()  # (the messages reach the actor before the turn ends)
        h.gates.open("g")
        h.idle()
        assert h.seen() == ["hold g", "follow", "q1"]

    def test_followup_after_the_answer_is_recorded_is_not_acked(self, make_harness):
        h = make_harness()
        sending, release = h.slow_send("echo: hi")  # recorded, the marker cleared; slow send
        h.send("hi")
        assert sending.wait(10)
        assert h.gw.store.get(h.key()).active_turn_token is None
        h.send("more")
        # Asked behind "more" in the actor's mailbox: answered once "more" was handled.
        stats = h.gw.session_statistics(h.key())
        release.set()
        h.idle()
        assert not stats.interrupting, "the follow-up interrupted an answered turn"
        assert h.texts() == ["echo: hi", "echo: more"]  # no INTERRUPT_ACK


class TestQueueMode:
    """In queue mode follow-ups queue FIFO with the /queue ack and the cap."""

    def test_followups_queue_in_order(self, make_harness):
        h = make_harness(busy_input_mode="queue", queue_max=3)
        h.hold("g")
        for i in range(4):
            h.send(f"m{i}")
        h.handled()  # (the messages reach the actor before the turn ends)
        h.gates.open("g")
        h.idle()
        assert h.seen() == ["hold g", "m0", "m1", "m2"]
        assert f"{QUEUED_ACK} (3 queued)" in h.texts()
        assert QUEUE_FULL.format(3) in h.texts()
        assert INTERRUPT_ACK not in h.texts()


class TestStop:
    """/stop interrupts, drops only the human follow-up, keeps /queue items and wake-ups."""

    def test_nothing_to_stop(self, make_harness):
        h = make_harness()
        h.send("/stop")
        h.idle()
        assert h.texts() == [NOTHING_TO_STOP]

    def test_stop_running_turn(self, make_harness):
        h = make_harness()
        h.hold("g", "wait")
        h.send("/stop")
        h.idle()
        assert h.texts() == [STOPPED]
        h.send("after")
        h.idle()
        assert h.texts()[-1] == "echo: after"

    def test_stop_keeps_queue_items(self, make_harness):
        h = make_harness()
        h.hold("g")
        h.send("/queue q1")
        h.send("/queue q2")
        h.send("follow")
        h.send("/stop")
        h.handled()  # (the command reaches the actor before the turn can end)
        h.gates.open("g")
        h.idle()
        assert h.seen() == ["hold g", "q1", "q2"]

    def test_messages_after_stop_run_behind_those_waiting(self, make_harness):
        # queue mode: m1 waits in the slot, m2 behind it; /stop drops m1; m3 comes after m2
        h = make_harness(busy_input_mode="queue")
        h.hold("g")
        for text in ("m1", "m2", "/stop", "m3"):
            h.send(text)
        h.handled()  # (the messages reach the actor before the turn ends)
        h.gates.open("g")
        h.idle()
        assert h.seen() == ["hold g", "m2", "m3"]

    def test_queue_item_after_stop_runs_last(self, make_harness):
        h = make_harness()
        h.hold("g")
        for text in ("/queue q1", "follow", "/queue q2", "/stop", "/queue q3"):
            h.send(text)
        h.handled()  # (the messages reach the actor before the turn ends)
        h.gates.open("g")
        h.idle()
        assert h.seen() == ["hold g", "q1", "q2", "q3"]

    def test_wakeup_not_stranded(self, make_harness):
        h = make_harness()
        h.hold("g")
        h.send("follow")
        h.wake("wake-up")
        h.send("/stop")
        h.handled()  # (the command reaches the actor before the turn can end)
        h.gates.open("g")
        h.idle()
        assert h.seen() == ["hold g", "wake-up"]
        assert h.log[-1].internal is True


class TestNew:
    """/new clears human items, rotates the session id, and wake-ups survive it."""

    def test_new_rotates_and_clears(self, make_harness):
        h = make_harness()
        h.send("hi")
        h.idle()
        old = h.gw.store.get(h.key()).session_id
        h.hold("g")
        h.send("/queue q1")
        h.wake("wake-up")
        h.send("/new")
        h.handled()  # (the command reaches the actor before the turn can end)
        h.gates.open("g")
        h.idle()
        entry = h.gw.store.get(h.key())
        assert entry.session_id != old
        assert entry.prev_session_id == old and entry.is_fresh_reset
        assert NEW_SESSION_CUT in h.texts()  # it cut the held turn
        assert h.seen() == ["hi", "hold g", "wake-up"]
        assert h.log[-1].session_id == entry.session_id
        assert h.agents[0].closed is True

    def test_bound_wakeup_of_closed_session_recorded_not_run(self, make_harness):
        h = make_harness()
        h.send("hi")
        h.idle()
        old = h.gw.store.get(h.key()).session_id
        h.send("/reset")
        h.idle()
        h.wake("late result", metadata={"session_id": old})
        h.wake("unbound result")
        h.idle()
        assert h.seen() == ["hi", "unbound result"]
        old_rows = h.gw.store.load_transcript(old)
        assert old_rows[-1]["content"] == "late result"

    def test_dropped_events_are_consumed(self, make_harness):
        h = make_harness()
        h.hold("g")
        h.send("/queue q1")
        h.send("/new")
        h.handled()  # (the command reaches the actor before the turn can end)
        h.gates.open("g")
        h.idle()
        assert h.gw.store.pending_inbox() == []
