"""The reconciliation of accepted messages against the outgoing messages by event id, and
the database's evidence on unanswered ones (pure functions, rows built by hand)."""

from __future__ import annotations

import json

from hermes_actors.runtime.delivery import RECOVERED_PREFIX
from hermes_actors.runtime.recovery_rules import resume_note
from hermes_actors.runtime.turn import FAILED_NOTICE
from hermes_actors.testing.reconcile import (
    Accepted,
    Answer,
    is_final,
    names_some_event,
    reconcile,
    suspension_evidence,
)


def _reply(text: str, *ids: str, kind: str = "reply", **extra: object) -> dict:
    return {"kind": kind, "text": text, "in_reply_to": list(ids), **extra}


def _ack(text: str, *ids: str) -> dict:
    return _reply(text, *ids, kind="ack")


A = [Accepted("e1", "c", "one"), Accepted("e2", "c", "sleep 2"), Accepted("e3", "c", "three")]
ANSWERED = [_reply("echo: one", "e1"), _reply("slept 2", "e2"), _reply("echo: three", "e3")]


class TestFinal:
    """Which rows end what they answer."""

    def test_kinds(self):
        assert is_final({"kind": "reply"}) and is_final({"kind": "recovered"})
        assert is_final({"kind": "notice"}) and not is_final({"kind": "ack"})

    def test_the_flag_wins(self):
        assert not is_final({"kind": "notice", "final": False})
        assert is_final({"kind": "ack", "final": True})
        assert not is_final({"kind": "reply", "final": 0})  # a store's boolean


class TestVerdict:
    """Lost, duplicated and unnamed, by event id only."""

    def test_every_message_answered_once(self):
        verdict = reconcile(A, {"c": ANSWERED})
        assert verdict.ok and verdict.answered == 3 and verdict.accepted == 3
        assert verdict.line().startswith("3 accepted, 3 answered: 0 lost, 0 duplicated, "
                                         "0 unnamed")

    def test_the_store_shape_of_in_reply_to(self):
        rows = [{"kind": "reply", "text": "echo: one\necho: three", "in_reply_to": "e1 e3"},
                {"kind": "reply", "text": "slept 2", "in_reply_to": "e2"}]
        verdict = reconcile(A, {"c": rows})
        assert verdict.lost == [] and verdict.answered == 3
        assert verdict.out_of_order == ["c"]  # e2 answered after e3

    def test_lost(self):
        verdict = reconcile(A, {"c": [_reply("echo: one", "e1")]})
        assert verdict.lost == ["e2", "e3"] and not verdict.ok
        assert "2 lost, 0 duplicated, 0 unnamed" in verdict.line()

    def test_texts_answer_nothing(self):
        # the old heuristics: a continuation naming an internal event, by its text
        rows = [_reply("echo: one", "e1"), _reply("resumed: sleep 2", "w1"),
                _reply("echo: three", "e3")]
        verdict = reconcile(A, {"c": rows})
        assert verdict.lost == ["e2"] and len(verdict.unnamed) == 1
        assert verdict.unnamed[0]["in_reply_to"] == ["w1"]

    def test_duplicated_by_two_finals(self):
        rows = [*ANSWERED, _reply("slept 2 again", "e2")]
        verdict = reconcile(A, {"c": rows})
        assert verdict.duplicated == {"e2": 2} and verdict.answered == 2
        assert verdict.duplicates == 1 and not verdict.ok
        assert "0 lost, 1 duplicated, 0 unnamed" in verdict.line()

    def test_a_failure_notice_and_a_reply_are_two_finals(self):
        failed = _reply(FAILED_NOTICE.format("RuntimeError"), "e2", kind="notice")
        verdict = reconcile(A, {"c": [*ANSWERED, failed]})
        assert verdict.duplicated == {"e2": 2}

    def test_a_merged_answer_and_a_reply_of_its_own(self):
        rows = [_reply("echo: one", "e1"), _reply("slept 2\necho: three", "e2", "e3"),
                _reply("echo: three", "e3")]
        assert reconcile(A, {"c": rows}).duplicated == {"e3": 2}

    def test_the_same_text_twice(self):
        rows = [*ANSWERED, _reply("echo: three", "e3")]
        verdict = reconcile(A, {"c": rows})
        assert verdict.duplicated == {"e3": 2}
        assert verdict.repeated == [Answer("c", "echo: three", ("e3",), 2)]
        assert verdict.duplicates == 1  # one duplication, seen both ways

    def test_the_same_unnamed_text_twice_is_a_duplicate_too(self):
        rows = [*ANSWERED, _reply("hello", "w1"), _reply(RECOVERED_PREFIX + "hello", "w1")]
        verdict = reconcile(A, {"c": rows})
        assert verdict.duplicated == {} and verdict.duplicates == 1
        assert len(verdict.unnamed) == 2
        assert "0 lost, 1 duplicated, 2 unnamed" in verdict.line()

    def test_the_same_text_in_another_chat_or_for_other_ids_is_not(self):
        sent = [*A, Accepted("e4", "d", "one"), Accepted("e5", "c", "one")]
        rows = {"c": [*ANSWERED, _reply("echo: one", "e5")], "d": [_reply("echo: one", "e4")]}
        verdict = reconcile(sent, rows)
        assert verdict.ok and verdict.repeated == [] and verdict.answered == 5

    def test_the_recovered_prefix_is_stripped(self):
        rows = [*ANSWERED, _reply(RECOVERED_PREFIX + "echo: three", "e3", kind="recovered")]
        verdict = reconcile(A, {"c": rows})
        assert verdict.duplicated == {"e3": 2}
        assert verdict.repeated == [Answer("c", "echo: three", ("e3",), 2)]
        assert verdict.redelivered == ["e3"]

    def test_a_recovered_reply_alone_is_the_one_final(self):
        rows = [*ANSWERED[:2], _reply(RECOVERED_PREFIX + "echo: three", "e3", kind="recovered")]
        verdict = reconcile(A, {"c": rows})
        assert verdict.ok and verdict.redelivered == ["e3"]

    def test_unnamed(self):
        rows = [*ANSWERED, _reply("a notice to nobody"), _reply("echo: hi", "w9")]
        verdict = reconcile(A, {"c": rows})
        assert [r["text"] for r in verdict.unnamed] == ["a notice to nobody", "echo: hi"]
        assert not verdict.ok and "0 lost, 0 duplicated, 2 unnamed" in verdict.line()

    def test_unnamed_rows_the_scenario_expects(self):
        rows = [*ANSWERED, _reply("a notice to nobody"), _reply("echo: hi", "w9")]
        verdict = reconcile(A, {"c": rows}, expected_unnamed=names_some_event)
        assert [r["text"] for r in verdict.unnamed] == ["a notice to nobody"]

    def test_unnamed_in_a_chat_nothing_was_sent_to(self):
        verdict = reconcile(A, {"c": ANSWERED, "x": [_reply("stray")]})
        assert len(verdict.unnamed) == 1

    def test_acks_are_not_final(self):
        rows = [_reply("echo: one", "e1"), _ack("Queued for the next turn.", "e2"),
                _ack("⚡ Interrupting the current turn.", "e3")]
        verdict = reconcile(A, {"c": rows})
        assert verdict.lost == ["e2", "e3"] and verdict.acks == 2
        assert verdict.unnamed == []

    def test_acks_and_their_answers(self):
        rows = [_reply("echo: one", "e1"), _ack("Queued for the next turn.", "e2"),
                _ack("Queued for the next turn.", "e3"), *ANSWERED[1:]]
        verdict = reconcile(A, {"c": rows})
        assert verdict.ok and verdict.acks == 2 and verdict.repeated == []

    def test_a_notice_flagged_not_final(self):
        rows = [*ANSWERED[:2], _reply("Queued for the next turn.", "e3", kind="notice",
                                      final=False)]
        assert reconcile(A, {"c": rows}).lost == ["e3"]

    def test_a_notice_is_a_final_answer(self):
        rows = [*ANSWERED[:2], _reply("Session status: ...", "e3", kind="notice")]
        assert reconcile(A, {"c": rows}).ok

    def test_duplicate_posts_are_one_message(self):
        # a retried POST answered 200 {"duplicate": true} with the first one's id
        sent = [*A, Accepted("e2", "c", "sleep 2")]
        verdict = reconcile(sent, {"c": ANSWERED})
        assert verdict.ok and verdict.accepted == 3 and verdict.answered == 3
        assert verdict.duplicate_posts == 1
        assert reconcile(sent, {"c": ANSWERED[:2]}).lost == ["e3"]

    def test_out_of_order(self):
        rows = [ANSWERED[2], ANSWERED[0], ANSWERED[1]]
        verdict = reconcile(A, {"c": rows})
        assert verdict.out_of_order == ["c"] and not verdict.ok
        assert verdict.lost == [] and verdict.duplicates == 0

    def test_misrouted(self):
        verdict = reconcile(A, {"c": ANSWERED[:2], "d": ANSWERED[2:]})
        assert verdict.misrouted == ["e3"] and verdict.lost == [] and not verdict.ok

    def test_continued_is_a_label(self):
        note = resume_note("restart_interrupted")
        rows = [_reply("echo: one", "e1"), _reply(f"resumed: {note}\n\nthree", "e2", "e3")]
        verdict = reconcile(A, {"c": rows})
        assert verdict.ok and verdict.continued == ["e2", "e3"]


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
    """A message no final names counts as suspended only on the database's evidence that
    its session was suspended while it was the interrupted turn; else it stays lost."""

    rows = [_reply("echo: one", "e1"), _reply("echo: three", "e3")]

    def test_the_interrupted_turn_of_a_suspended_session(self):
        verdict = reconcile(A, {"c": self.rows}, _evidence())
        assert verdict.suspended == ["e2"] and verdict.lost == [] and verdict.ok
        assert "0 lost, 0 duplicated, 0 unnamed" in verdict.line()
        assert "1 suspended" in verdict.line()

    def test_a_suspension_notice_naming_it_answers_it(self):
        notice = _reply("Session suspended ...", "e2", kind="notice")
        verdict = reconcile(A, {"c": [self.rows[0], notice, self.rows[1]]}, _evidence())
        assert verdict.ok and verdict.suspended == [] and verdict.answered == 3

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

    def test_a_message_never_consumed_stays_lost(self):
        verdict = reconcile(A, {"c": [_reply("echo: one", "e1")]}, _evidence())
        assert verdict.suspended == ["e2"] and verdict.lost == ["e3"]

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
