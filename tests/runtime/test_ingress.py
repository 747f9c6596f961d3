"""Exactly-once ingress and refusals that look refused (issue 17.2, 17.3), embedded.

A message carrying a platform ``message_id`` is remembered by (platform, chat, thread,
message id): a repeat returns the first event's id and does nothing else. ``Gateway.admit``
(what the HTTP adapter uses) lets the session actor refuse a message its queue cannot take,
and then nothing of that message is kept; plain ``submit`` keeps the notice contract.
"""

from __future__ import annotations

import threading

import pytest

from hermes_actors import MessageEvent, SessionSource
from hermes_actors.runtime.session_actor import QUEUE_FULL
from hermes_actors.runtime.session_core import Inbound, SessionCore
from hermes_actors.testing import db_rows, wait_until


@pytest.fixture
def harness_store(every_backend):
    """Every scenario here runs on each store backend."""
    return every_backend


def _event(text: str = "hello", *, message_id: str | None = "m1", chat_id: str = "42",
           thread_id: str | None = None, platform: str = "telegram") -> MessageEvent:
    return MessageEvent(source=SessionSource(platform, chat_id=chat_id, user_id="7",
                                             thread_id=thread_id, message_id=message_id),
                        text=text)


class TestDuplicates:
    """A repeat of an accepted message is recognised by its ingress key and not processed."""

    def test_repeat_returns_the_first_id_and_is_answered_once(self, make_harness):
        h = make_harness()
        first = h.gw.submit(_event())
        h.idle()
        again = h.gw.submit(_event())
        h.idle()
        assert again == first
        assert h.texts() == ["echo: hello"]
        assert [row["event_id"] for row in db_rows(h.gw.home, "inbox", config=h.gw.config)] == [first]
        assert h.gw.ingress.statistics().refused["duplicate"] == 1

    def test_repeat_while_the_first_is_still_queued(self, make_harness):
        h = make_harness(busy_input_mode="queue")
        h.hold("g")
        first = h.gw.submit(_event("next"))
        assert h.gw.submit(_event("next")) == first
        h.gates.open("g")
        h.idle()
        assert h.seen() == ["hold g", "next"]

    @pytest.mark.parametrize("other", [
        {"chat_id": "43"}, {"thread_id": "t1"}, {"message_id": "m2"},
    ])
    def test_another_conversation_or_message_is_not_a_repeat(self, make_harness, other):
        h = make_harness()
        first = h.gw.submit(_event())
        h.idle()
        second = h.gw.submit(_event(**other))
        h.idle()
        assert second != first
        assert len([t for t in h.texts() if t == "echo: hello"]) == 2

    def test_messages_without_message_id_are_never_repeats(self, make_harness):
        h = make_harness(busy_input_mode="queue")
        ids = {h.gw.submit(_event(message_id=None)) for _ in range(3)}
        h.idle()
        assert len(ids) == 3
        assert [t for t in h.texts() if t.startswith("echo")] == ["echo: hello"] * 3

    def test_concurrent_repeats_accept_one(self, make_harness):
        h = make_harness()
        barrier = threading.Barrier(8)
        got: list[str] = []

        def offer() -> None:
            event = _event("race")
            barrier.wait()
            got.append(h.gw.submit(event))

        threads = [threading.Thread(target=offer) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        h.idle()
        assert len(got) == 8 and len(set(got)) == 1
        assert h.texts() == ["echo: race"]
        assert len(db_rows(h.gw.home, "inbox", config=h.gw.config)) == 1

    def test_the_memory_survives_a_restart(self, make_harness, tmp_path):
        h = make_harness()
        first = h.gw.submit(_event())
        h.idle()
        h.gw.stop(drain_timeout=1)
        again = make_harness(home=h.gw.home)
        assert again.gw.submit(_event()) == first
        again.idle()
        assert again.texts() == []


class TestAdmit:
    """``admit`` refuses what the session's queue cannot take and keeps nothing of it."""

    def test_full_queue_is_refused_and_nothing_is_kept(self, make_harness):
        h = make_harness(busy_input_mode="queue", queue_max=2)
        h.hold("g")
        taken = [h.gw.admit(_event(f"q{i}", message_id=f"q{i}")) for i in range(2)]
        assert [a.refused for a in taken] == [None, None]
        assert [a.queue_depth for a in taken] == [1, 2]
        refused = h.gw.admit(_event("too many", message_id="q2"))
        assert refused.refused == QUEUE_FULL.format(2)
        assert not refused.duplicate
        rows = db_rows(h.gw.home, "inbox", config=h.gw.config)
        assert refused.event_id not in {row["event_id"] for row in rows}
        h.gates.open("g")
        h.idle()
        assert h.seen() == ["hold g", "q0", "q1"]
        assert not any(t.startswith("Queue full") for t in h.texts())
        transcript = h.gw.store.load_transcript(h.gw.store.get(h.key()).session_id)
        assert "too many" not in [m["content"] for m in transcript]
        stats = h.gw.ingress.statistics()
        assert stats.refused["queue_full"] == 1 and stats.accepted == 3  # hold g, q0, q1

    def test_a_refused_message_can_be_sent_again(self, make_harness):
        h = make_harness(busy_input_mode="queue", queue_max=1)
        h.hold("g")
        assert h.gw.admit(_event("a", message_id="a")).refused is None
        assert h.gw.admit(_event("b", message_id="b")).refused is not None
        h.gates.open("g")
        h.idle()
        retry = h.gw.admit(_event("b", message_id="b"))
        assert retry.refused is None and not retry.duplicate
        h.idle()
        assert h.seen() == ["hold g", "a", "b"]

    def test_queue_command_is_refused_too(self, make_harness):
        h = make_harness(queue_max=1)
        h.hold("g")
        assert h.gw.admit(_event("/queue a", message_id="a")).refused is None
        assert h.gw.admit(_event("/queue b", message_id="b")).refused == QUEUE_FULL.format(1)

    @staticmethod
    def _hold_the_actor(monkeypatch, text: str, *, after_deciding: bool):
        """Make the session actor stop at the ``Inbound`` of ``text`` (before or after its
        decision) until released: ``(reached, release)``."""
        reached, release, real = threading.Event(), threading.Event(), SessionCore.handle

        def handle(core, message, ctx):
            held = isinstance(message, Inbound) and message.event.text == text
            if held and not after_deciding:
                reached.set()
                assert release.wait(20)
            reaction = real(core, message, ctx)
            if held and after_deciding:
                reached.set()
                assert release.wait(20)
            return reaction

        monkeypatch.setattr(SessionCore, "handle", handle)
        return reached, release

    def test_a_full_queue_after_admit_gave_up_is_answered_and_consumed(self, make_harness,
                                                                          monkeypatch):
        # admit() stopped waiting (its client got 202) before the actor decided: the actor
        # may not refuse it any more; it answers it (a final notice) and consumes it at once
        h = make_harness(busy_input_mode="queue", queue_max=1)
        h.hold("g")
        assert h.gw.admit(_event("a", message_id="a")).refused is None
        reached, release = self._hold_the_actor(monkeypatch, "b", after_deciding=False)
        h.gw.admit_timeout = 0.2
        late = h.gw.admit(_event("b", message_id="b"))
        assert reached.is_set() and late.refused is None and not late.duplicate
        release.set()
        wait_until(lambda: QUEUE_FULL.format(1) in h.texts(), 10, 0.05, "the queue-full notice")
        notice = next(m for m in h.adapter.sent if m.text == QUEUE_FULL.format(1))
        assert late.event_id in notice.in_reply_to and notice.final
        row = next(r for r in db_rows(h.gw.home, "inbox", config=h.gw.config)
                   if r["event_id"] == late.event_id)
        assert row["consumed_at"] is not None and row["consumed_reason"] == "rejected"
        h.gates.open("g")
        h.idle()
        assert h.seen() == ["hold g", "a"]

    def test_a_refusal_read_after_the_timeout_still_refuses(self, make_harness, monkeypatch):
        # the actor refused before admit() gave up, but its answer came late: the decision
        # stands, and admit() acts on it (withdraws the event, hands the refusal back)
        h = make_harness(busy_input_mode="queue", queue_max=1)
        h.hold("g")
        assert h.gw.admit(_event("a", message_id="a")).refused is None
        reached, release = self._hold_the_actor(monkeypatch, "b", after_deciding=True)
        h.gw.admit_timeout = 0.2
        late = h.gw.admit(_event("b", message_id="b"))
        assert reached.is_set() and late.refused == QUEUE_FULL.format(1)
        release.set()
        rows = db_rows(h.gw.home, "inbox", config=h.gw.config)
        assert late.event_id not in {row["event_id"] for row in rows}
        h.gates.open("g")
        h.idle()
        assert h.seen() == ["hold g", "a"]
        assert QUEUE_FULL.format(1) not in h.texts()

    def test_submit_keeps_the_notice_contract(self, make_harness):
        h = make_harness(busy_input_mode="queue", queue_max=1)
        h.hold("g")
        h.send("a")
        h.send("b")
        h.gates.open("g")
        h.idle()
        assert QUEUE_FULL.format(1) in h.texts()
