"""Silence markers (the agent's "no reply")."""

from __future__ import annotations

import pytest

from hermes_actors.model.silence import SILENCE_NOTICE, is_silence_marker


class TestIsSilenceMarker:
    """Only a bare marker is silence; case, spacing and edge punctuation do not matter."""

    @pytest.mark.parametrize("text", ["[SILENT]", "SILENT", "NO_REPLY", "NO REPLY"])
    def test_the_markers(self, text):
        assert is_silence_marker(text)

    @pytest.mark.parametrize(
        "text",
        [
            "[silent]",
            "Silent",
            "no_reply",
            "No Reply",
            "  NO_REPLY\n",
            "NO   REPLY",
            "NO\nREPLY",
            "**NO_REPLY**",
            "`[SILENT]`",
            "no reply.",
            "[ SILENT ]",
            "(silent)!",
            "SILENT…",
            "「NO_REPLY」",
            "\tsilent\t",
        ],
    )
    def test_dressed_up_markers(self, text):
        assert is_silence_marker(text)

    @pytest.mark.parametrize(
        "text",
        [
            "I will stay SILENT",
            "NO_REPLY needed? Actually here is the answer.",
            "[SILENT] but also this",
            "SILENTLY",
            "NOREPLY",
            "NO-REPLY",
            "no_reply_please",
            "[SILENT] [SILENT]",
            "quiet",
            "...",
        ],
    )
    def test_anything_more_is_a_real_reply(self, text):
        assert not is_silence_marker(text)

    @pytest.mark.parametrize("text", [None, "", "   ", "\n"])
    def test_empty_is_not_silence(self, text):
        assert is_silence_marker(text) is False

    def test_notice_text(self):
        assert SILENCE_NOTICE == "The agent chose not to reply."


@pytest.mark.parametrize("text", [
    "[SILENT]", "ſilent", "no\u00a0reply", "NO\u2003REPLY", "ＳＩＬＥＮＴ", "ß SILENT ß",
    "«silent»", "no reply!!", "reply", "silent night", "The agent is SILENT", "x" * 500,
    "*" * 40 + "no_reply" + "*" * 40, "\u200bSILENT\u200b",
])
def test_the_quick_rejection_agrees_with_the_whole_check(text):
    """A text is a marker exactly when its normalised form is one: the test on the upper
    case (the fast path) never rejects a marker."""
    from hermes_actors.model.silence import SILENCE_MARKERS, _normalise

    assert is_silence_marker(text) == (_normalise(text) in SILENCE_MARKERS)
