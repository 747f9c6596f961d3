"""``CommandAgent`` against real programs: the JSON protocol, failures, timeouts, interrupts."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from hermes_actors.agents.base import Agent, TurnResult
from hermes_actors.agents.command import (
    CommandAgent,
    CommandAgentError,
    CommandAgentTimeout,
    decode_reply,
)

from .conftest import make_request
from .programs import argv


def assert_gone(pid: int, timeout: float = 5.0) -> None:
    """``pid`` has exited: reaped, or a zombie waiting for init (its parent died first)."""
    deadline = time.monotonic() + timeout
    try:
        proc = psutil.Process(pid)
        while proc.status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, f"pid {pid} is still running"
            try:
                proc.wait(0.05)
                return
            except psutil.TimeoutExpired:
                pass
    except psutil.NoSuchProcess:
        return


def our_children() -> set[int]:
    """Pids of this process's children, zombies included."""
    return {child.pid for child in psutil.Process().children()}


class TestProtocol:
    """A program reads the request as JSON on stdin and its stdout becomes the reply."""

    def test_is_an_agent(self, programs):
        """CommandAgent satisfies the Agent protocol."""
        assert isinstance(CommandAgent(argv(programs, "print", "x"), timeout=5), Agent)

    def test_request_round_trip(self, programs):
        """Every request field, history and non-ASCII text included, reaches the program."""
        history = [{"role": "user", "content": "earlier ✓", "timestamp": 1.5},
                   {"role": "assistant", "content": "answer"}]
        request = make_request("héllo", history=history, internal=True,
                               media_urls=("https://x/1.png",))
        result = CommandAgent(argv(programs, "echo_request"), timeout=10).run_turn(request)
        assert json.loads(result.reply) == {
            "session_key": request.session_key,
            "session_id": request.session_id,
            "message": "héllo",
            "history": history,
            "system_prompt": "You are a test.",
            "internal": True,
            "media_urls": ["https://x/1.png"],
        }
        assert result.status == "completed"
        assert result.usage == {"input_tokens": 5, "output_tokens": 2, "prompt_tokens": 5}

    def test_plain_text_stdout_is_the_reply(self, programs):
        """Stdout that is not a JSON object is the reply text, trailing whitespace removed."""
        agent = CommandAgent(argv(programs, "print", "plain words\nsecond line\n\n"), timeout=10)
        assert agent.run_turn(make_request()) == TurnResult("plain words\nsecond line")

    def test_status_passes_through(self, programs):
        """A reply record's status and a null reply are returned as they are."""
        record = json.dumps({"reply": None, "status": "partial"})
        agent = CommandAgent(argv(programs, "print", record), timeout=10)
        assert agent.run_turn(make_request()) == TurnResult(None, "partial")

    def test_bad_record_raises(self, programs):
        """A reply record with a non-text reply is a protocol error."""
        agent = CommandAgent(argv(programs, "print", '{"reply": 5}'), timeout=10)
        with pytest.raises(CommandAgentError, match="string or null"):
            agent.run_turn(make_request())


class TestDecodeReply:
    """Stdout decoding: JSON objects are records, everything else is text."""

    @pytest.mark.parametrize(("stdout", "expected"), [
        ("", TurnResult(None)),
        ("  \n", TurnResult(None)),
        ('"quoted"', TurnResult('"quoted"')),
        ("[1, 2]", TurnResult("[1, 2]")),
        ("{not json", TurnResult("{not json")),
        ('{"reply": "hi", "usage": {"output_tokens": 1}}',
         TurnResult("hi", "completed", {"output_tokens": 1})),
    ])
    def test_decodes(self, stdout, expected):
        """Each stdout shape maps to its documented result."""
        assert decode_reply(stdout) == expected

    @pytest.mark.parametrize(("stdout", "match"), [
        ('{"answer": "hi"}', "without a 'reply'"),
        ('{"reply": "hi", "status": "done"}', "status must be one of"),
        ('{"reply": "hi", "usage": [1]}', "usage must be"),
    ])
    def test_rejects(self, stdout, match):
        """A JSON object that breaks the record rules raises CommandAgentError."""
        with pytest.raises(CommandAgentError, match=match):
            decode_reply(stdout)


class TestFailures:
    """A program that cannot start or exits non-zero fails the turn with a clear error."""

    def test_nonzero_exit_raises_with_stderr(self, programs, caplog):
        """Exit status and stderr appear in the exception and in the log."""
        agent = CommandAgent(argv(programs, "fail", "boom: the model is on fire\n", 3),
                             timeout=10)
        with caplog.at_level(logging.WARNING, logger="hermes_actors.agents.command"):
            with pytest.raises(CommandAgentError, match="status 3.*model is on fire"):
                agent.run_turn(make_request())
        assert "the model is on fire" in caplog.text

    def test_missing_program_raises(self, tmp_path):
        """A program that does not exist is a CommandAgentError naming it."""
        agent = CommandAgent([str(tmp_path / "no-such-agent")], timeout=5)
        with pytest.raises(CommandAgentError, match="cannot start agent command"):
            agent.run_turn(make_request())

    def test_timeout_stops_the_program(self, programs, started):
        """A program running past the timeout is killed and reaped, and the turn raises."""
        agent = CommandAgent(argv(programs, "block", started.port, "plain"), timeout=0.5)
        before = our_children()
        t0 = time.monotonic()
        with pytest.raises(CommandAgentTimeout, match="agent.timeout"):
            agent.run_turn(make_request())
        assert time.monotonic() - t0 < 5
        assert our_children() <= before


class TestInterrupt:
    """``interrupt`` from another thread ends the running program and the turn promptly."""

    def test_interrupt_returns_interrupted(self, programs, started, worker):
        """The blocked program gets SIGTERM, is reaped, and run_turn returns interrupted."""
        agent = CommandAgent(argv(programs, "block", started.port, "plain"), timeout=60)
        future = worker.submit(agent.run_turn, make_request())
        pid, _ = started.wait()
        t0 = time.monotonic()
        agent.interrupt("/stop")
        assert future.result(timeout=10) == TurnResult(None, "interrupted")
        assert time.monotonic() - t0 < 2
        assert pid not in our_children()
        assert_gone(pid)

    def test_sigterm_ignored_escalates_to_sigkill(self, programs, started, worker):
        """A program that ignores SIGTERM is killed after the grace period."""
        agent = CommandAgent(argv(programs, "block", started.port, "ignore-term"),
                             timeout=60, grace=0.3)
        future = worker.submit(agent.run_turn, make_request())
        pid, _ = started.wait()
        agent.interrupt()
        assert future.result(timeout=10) == TurnResult(None, "interrupted")
        assert pid not in our_children()
        assert_gone(pid)

    def test_whole_process_group_is_stopped(self, programs, started, worker):
        """A grandchild the program started is stopped with it."""
        agent = CommandAgent(argv(programs, "block", started.port, "grandchild"), timeout=60)
        future = worker.submit(agent.run_turn, make_request())
        pid, grandchild = started.wait()
        assert grandchild
        agent.interrupt()
        assert future.result(timeout=10) == TurnResult(None, "interrupted")
        assert_gone(pid)
        assert_gone(grandchild)

    def test_close_kills_a_running_program(self, programs, started, worker):
        """``close`` kills the running program at once and its turn ends interrupted."""
        agent = CommandAgent(argv(programs, "block", started.port, "ignore-term"), timeout=60)
        future = worker.submit(agent.run_turn, make_request())
        pid, _ = started.wait()
        agent.close()
        assert future.result(timeout=10) == TurnResult(None, "interrupted")
        assert_gone(pid)

    @pytest.mark.parametrize("stop", ["interrupt", "close"])
    def test_stray_helper_is_killed(self, programs, started, worker, stop):
        """A helper in the group that ignores SIGTERM is SIGKILLed: after the grace period
        for an interrupt (though the program itself died of the SIGTERM and was reaped), at
        once by ``close``."""
        # (an interrupt with a short grace; close with the default one, which it does not use)
        grace = {"grace": 0.3} if stop == "interrupt" else {}
        agent = CommandAgent(argv(programs, "block", started.port, "stray"), timeout=60,
                             **grace)
        future = worker.submit(agent.run_turn, make_request())
        pid, helper = started.wait()
        agent.interrupt("/stop") if stop == "interrupt" else agent.close()
        assert future.result(timeout=10) == TurnResult(None, "interrupted")
        assert_gone(pid)
        assert_gone(helper)

    def test_stray_helper_is_killed_after_a_timeout(self, programs, started):
        """The same after agent.timeout: the group is SIGKILLed after the grace period."""
        agent = CommandAgent(argv(programs, "block", started.port, "stray"),
                             timeout=1, grace=0.3)
        with ThreadPoolExecutor(1) as pool:
            reported = pool.submit(started.wait)
            with pytest.raises(CommandAgentTimeout):
                agent.run_turn(make_request())
            _, helper = reported.result(timeout=10)
        assert_gone(helper)

    def test_a_helper_left_holding_the_output_does_not_hold_up_the_reply(
            self, programs, started, worker):
        """A program that answered and exited 0 while a helper it started still holds its
        stdout is answered after the grace period (the helper is stopped), not when
        agent.timeout runs out."""
        agent = CommandAgent(argv(programs, "leave_helper", started.port, "done"),
                             timeout=60, grace=0.3)
        future = worker.submit(agent.run_turn, make_request())
        _, helper = started.wait()
        try:
            assert future.result(timeout=10) == TurnResult("done")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(helper, signal.SIGKILL)
        assert_gone(helper)

    def test_interrupt_between_turns_is_forgotten(self, programs):
        """An interrupt while no turn runs does not cut the next turn short."""
        agent = CommandAgent(argv(programs, "print", "fine"), timeout=10)
        before = our_children()
        agent.interrupt()
        assert agent.run_turn(make_request()) == TurnResult("fine")
        assert our_children() <= before
