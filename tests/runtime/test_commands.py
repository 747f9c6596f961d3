"""The chat commands' registry, ``/help`` and the answers of ``/status``, ``/new`` and
``/reset`` (issue 17.6)."""

from __future__ import annotations

import pytest

from hermes_actors.model.commands import COMMANDS, REGISTRY, help_text, parse_command
from hermes_actors.runtime import session_core
from hermes_actors.runtime.session_actor import NEW_SESSION, NEW_SESSION_CUT, format_duration


@pytest.fixture
def harness_store(every_backend):
    """Every scenario here runs on each store backend."""
    return every_backend


class TestRegistry:
    """One registry names every command: the parser knows exactly its words, and the session
    actor has a handler for every command in it."""

    def test_every_command_has_a_handler(self):
        assert set(session_core._COMMANDS) | {"queue"} == {row.name for row in REGISTRY}

    def test_the_parser_knows_exactly_the_registry_words(self):
        for word, name in COMMANDS.items():
            assert parse_command(word.upper() + " x").name == name
        assert parse_command("/help") == ("help", "")
        assert parse_command("/model gpt") is None  # an agent's own command

    def test_only_a_queue_with_a_prompt_becomes_a_turn(self):
        assert parse_command("/queue do it").becomes_turn
        assert not parse_command("/queue").becomes_turn
        assert not any(parse_command(w).becomes_turn for w in ("/new", "/status", "/help"))

    def test_help_is_one_line_per_command(self):
        lines = help_text().splitlines()
        assert [line.split(" — ")[0] for line in lines] == [
            "/new", "/reset", "/stop", "/queue <prompt>", "/status", "/help"]
        assert all(" — " in line and line.split(" — ")[1] for line in lines)


class TestHelp:
    """``/help`` answers with the commands; other slash words still reach the agent."""

    def test_help_lists_the_commands(self, make_harness):
        h = make_harness()
        h.send("/help")
        h.idle()
        assert h.texts() == [help_text()]
        assert h.seen() == []  # not a turn
        assert h.gw.store.pending_inbox() == []  # consumed with its answer

    def test_an_unknown_slash_word_goes_to_the_agent(self, make_harness):
        h = make_harness()
        h.send("/model fast")
        h.idle()
        assert h.seen() == ["/model fast"]
        assert h.texts() == ["echo: /model fast"]


class TestStatus:
    """``/status`` says how long the running turn has run and how many messages the session
    has."""

    def test_idle_session(self, make_harness):
        h = make_harness()
        h.send("hello")
        h.idle()
        h.send("/status")
        h.idle()
        lines = h.texts()[-1].splitlines()
        assert lines[1] == "Messages: 2"  # the message and its reply
        assert "Turn: idle" in lines

    def test_running_turn_with_its_age(self, make_harness):
        h = make_harness()
        h.hold("g")
        h.clock.advance(75)
        h.send("/status")
        assert h.adapter.wait_for(1)
        status = h.texts()[-1].splitlines()
        assert "Turn: running for 1m 15s" in status
        assert "Messages: 1" in status  # the held turn's user message
        h.gates.open("g")
        h.idle()

    def test_before_the_first_message(self, make_harness):
        h = make_harness()
        h.send("/status")
        h.idle()
        assert h.texts()[-1].splitlines()[:2] == ["Session: (none yet)", "Messages: 0"]

    @pytest.mark.parametrize(("seconds", "text"), [
        (0, "0s"), (59.9, "59s"), (60, "1m 00s"), (3599, "59m 59s"), (7440, "2h 04m")])
    def test_durations(self, seconds, text):
        assert format_duration(seconds) == text


class TestNewSaysWhatItCut:
    """``/new`` and ``/reset`` say when they cut a running turn."""

    @pytest.mark.parametrize("command", ["/new", "/reset"])
    def test_cutting_a_turn(self, make_harness, command):
        h = make_harness()
        h.hold("g", command="wait")
        h.send(command)
        h.idle()
        assert h.texts() == [NEW_SESSION_CUT]

    @pytest.mark.parametrize("command", ["/new", "/reset"])
    def test_nothing_running(self, make_harness, command):
        h = make_harness()
        h.send("hi")
        h.idle()
        h.send(command)
        h.idle()
        assert h.texts() == ["echo: hi", NEW_SESSION]

    def test_a_turn_whose_answer_is_recorded_is_not_cut(self, make_harness):
        h = make_harness()
        sending, release = h.slow_send("echo: hi")  # recorded, the marker cleared; slow send
        h.send("hi")
        assert sending.wait(10)
        h.send("/new")
        h.handled()
        release.set()
        h.idle()
        assert h.texts() == ["echo: hi", NEW_SESSION]


class TestNewAtTheStop:
    """A /new whose reset is under way when the gateway stops is answered before the actors
    stop, and its inbox row is consumed: the next start does not reset the session again."""

    def test_answered_not_replayed(self, make_harness):
        import threading

        h = make_harness()
        h.send("hi")
        h.idle()
        store, entered, go = h.gw.store, threading.Event(), threading.Event()
        reset = store.reset_session

        def slow_reset(*args, **kwargs):
            entered.set()
            assert go.wait(10)
            return reset(*args, **kwargs)

        store.reset_session = slow_reset
        h.send("/new")
        assert entered.wait(10)
        stopper = threading.Thread(target=lambda: h.gw.stop(drain_timeout=5))
        stopper.start()
        assert h.gw.stopping.wait(10)  # the stop has begun (it drains now)
        go.set()
        stopper.join(30)
        assert h.texts() == ["echo: hi", NEW_SESSION]
        again = make_harness(home=h.gw.home)
        again.idle()
        assert again.gw.store.pending_inbox() == []
        assert again.texts() == []  # no second "new session"
