"""The pure slot + overflow rules of §8, without actors."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hermes_actors.model.events import MessageEvent, MessageType
from hermes_actors.model.source import SessionSource
from hermes_actors.runtime.queueing import Queued, SessionQueue

SRC = SessionSource("telegram", chat_id="1", user_id="7")


def ev(text: str, *, internal: bool = False, kind: MessageType = MessageType.TEXT,
       media: tuple[str, ...] = ()) -> MessageEvent:
    return MessageEvent(source=SRC, text=text, internal=internal, message_type=kind,
                        media_urls=media)


def texts(q: SessionQueue) -> list[str]:
    return [i.event.text for i in q.items()]


class TestEnqueueFifo:
    """`/queue` items fill the slot first, then the overflow, and drain in order."""

    def test_slot_then_overflow_then_fifo_drain(self):
        q = SessionQueue()
        for t in "abc":
            q.enqueue_fifo(Queued.of(ev(t), "queued"))
        assert q.pending_slot.event.text == "a"
        assert [i.event.text for i in q.overflow] == ["b", "c"]
        assert q.depth == 3
        out = []
        while (item := q.take_next()) is not None:
            out.append(item.event.text)
        assert out == ["a", "b", "c"]
        assert q.depth == 0

    def test_take_next_stages_overflow_head_into_slot(self):
        q = SessionQueue()
        for t in "abc":
            q.enqueue_fifo(Queued.of(ev(t), "queued"))
        assert q.take_next().event.text == "a"
        assert q.pending_slot.event.text == "b"
        assert [i.event.text for i in q.overflow] == ["c"]

    def test_take_next_promotes_overflow_when_slot_empty(self):
        q = SessionQueue()
        q.overflow.append(Queued.of(ev("x"), "queued"))
        assert q.take_next().event.text == "x"
        assert q.depth == 0


class TestMergeFollowup:
    """Interrupt-mode follow-ups collapse into the slot without losing any text."""

    def test_texts_joined_and_media_concatenated_and_ids_kept(self):
        q = SessionQueue()
        a, b = ev("one", media=("m1",)), ev("two", media=("m2",))
        q.merge_followup(Queued.of(a, "followup"))
        q.merge_followup(Queued.of(b, "followup"))
        slot = q.pending_slot
        assert slot.event.text == "one\ntwo"
        assert slot.event.media_urls == ("m1", "m2")
        assert slot.event_ids == (a.event_id, b.event_id)
        assert q.depth == 1

    def test_photo_burst_keeps_photo_type(self):
        q = SessionQueue()
        for i in range(3):
            q.merge_followup(Queued.of(ev("", kind=MessageType.PHOTO, media=(f"p{i}",)),
                                       "followup"))
        assert q.pending_slot.event.message_type is MessageType.PHOTO
        assert q.pending_slot.event.media_urls == ("p0", "p1", "p2")

    def test_displaces_queued_item_to_overflow_head(self):
        q = SessionQueue()
        q.enqueue_fifo(Queued.of(ev("q1"), "queued"))
        q.enqueue_fifo(Queued.of(ev("q2"), "queued"))
        q.merge_followup(Queued.of(ev("f"), "followup"))
        assert texts(q) == ["f", "q1", "q2"]

    def test_displaces_internal_item(self):
        q = SessionQueue()
        q.enqueue_fifo(Queued.of(ev("wake", internal=True), "internal"))
        q.merge_followup(Queued.of(ev("f"), "followup"))
        assert texts(q) == ["f", "wake"]


class TestStopAndNew:
    """`/stop` drops only the human follow-up; `/new` drops every human item; wake-ups stay."""

    def test_stop_drops_followup_and_promotes_first_internal(self):
        q = SessionQueue()
        q.merge_followup(Queued.of(ev("f"), "followup"))
        q.overflow.extend([Queued.of(ev("q1"), "queued"),
                           Queued.of(ev("wake", internal=True), "internal")])
        dropped = q.discard_followup()
        assert dropped.event.text == "f"
        assert texts(q) == ["wake", "q1"]

    def test_stop_keeps_queue_items(self):
        q = SessionQueue()
        q.enqueue_fifo(Queued.of(ev("q1"), "queued"))
        q.enqueue_fifo(Queued.of(ev("q2"), "queued"))
        assert q.discard_followup() is None
        assert texts(q) == ["q1", "q2"]

    def test_stop_without_internal_items_keeps_queue_order(self):
        # the follow-up held the slot and /queue items wait behind it: once it is dropped
        # the overflow head takes the slot, so a later /queue item runs after them
        q = SessionQueue()
        q.enqueue_fifo(Queued.of(ev("f"), "followup"))
        q.enqueue_fifo(Queued.of(ev("q1"), "queued"))
        q.enqueue_fifo(Queued.of(ev("q2"), "queued"))
        assert q.discard_followup().event.text == "f"
        q.enqueue_fifo(Queued.of(ev("q3"), "queued"))
        order = []
        while (item := q.take_next()) is not None:
            order.append(item.event.text)
        assert order == ["q1", "q2", "q3"]

    def test_new_keeps_only_internal_in_order(self):
        q = SessionQueue()
        q.merge_followup(Queued.of(ev("f"), "followup"))
        q.overflow.extend([
            Queued.of(ev("w1", internal=True), "internal"),
            Queued.of(ev("q1"), "queued"),
            Queued.of(ev("w2", internal=True), "internal"),
        ])
        dropped = q.clear_human()
        assert [d.event.text for d in dropped] == ["f", "q1"]
        assert texts(q) == ["w1", "w2"]
        assert q.pending_slot.kind == "internal"

    def test_put_back_restores_front(self):
        q = SessionQueue()
        q.enqueue_fifo(Queued.of(ev("a"), "queued"))
        q.enqueue_fifo(Queued.of(ev("b"), "queued"))
        item = q.take_next()
        q.put_back(item)
        assert texts(q) == ["a", "b"]


_ops = st.lists(st.sampled_from(["queue", "internal", "take"]), max_size=60)
_all_ops = st.lists(st.sampled_from(["queue", "internal", "followup", "take", "stop", "new"]),
                    max_size=60)


class TestFifoProperty:
    """Every `/queue` item and wake-up comes out exactly once, in arrival order."""

    @given(_ops)
    def test_fifo_against_a_list_model(self, ops):
        q, model, out, model_out = SessionQueue(), [], [], []
        for n, op in enumerate(ops):
            if op == "take":
                item = q.take_next()
                out.append(item.event.text if item else None)
                model_out.append(model.pop(0) if model else None)
            else:
                text = f"{op}{n}"
                q.enqueue_fifo(Queued.of(ev(text, internal=op == "internal"),
                                         "internal" if op == "internal" else "queued"))
                model.append(text)
            assert q.depth == len(model)
        assert out == model_out


class TestSlotInvariant:
    """The slot is never empty while the overflow holds items (whatever the operations):
    otherwise the next ``enqueue_fifo`` would run ahead of everything already waiting."""

    @given(_all_ops)
    def test_slot_filled_whenever_overflow_is(self, ops):
        q = SessionQueue()
        for n, op in enumerate(ops):
            if op == "take":
                q.take_next()
            elif op == "stop":
                q.discard_followup()
            elif op == "new":
                q.clear_human()
            elif op == "followup":
                q.merge_followup(Queued.of(ev(f"f{n}"), "followup"))
            else:
                q.enqueue_fifo(Queued.of(ev(f"{op}{n}", internal=op == "internal"),
                                         "internal" if op == "internal" else "queued"))
            assert q.pending_slot is not None or not q.overflow, texts(q)
