"""The pure recovery decisions of §7: marker verdicts, counters, storms, candidates."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hermes_actors.model.entry import SessionEntry
from hermes_actors.model.events import MessageEvent
from hermes_actors.model.silence import SILENCE_NOTICE
from hermes_actors.model.source import SessionSource
from hermes_actors.runtime.recovery_rules import (
    auto_continue_candidates,
    judge_marker,
    latest_interrupted,
    marker_max_age,
    next_restart_counts,
    plan_startup_dispatch,
    record_boot,
    resume_note,
)

NOW = 1_700_000_000.0
TOKYO = timezone(timedelta(hours=9))
SRC = SessionSource("telegram", chat_id="42")


def entry(key="agent:main:telegram:dm:42", *, started_ago=10.0, tz=timezone.utc,
          internal=False, **kw) -> SessionEntry:
    started = datetime.fromtimestamp(NOW - started_ago, tz=tz) if started_ago is not None else None
    kw.setdefault("origin", SRC)
    return SessionEntry(key, "20231114_221320_abcdef12", active_turn_token="t" if started else None,
                        active_turn_started_at=started, active_turn_internal=internal, **kw)


class TestJudgeMarker:
    """Each durable marker gets exactly one verdict, judged in epoch seconds."""

    def test_no_reply_resumes(self):
        assert judge_marker(entry(), None, NOW, 3600).action == "resume"

    def test_persisted_reply_is_recovered(self):
        v = judge_marker(entry(), "hello", NOW, 3600)
        assert (v.action, v.content, v.kind) == ("deliver", "hello", "recovered")

    def test_silence_on_internal_turn_owes_nothing(self):
        assert judge_marker(entry(internal=True), " no reply. ", NOW, 3600).action == "nothing"

    def test_silence_on_human_turn_becomes_notice(self):
        v = judge_marker(entry(), "[SILENT]", NOW, 3600)
        assert (v.action, v.content, v.kind) == ("deliver", SILENCE_NOTICE, "notice")

    def test_old_marker_expires(self):
        assert judge_marker(entry(started_ago=3601), None, NOW, 3600).action == "expire"

    def test_offset_does_not_change_age(self):
        fresh = entry(started_ago=60, tz=TOKYO)
        assert fresh.active_turn_started_at.utcoffset() == timedelta(hours=9)
        assert judge_marker(fresh, None, NOW, 3600).action == "resume"
        old = entry(started_ago=7200, tz=TOKYO)
        assert judge_marker(old, None, NOW, 3600).action == "expire"

    def test_round_trip_through_dict_keeps_epoch(self):
        e = SessionEntry.from_dict(entry(started_ago=60, tz=TOKYO).to_dict())
        assert judge_marker(e, None, NOW, 3600).action == "resume"

    def test_max_age(self):
        assert marker_max_age(1800) == 3600
        assert marker_max_age(7200) == 14400


class TestCounters:
    """Counters count consecutive mid-turn restarts; idle sessions drop out."""

    def test_increment_and_reset(self):
        assert next_restart_counts({"a": 2, "b": 1}, ["a", "c"]) == {"a": 3, "c": 1}
        assert next_restart_counts({"a": 2}, []) == {}

    def test_a_session_still_waiting_for_its_resume_keeps_its_count(self):
        # "a" was flagged for resume by a boot that crashed before the turn ran again.
        assert next_restart_counts({"a": 2, "b": 1}, ["c"], waiting=["a", "d"]) == {
            "a": 2, "c": 1}
        assert next_restart_counts({"a": 2}, ["a"], waiting=["a"]) == {"a": 3}


class TestInterruptedList:
    """The keys a node's recoveries found mid-turn: each once, the latest ones, bounded."""

    def test_each_key_once_at_its_latest_place(self):
        assert latest_interrupted(("a", "b"), ["b", "c"]) == ("a", "b", "c")
        assert latest_interrupted(("a", "b", "c"), ["a"]) == ("b", "c", "a")

    def test_shard_recoveries_over_a_long_life_stay_bounded(self):
        keys: tuple[str, ...] = ()
        for n in range(50):
            keys = latest_interrupted(keys, [f"k{n}", "again"], limit=10)
        assert len(keys) == 10 and keys[-2:] == ("k49", "again")


class TestStorm:
    """Three boots with candidates within the window is a storm; old boots are pruned."""

    def test_storm(self):
        boots, storm = record_boot([NOW - 100, NOW - 30, NOW - 10], NOW, 60, 3)
        assert boots == [NOW - 30, NOW - 10, NOW] and storm is True

    def test_no_storm(self):
        boots, storm = record_boot([NOW - 100], NOW, 60, 3)
        assert boots == [NOW] and storm is False


class TestCandidates:
    """Only fresh, reachable, unsuspended sessions with an auto-resume reason continue."""

    def base(self, **kw):
        marked = datetime.fromtimestamp(NOW - 10, tz=timezone.utc)
        fields = dict(resume_pending=True, resume_reason="restart_interrupted",
                      last_resume_marked_at=marked)
        fields.update(kw)
        return entry(started_ago=None, **fields)

    def pick(self, *entries, can_send=lambda p: True):
        return auto_continue_candidates(entries, NOW, 3600, can_send)

    def test_selected(self):
        assert len(self.pick(self.base())) == 1

    def test_excluded(self):
        stale = datetime.fromtimestamp(NOW - 4000, tz=timezone.utc)
        assert self.pick(self.base(suspended=True)) == []
        assert self.pick(self.base(resume_reason="manual")) == []
        assert self.pick(self.base(last_resume_marked_at=stale)) == []
        assert self.pick(self.base(), can_send=lambda p: False) == []
        assert self.pick(self.base(origin=None)) == []


class TestStartupDispatch:
    """Wake-ups go first; a waiting human message carries the note instead of a wake-up."""

    def test_note_rides_on_waiting_message(self):
        resumable = TestCandidates().base()
        waiting = MessageEvent(source=SRC, text="are you there?")
        events, resumed = plan_startup_dispatch([resumable], [(resumable.session_key, waiting)])
        assert resumed == [resumable.session_key]
        assert len(events) == 1
        assert events[0][1].metadata["recovery_note"] == resume_note("restart_interrupted")
        assert events[0][1].metadata["replayed"] is True

    def test_wakeup_synthesized_first(self):
        resumable = TestCandidates().base(resume_reason="shutdown_timeout")
        other = MessageEvent(source=SessionSource("telegram", chat_id="9"), text="x")
        events, _ = plan_startup_dispatch([resumable], [("agent:main:telegram:dm:9", other)])
        assert [e.internal for _, e in events] == [True, False]
        assert events[0][1].text == ""
        assert "gateway shutdown" in events[0][1].metadata["recovery_note"]
        assert "gateway restart" in resume_note("restart_timeout")

    def test_note_rides_on_a_held_message_which_is_not_replayed(self):
        resumable = TestCandidates().base()
        replayed = MessageEvent(source=SessionSource("telegram", chat_id="9"), text="old")
        held = MessageEvent(source=SRC, text="sent during recovery")
        events, resumed = plan_startup_dispatch(
            [resumable], [("agent:main:telegram:dm:9", replayed)],
            [(resumable.session_key, held)])
        assert resumed == [resumable.session_key]
        assert [e.text for _, e in events] == ["old", "sent during recovery"]  # no wake-up
        assert events[1][1].metadata["recovery_note"] == resume_note("restart_interrupted")
        assert "replayed" not in events[1][1].metadata  # it may interrupt, as it came live
        assert events[0][1].metadata["replayed"] is True
