"""The reconciliation of acknowledged messages against the outbox, and the database's
evidence on unanswered ones (pure functions)."""

from __future__ import annotations

import json

from hermes_actors.agents.base import TurnRequest
from hermes_actors.agents.scripted import ScriptedAgent
from hermes_actors.runtime.delivery import RECOVERED_PREFIX
from hermes_actors.runtime.recovery_rules import resume_note
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

    def test_a_recovered_row_answers_and_its_copy_is_counted_apart(self):
        # the sweep sends an answer again after an uncertain attempt as kind "recovered"
        copy = {**_reply(RECOVERED_PREFIX + "echo: one", "e1"), "kind": "recovered"}
        verdict = reconcile(A[:1], {"c": [copy]})  # (the outbox: the first never landed)
        assert verdict.ok and verdict.answered == 1 and verdict.lost == []
        verdict = reconcile(A[:1], {"c": [_reply("echo: one", "e1"), copy]})  # (Telegram)
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


def _continue(history: list[tuple[str, str]], waiting: str | None = None) -> str:
    """What the scripted agent answers an auto-continue turn whose session's transcript
    holds the user messages ``history`` (the last one: the interrupted turn's), with the
    note riding on ``waiting`` when a message was waiting (§7 step 6)."""
    note = resume_note("restart_interrupted")
    message = f"{note}\n\n{waiting}" if waiting else note
    request = TurnRequest(session_key=KEY, session_id="s1", message=message,
                          history=[{"role": r, "content": c} for r, c in history],
                          internal=waiting is None)
    reply = ScriptedAgent().run_turn(request).reply
    assert reply is not None
    return reply


class TestContinuationChains:
    """A continuation interrupted in its turn and continued again: the scripted agent
    answers ``resumed: <the interrupted continuation's message>``, i.e. the note (and the
    message it rode on); the chain answers its first message and every one it carried."""

    NOTE = resume_note("restart_interrupted")

    sent = [Accepted("e1", "c", "one"), Accepted("e2", "c", "sleep 5"),
            Accepted("e3", "c", "m3"), Accepted("e4", "c", "m4")]

    def test_a_continuation_that_rode_on_a_message_is_continued_again(self):
        # 'sleep 5' interrupted (crash); next boot the note rides on the waiting 'm3',
        # interrupted too (crash); the next boot continues that turn: nothing waits
        reply = _continue([("user", "one"), ("assistant", "echo: one"), ("user", "sleep 5"),
                           ("user", self.NOTE + "\n\nm3")])
        assert reply == "resumed: " + self.NOTE + "\n\nm3"
        rows = [_reply("echo: one", "e1"), _reply(reply, "w3"), _reply("echo: m4", "e4")]
        verdict = reconcile(self.sent, {"c": rows})
        assert verdict.lost == [] and verdict.ok, verdict.line()
        assert sorted(verdict.continued) == ["e2", "e3"] and verdict.answered == 4

    def test_a_bare_continuation_continued_again(self):
        reply = _continue([("user", "one"), ("assistant", "echo: one"), ("user", "sleep 5"),
                           ("user", self.NOTE)])
        rows = [_reply("echo: one", "e1"), _reply(reply, "w3"), _reply("echo: m3", "e3"),
                _reply("echo: m4", "e4")]
        verdict = reconcile(self.sent, {"c": rows})
        assert verdict.ok and verdict.continued == ["e2"], verdict.line()

    def test_the_chain_continued_with_another_message_riding(self):
        reply = _continue([("user", "one"), ("assistant", "echo: one"), ("user", "sleep 5"),
                           ("user", self.NOTE + "\n\nm3")], waiting="m4")
        assert reply.endswith("\n\nm3\necho: m4")
        rows = [_reply("echo: one", "e1"), _reply(reply, "e4")]
        verdict = reconcile(self.sent, {"c": rows})
        assert verdict.ok and sorted(verdict.continued) == ["e2", "e3"], verdict.line()

    def test_a_real_loss_before_the_chain_stays_lost(self):
        reply = _continue([("user", "sleep 5"), ("user", self.NOTE)])
        rows = [_reply(reply, "w2"), _reply("echo: m3", "e3"), _reply("echo: m4", "e4")]
        verdict = reconcile(self.sent, {"c": rows})  # 'one' was never answered
        assert verdict.lost == ["e1"] and verdict.continued == ["e2"], verdict.line()

    def test_a_chain_continuing_an_answered_message_is_a_duplicate(self):
        reply = _continue([("user", "sleep 5"), ("user", self.NOTE)])
        rows = [_reply("echo: one", "e1"), _reply("slept 5", "e2"), _reply(reply, "w2"),
                _reply("echo: m3", "e3"), _reply("echo: m4", "e4")]
        verdict = reconcile(self.sent, {"c": rows})
        assert verdict.duplicated == {"e2": 2} and not verdict.ok, verdict.line()

    def test_a_redelivered_chain_answers_what_the_chain_answered(self):
        reply = _continue([("user", "sleep 5"), ("user", self.NOTE)])
        sent = [Accepted("e2", "c", "sleep 5"), Accepted("e3", "c", "m3"),
                Accepted("e4", "c", "m4"), Accepted("e5", "c", "m5")]
        rows = [_reply(reply, "w2"), _reply("echo: m3", "e3"),
                _reply(RECOVERED_PREFIX + reply, "w2"),
                _reply("echo: m5", "e5")]  # 'm4' was never answered
        verdict = reconcile(sent, {"c": rows})
        assert verdict.lost == ["e4"] and verdict.redelivered == ["e2"], verdict.line()
        rows[2] = rows[0]  # the chain sent twice
        assert reconcile(sent, {"c": rows}).duplicated == {"e2": 2}


class TestMergedContinuations:
    """Follow-ups merged into one turn (``busy_input_mode: interrupt``, or messages replayed
    after a restart) are one user message, their texts a line each: a continuation of that
    turn answers every one of them."""

    sent = [Accepted("e1", "c", "one"), Accepted("e2", "c", "sleep 5"),
            Accepted("e3", "c", "sleep 6"), Accepted("e4", "c", "m4")]

    def test_a_merged_turn_continued(self):
        reply = _continue([("user", "one"), ("assistant", "echo: one"),
                           ("user", "sleep 5\nsleep 6")])
        assert reply == "resumed: sleep 5\nsleep 6"
        rows = [_reply("echo: one", "e1"), _reply(reply, "w1"), _reply("echo: m4", "e4")]
        verdict = reconcile(self.sent, {"c": rows})
        assert verdict.ok and verdict.continued == ["e2", "e3"], verdict.line()

    def test_a_merged_turn_continued_with_a_message_riding(self):
        reply = _continue([("user", "one"), ("assistant", "echo: one"),
                           ("user", "sleep 5\nsleep 6")], waiting="m4")
        rows = [_reply("echo: one", "e1"), _reply(reply, "e4")]
        verdict = reconcile(self.sent, {"c": rows})
        assert verdict.ok and verdict.continued == ["e2", "e3"], verdict.line()

    def test_a_continuation_that_rode_on_merged_messages_continued_again(self):
        note = resume_note("restart_interrupted")
        reply = _continue([("user", "one"), ("assistant", "echo: one"), ("user", "sleep 4"),
                           ("user", note + "\n\nsleep 5\nsleep 6")])
        sent = [*self.sent[:1], Accepted("e0", "c", "sleep 4"), *self.sent[1:]]
        rows = [_reply("echo: one", "e1"), _reply(reply, "w1"), _reply("echo: m4", "e4")]
        verdict = reconcile(sent, {"c": rows})
        assert verdict.ok and sorted(verdict.continued) == ["e0", "e2", "e3"], verdict.line()

    def test_merged_messages_of_a_suspended_turn_are_suspended(self):
        sent = [Accepted("e1", "c", "one"), Accepted("e2", "c", "sleep 2"),
                Accepted("e3", "c", "sleep 3")]
        inbox = [{"event_id": e, "session_key": KEY, "consumed_at": at,
                  "consumed_reason": "turn"}
                 for e, at in (("e1", 120.0), ("e2", 150.0), ("e3", 150.0))]
        sessions = [{"id": "s1", "session_key": KEY, "started_at": 100.0,
                     "ended_at": 200.0, "end_reason": "suspended"}]
        for merged in ("sleep 2\nsleep 3", NOTE + "\n\nsleep 2\nsleep 3"):
            messages = [{"session_id": "s1", "role": r, "content": c, "is_reply": y}
                        for r, c, y in (("user", "one", False),
                                        ("assistant", "echo: one", True),
                                        ("user", merged, False))]
            evidence = suspension_evidence(inbox=inbox, sessions=sessions, routing=[],
                                           messages=messages)
            verdict = reconcile(sent, {"c": [_reply("echo: one", "e1")]}, evidence)
            assert verdict.suspended == ["e2", "e3"] and verdict.lost == [], merged
