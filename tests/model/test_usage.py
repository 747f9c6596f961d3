"""Token counters of a turn as the store records them (§9): counts only."""

from __future__ import annotations

import pytest

from hermes_actors.model.usage import MAX_TOKENS, TokenUsage, token_usage


def test_counts_are_taken():
    assert token_usage({"prompt_tokens": 7, "input_tokens": 10.0, "output_tokens": " 3 "}) == (
        TokenUsage(7, 10, 3))


@pytest.mark.parametrize("value", ["many", "12k", [3], {"n": 1}, True, -1, 1e30,
                                   float("nan"), MAX_TOKENS + 1, "²", "9" * 5000])
def test_what_is_not_a_count_is_left_out(value):
    usage = token_usage({"prompt_tokens": value, "input_tokens": value, "output_tokens": value})
    assert usage == TokenUsage(None, 0, 0) and usage.empty


@pytest.mark.parametrize("usage", [None, ["a"], "text", 5])
def test_not_a_mapping_is_nothing(usage):
    assert token_usage(usage).empty
