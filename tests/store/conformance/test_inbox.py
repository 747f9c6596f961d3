"""The durable inbox: idempotent accepts, one holder per ingress key, consumption, prunes."""

from __future__ import annotations

import json

from hermes_actors.store.ops import AcceptEvent, ConsumeEvents, PruneInbox, WithdrawEvent

from .ops import T0


def accept(event_id: str, key: str = "k", ingress: str | None = None) -> AcceptEvent:
    return AcceptEvent(event_id, key, json.dumps({"event_id": event_id}), False, T0, ingress)


class TestInbox:
    def test_order_and_idempotency(self, backend):
        assert backend.apply([accept("e1"), accept("e2", "k2"), accept("e1")]) == [
            "e1", "e2", "e1"]
        assert backend.pending_inbox() == [("k", {"event_id": "e1"}),
                                           ("k2", {"event_id": "e2"})]

    def test_an_ingress_key_has_one_holder(self, backend):
        assert backend.apply([accept("e1", ingress="m1")]) == ["e1"]
        assert backend.apply([accept("e2", ingress="m1")]) == ["e1"]  # nothing stored
        assert [p["event_id"] for _, p in backend.pending_inbox()] == ["e1"]
        backend.apply([ConsumeEvents(("e1",), "turn", T0)])
        assert backend.apply([accept("e3", ingress="m1")]) == ["e1"]  # still remembered

    def test_withdraw_frees_only_unconsumed_events(self, backend):
        backend.apply([accept("e1", ingress="m1"), accept("e2")])
        assert backend.apply([WithdrawEvent("e1")]) == [1]
        assert backend.apply([accept("e3", ingress="m1")]) == ["e3"]  # the key is free
        backend.apply([ConsumeEvents(("e2",), "turn", T0)])
        assert backend.apply([WithdrawEvent("e2"), WithdrawEvent("nope")]) == [0, 0]

    def test_consume_keeps_the_first_reason(self, backend):
        backend.apply([accept("e1"), accept("e2")])
        assert backend.apply([ConsumeEvents(("e1", "nope"), "command", T0)]) == [1]
        assert backend.apply([ConsumeEvents(("e1", "e2"), "dropped", T0)]) == [1]
        rows = {row["event_id"]: row["consumed_reason"] for row in backend.rows("inbox")}
        assert rows == {"e1": "command", "e2": "dropped"}
        assert backend.pending_inbox() == []

    def test_prune_drops_old_consumed_rows_only(self, backend):
        backend.apply([accept("old"), accept("new"), accept("open")])
        backend.apply([ConsumeEvents(("old",), "turn", T0 - 10),
                       ConsumeEvents(("new",), "turn", T0 + 10)])
        assert backend.apply([PruneInbox(T0)]) == [1]
        assert sorted(row["event_id"] for row in backend.rows("inbox")) == ["new", "open"]

    def test_durability(self, opened):
        opened.backend.apply([accept("e1")])
        again = opened.reopen()
        assert len(again.pending_inbox()) == 1
