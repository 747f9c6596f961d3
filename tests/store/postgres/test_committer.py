"""The committer's queue is bounded (callers wait briefly, then get ``StoreBusyError``) and
an exit signal ends the committer instead of being swallowed (issue 37 §3)."""

from __future__ import annotations

import threading
import time

import pytest
from gevent import GreenletExit

from hermes_actors.errors import StoreBusyError, StoreError, StoreUnavailableError
from hermes_actors.store.backends.postgres.committer import GroupCommitter


class Gate:
    """An ``apply_group`` that holds every group until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.groups: list[list] = []

    def __call__(self, lists):
        self.entered.set()
        assert self.release.wait(30)
        self.groups.append(lists)
        return [(True, ops) for ops in lists]


def test_a_full_queue_makes_callers_wait_then_refuses_them():
    gate = Gate()
    committer = GroupCommitter(gate, max_queue=2, queue_wait=0.05)
    try:
        committer.post(["held"], lambda ok, value: None)
        assert gate.entered.wait(5)  # the committer holds it: the queue is empty again
        committer.post(["q1"], lambda ok, value: None)
        committer.post(["q2"], lambda ok, value: None)
        began = time.monotonic()
        with pytest.raises(StoreBusyError, match="write queue is full"):
            committer.post(["q3"], lambda ok, value: None)
        assert time.monotonic() - began >= 0.04  # it waited for room first
        with pytest.raises(StoreBusyError):
            committer.run(["q4"])
        assert committer.statistics().waiting == 2
    finally:
        gate.release.set()
        committer.close()
    assert [ops for group in gate.groups for ops in group] == [["held"], ["q1"], ["q2"]]


def test_a_caller_waiting_for_room_gets_in_when_the_queue_drains():
    gate = Gate()
    committer = GroupCommitter(gate, max_queue=1, queue_wait=10)
    try:
        committer.post(["held"], lambda ok, value: None)
        assert gate.entered.wait(5)
        committer.post(["q1"], lambda ok, value: None)
        threading.Timer(0.1, gate.release.set).start()
        assert committer.run(["q2"]) == ["q2"]
    finally:
        gate.release.set()
        committer.close()


def test_busy_is_a_store_error_but_not_an_outage():
    assert issubclass(StoreBusyError, StoreError)
    assert not issubclass(StoreBusyError, StoreUnavailableError)


@pytest.mark.parametrize("signal", [GreenletExit, KeyboardInterrupt, SystemExit])
def test_an_exit_signal_ends_the_committer(signal, monkeypatch):
    ended: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: ended.append(args.exc_value))
    release = threading.Event()
    seen: list = []

    def apply_group(lists):
        assert release.wait(30)
        raise signal()

    committer = GroupCommitter(apply_group)
    committer.post(["first"], lambda ok, value: seen.append((ok, value)))
    committer.post(["second"], lambda ok, value: seen.append((ok, value)))
    release.set()
    committer._thread.join(10)
    assert not committer._thread.is_alive()  # re-raised: the committer really ended
    assert [type(e) for e in ended] == [signal]
    assert [ok for ok, _ in seen] == [False, False]  # nobody waits for ever
    assert all(isinstance(value, StoreUnavailableError) for _, value in seen)
    with pytest.raises(StoreError, match="closed"):
        committer.run(["later"])
    committer.close()


def test_an_ordinary_exception_fails_its_group_only():
    calls = []

    def apply_group(lists):
        calls.append(lists)
        if len(calls) == 1:
            raise RuntimeError("broken group")
        return [(True, ops) for ops in lists]

    committer = GroupCommitter(apply_group)
    try:
        with pytest.raises(RuntimeError):
            committer.run(["a"])
        assert committer.run(["b"]) == ["b"]
    finally:
        committer.close()
