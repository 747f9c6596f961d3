"""``hermes_actors.testing.wait_until``: the one polling helper of the suite."""

from __future__ import annotations

import pytest

from hermes_actors.testing import FakeClock, wait_until


def test_returns_the_first_truthy_value_without_sleeping():
    clock = FakeClock()
    assert wait_until(lambda: [1], sleep=clock.sleep) == [1]
    assert clock.slept == []


def test_asks_again_every_interval_until_it_holds():
    answers = iter([0, None, "", "done"])
    clock = FakeClock()
    assert wait_until(lambda: next(answers), interval=0.25, sleep=clock.sleep) == "done"
    assert clock.slept == [0.25, 0.25, 0.25]


def test_past_the_timeout_it_fails_with_one_line_naming_what_was_awaited():
    asked = []

    def never() -> bool:
        asked.append(1)
        return False

    with pytest.raises(AssertionError) as failure:
        wait_until(never, timeout=0.05, interval=0.01, message="the reply")
    assert str(failure.value) == "the reply did not hold within 0.05s"
    assert len(asked) >= 2  # asked once more at the deadline


def test_an_exception_of_the_predicate_is_not_swallowed():
    def broken() -> bool:
        raise KeyError("gone")

    with pytest.raises(KeyError):
        wait_until(broken, timeout=5)
