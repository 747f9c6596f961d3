"""The reconciliation of acknowledged messages against the outbox, and the database's
evidence on unanswered ones (pure functions)."""

from __future__ import annotations

import json

from hermes_actors.runtime.delivery import RECOVERED_PREFIX
from hermes_actors.runtime.turn import FAILED_NOTICE
from hermes_actors.testing.reconcile import Accepted, reconcile, suspension_evidence


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


KEY = "agent:main:webhook:dm:c"
NOTE = "[System note: The previous turn was interrupted by a gateway restart; ...]"


def _evidence(*, consumed_at=150.0, reason="turn", end_reason="suspended", ended_at=200.0,
              transcript=(("user", "one", False), ("assistant", "echo: one", True),
                          ("user", "sleep 2", False), ("user", NOTE, False)),
              routing=(), key=KEY):
    """Stored rows of a session ``s1`` (100..ended_at) in which ``e2`` was consumed."""
    inbox = [{"event_id": "e1", "session_key": key, "consumed_at": 120.0,
              "consumed_reason": "turn"},
             {"event_id": "e2", "session_key": key, "consumed_at": consumed_at,
              "consumed_reason": reason},
             {"event_id": "e3", "session_key": key, "consumed_at": None,
              "consumed_reason": None}]
    sessions = [{"id": "s1", "session_key": KEY, "started_at": 100.0, "ended_at": ended_at,
                 "end_reason": end_reason},
                {"id": "s2", "session_key": KEY, "started_at": 200.0, "ended_at": None,
                 "end_reason": None}]
    messages = [{"session_id": "s1", "role": role, "content": content, "is_reply": reply}
                for role, content, reply in transcript]
    messages.append({"session_id": "s2", "role": "user", "content": "three",
                     "is_reply": False})
    return suspension_evidence(inbox=inbox, sessions=sessions, routing=list(routing),
                               messages=messages)


class TestSuspendedNotLost:
    """An unanswered message counts as suspended only on the database's evidence that its
    session was suspended while it was the interrupted turn; anything else stays lost."""

    rows = [_reply("echo: one", "e1"), _reply("echo: three", "e3")]

    def test_the_interrupted_turn_of_a_suspended_session(self):
        verdict = reconcile(A, {"c": self.rows}, _evidence())
        assert verdict.suspended == ["e2"] and verdict.lost == [] and verdict.ok
        assert verdict.line() == ("2 answered, 0 lost, 0 duplicated, 0 out of order, "
                                  "0 continued, 0 redelivered, 1 suspended")

    def test_without_evidence_it_is_lost(self):
        verdict = reconcile(A, {"c": self.rows})
        assert verdict.lost == ["e2"] and verdict.suspended == [] and not verdict.ok

    def test_a_note_riding_on_it(self):
        transcript = (("user", "one", False), ("assistant", "echo: one", True),
                      ("user", NOTE + "\n\nsleep 2", False))
        verdict = reconcile(A, {"c": self.rows}, _evidence(transcript=transcript))
        assert verdict.suspended == ["e2"]

    def test_suspended_but_not_rotated_yet(self):
        routing = [{"session_key": KEY, "suspended": True,
                    "entry": json.dumps({"session_id": "s3",
                                         "created_at": "1970-01-01T00:02:10+00:00"})}]
        messages = [{"session_id": "s3", "role": "user", "content": "sleep 2",
                     "is_reply": False}]
        evidence = suspension_evidence(
            inbox=[{"event_id": "e2", "session_key": KEY, "consumed_at": 140.0,
                    "consumed_reason": "turn"}],
            sessions=[], routing=routing, messages=messages)
        assert reconcile(A, {"c": self.rows}, evidence).suspended == ["e2"]
        early = suspension_evidence(  # consumed before that session began
            inbox=[{"event_id": "e2", "session_key": KEY, "consumed_at": 120.0,
                    "consumed_reason": "turn"}],
            sessions=[], routing=routing, messages=messages)
        assert reconcile(A, {"c": self.rows}, early).lost == ["e2"]

    def test_a_session_ended_otherwise_is_no_evidence(self):
        verdict = reconcile(A, {"c": self.rows}, _evidence(end_reason="session_reset"))
        assert verdict.lost == ["e2"]

    def test_consumed_outside_the_suspended_session(self):
        for at in (90.0, 250.0):
            assert reconcile(A, {"c": self.rows}, _evidence(consumed_at=at)).lost == ["e2"]

    def test_not_consumed_by_a_turn(self):
        for reason in (None, "failed", "command"):
            assert reconcile(A, {"c": self.rows}, _evidence(reason=reason)).lost == ["e2"]

    def test_a_turn_answered_before_the_suspension_is_not_the_interrupted_one(self):
        transcript = (("user", "sleep 2", False), ("user", "one", False),
                      ("assistant", "echo: one", True), ("user", NOTE, False))
        verdict = reconcile(A, {"c": self.rows}, _evidence(transcript=transcript))
        assert verdict.lost == ["e2"]

    def test_another_text_is_not_it(self):
        transcript = (("user", "one", False), ("assistant", "echo: one", True),
                      ("user", "sleep 3", False))
        assert reconcile(A, {"c": self.rows}, _evidence(transcript=transcript)).lost == ["e2"]

    def test_another_sessions_suspension_is_not_it(self):
        evidence = _evidence(key="agent:main:webhook:dm:other")
        assert reconcile(A, {"c": self.rows}, evidence).lost == ["e2"]

    def test_a_failed_turn_is_not_interrupted(self):
        failed = {"kind": "notice", "in_reply_to": ["e2"],
                  "text": FAILED_NOTICE.format("RuntimeError")}
        rows = [self.rows[0], failed, self.rows[1]]
        assert reconcile(A, {"c": rows}, _evidence()).lost == ["e2"]

    def test_a_message_never_consumed_stays_lost(self):
        verdict = reconcile(A, {"c": [_reply("echo: one", "e1")]}, _evidence())
        assert verdict.suspended == ["e2"] and verdict.lost == ["e3"]
