"""``Errands``: an actor's slow effects, run in order by one worker, off its mailbox."""

from __future__ import annotations

import pytest

from hermes_actors.runtime.errands import Errands


@pytest.fixture
def errands():
    e = Errands()
    yield e
    e.stop()


def test_errands_run_in_the_order_handed_over(errands):
    ran = []
    for n in range(5):
        errands.run(lambda n=n: ran.append(n))
    errands.settled().get(timeout=5)
    assert ran == [0, 1, 2, 3, 4]


def test_errands_handed_over_together_go_when_the_block_ends(errands):
    ran = []
    errands.run(lambda: ran.append("before"))
    with errands:
        errands.run(lambda: ran.append("a"))
        with errands:  # nested: the outer block sends
            errands.run(lambda: ran.append("b"))
        errands.run(lambda: ran.append("c"))
        errands.settled().get(timeout=5)  # the worker has had everything handed over so far
        assert ran == ["before"], "nothing of the block is handed over before it ends"
    errands.run(lambda: ran.append("after"))
    errands.settled().get(timeout=5)
    assert ran == ["before", "a", "b", "c", "after"]


def test_a_block_that_raises_still_hands_its_errands_over(errands):
    ran = []
    with pytest.raises(RuntimeError), errands:
        errands.run(lambda: ran.append("kept"))
        raise RuntimeError("the caller's failure")
    errands.settled().get(timeout=5)
    assert ran == ["kept"]
