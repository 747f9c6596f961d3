"""The reconciliation of acknowledged messages against the outbox (a pure function)."""

from __future__ import annotations

from hermes_actors.runtime.delivery import RECOVERED_PREFIX
from hermes_actors.testing.reconcile import Accepted, reconcile


def _reply(text: str, *ids: str) -> dict:
    return {"kind": "reply", "text": text, "in_reply_to": list(ids)}


A = [Accepted("e1", "c", "one"), Accepted("e2", "c", "sleep 2"), Accepted("e3", "c", "three")]


class TestReconcile:
    """Lost, duplicated, out-of-order and continued answers are told apart."""

    def test_every_message_answered_once_in_order(self):
        rows = [_reply("echo: one", "e1"), {"kind": "notice", "text": "Queued", "in_reply_to": ["e2"]},
                _reply("slept 2", "e2"), _reply("echo: three", "e3")]
        verdict = reconcile(A, {"c": rows})
        assert verdict.ok and verdict.answered == 3

    def test_a_notice_answers_nothing(self):
        verdict = reconcile(A[:1], {"c": [{"kind": "notice", "text": "x", "in_reply_to": ["e1"]}]})
        assert verdict.lost == ["e1"]

    def test_a_continuation_answers_the_interrupted_message(self):
        rows = [_reply("echo: one", "e1"), _reply("resumed: sleep 2", "w1"),
                _reply("echo: three", "e3")]
        verdict = reconcile(A, {"c": rows})
        assert verdict.ok and verdict.continued == ["e2"]

    def test_a_continuation_riding_on_a_waiting_message(self):
        rows = [_reply("echo: one", "e1"), _reply("resumed: sleep 2\necho: three", "e3")]
        verdict = reconcile(A, {"c": rows})
        assert verdict.ok and verdict.continued == ["e2"]

    def test_an_answer_and_a_continuation_of_one_message_is_a_duplicate(self):
        rows = [_reply("echo: one", "e1"), _reply("slept 2", "e2"),
                _reply("resumed: sleep 2", "w1"), _reply("echo: three", "e3")]
        assert reconcile(A, {"c": rows}).duplicated == {"e2": 2}

    def test_two_plain_replies_are_a_duplicate(self):
        rows = [_reply("echo: one", "e1"), _reply("echo: one", "e1")]
        assert reconcile(A[:1], {"c": rows}).duplicated == {"e1": 2}

    def test_a_prefixed_redelivery_is_counted_apart(self):
        rows = [_reply("echo: one", "e1"), _reply(RECOVERED_PREFIX + "echo: one", "e1")]
        verdict = reconcile(A[:1], {"c": rows})
        assert verdict.ok and verdict.redelivered == ["e1"]

    def test_out_of_order(self):
        rows = [_reply("echo: three", "e3"), _reply("echo: one", "e1"), _reply("slept 2", "e2")]
        assert reconcile(A, {"c": rows}).out_of_order == ["c"]

    def test_lost(self):
        verdict = reconcile(A, {"c": [_reply("echo: one", "e1")]})
        assert verdict.lost == ["e2", "e3"] and not verdict.ok
        assert verdict.line().startswith("1 answered, 2 lost, 0 duplicated")
