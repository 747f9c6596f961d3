"""Transcripts: appends in order, the part before a turn, counts, and a turn's reply."""

from __future__ import annotations

import pytest

from .ops import SID, T0, message, session


class TestMessages:
    """Messages come back in order, in the §17.13 shape."""

    def test_append_and_load(self, backend):
        backend.apply([session(), message("q"), message("a", "assistant", ts=T0 + 1,
                                                        tool_name="calc",
                                                        tool_calls=[{"name": "x"}])])
        got = backend.load_messages(SID)
        assert [m["content"] for m in got] == ["q", "a"]
        assert got[1] == {"role": "assistant", "content": "a", "tool_name": "calc",
                          "tool_calls": [{"name": "x"}], "timestamp": T0 + 1}
        assert backend.message_count(SID) == 2
        assert backend.load_messages("20231114_221320_00000009") == []
        assert backend.message_count("20231114_221320_00000009") == 0

    def test_before_a_turn(self, backend):
        backend.apply([session(), message("earlier"), message("q", token="t1"),
                       message("a", "assistant", token="t1", reply=True)])
        assert [m["content"] for m in backend.load_messages(SID, "t1")] == ["earlier"]
        assert len(backend.load_messages(SID, "other")) == 3

    def test_a_text_no_backend_can_store_is_rejected_alone(self, backend):
        # a lone surrogate (half an emoji): refused for what it carries, on every backend,
        # and the backend goes on
        from hermes_actors.errors import StoreRejectedError

        backend.apply([session(), message("before")])
        with pytest.raises(StoreRejectedError):
            backend.apply([message("half \ud83d")])
        backend.apply([message("after")])
        assert [m["content"] for m in backend.load_messages(SID)] == ["before", "after"]

    def test_a_nul_is_stored_and_read_back(self, opened):
        # PostgreSQL text cannot hold a NUL: it keeps U+FFFD in its place; the message is
        # never refused (its turn would fail)
        opened.backend.apply([session(), message("a\x00b")])
        expected = "a\ufffdb" if opened.kind == "postgres" else "a\x00b"
        assert [m["content"] for m in opened.backend.load_messages(SID)] == [expected]

    def test_survive_a_reopen(self, opened):
        opened.backend.apply([session(), message("q")])
        assert [m["content"] for m in opened.reopen().load_messages(SID)] == ["q"]


class TestTurnReplies:
    """A turn's reply is its last reply row, else the transcript's last message when that is
    an assistant answer written after the marker (by that turn or by no turn)."""

    def test_rules(self, backend):
        sids = [f"20231114_221320_0000000{n}" for n in range(6)]
        backend.apply([session(sid, f"k{n}") for n, sid in enumerate(sids)])
        backend.apply([
            message("q", sid=sids[0], token="t0"),
            message("first", "assistant", sid=sids[0], token="t0", reply=True),
            message("final", "assistant", sid=sids[0], token="t0", reply=True),
            message("q", sid=sids[1]),
            message("own row", "assistant", sid=sids[1], ts=T0 + 5),
            message("old", "assistant", sid=sids[2], ts=T0 - 5),
            message("q", sid=sids[3], token="t3"),
            message("calling", "assistant", sid=sids[4], ts=T0 + 5,
                    tool_calls=[{"name": "x"}]),
            message("other turn", "assistant", sid=sids[5], ts=T0 + 5, token="zz"),
        ])
        turns = [(sid, f"t{n}", T0) for n, sid in enumerate(sids)]
        assert backend.turn_replies(turns) == {(sids[0], "t0"): "final",
                                               (sids[1], "t1"): "own row"}
        # without the marker's start only the turn's own reply rows count
        assert backend.turn_replies([(sids[1], "t1", None)]) == {}


class TestTail:
    """``load_tail``: the last messages in order, for ``GET /v1/sessions/<key>``."""

    def test_the_last_messages_in_order(self, backend):
        backend.apply([session(), *(message(f"m{n}", ts=T0 + n) for n in range(7))])
        assert [m["content"] for m in backend.load_tail(SID, 3)] == ["m4", "m5", "m6"]
        assert backend.load_tail(SID, 3) == backend.load_messages(SID)[-3:]
        assert [m["content"] for m in backend.load_tail(SID, 100)] == [
            f"m{n}" for n in range(7)]
        assert backend.load_tail(SID, 0) == []
        assert backend.load_tail("20231114_221320_00000009", 5) == []
