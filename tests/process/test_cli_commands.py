"""``send``, ``chat``, ``bench`` and the usage errors of ``run`` (§12, §17.35, §17.49)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import types

import pytest

from hermes_actors.cli import main
from hermes_actors.process.client import GatewayClient, SendOptions, send
from hermes_actors.testing import node_values

from .conftest import TOKEN, clean_env, run_cli


class TestSend:
    """``send`` posts to a running gateway; ``--wait`` prints the final answer or exits 1."""

    def test_send_wait_prints_the_reply(self, shared_gateway):
        result = run_cli("send", "--wait", "hello there", "--url", shared_gateway.url,
                         env={"HERMES_HTTP_TOKEN": TOKEN})
        assert result.returncode == 0, result.stderr
        assert result.stdout == "echo: hello there\n"

    def test_send_wait_takes_a_text_that_is_not_utf8(self, shared_gateway):
        # an argument typed in a Latin-1 terminal: its byte is U+FFFD, not a 400 refusal
        result = subprocess.run(
            [sys.executable, "-m", "hermes_actors", "send", "--wait", "--chat-id", "latin",
             "caf\xe9".encode("latin-1"), "--url", shared_gateway.url, "--token", TOKEN],
            capture_output=True, env=clean_env(), timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.decode("utf-8") == "echo: caf\ufffd\n"

    def test_send_without_wait_prints_the_acceptance(self, shared_gateway):
        result = run_cli("send", "hi", "--chat-id", "cli-2", "--url", shared_gateway.url,
                         "--token", TOKEN)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("accepted session_key=agent:main:webhook:dm:cli-2 ")

    def test_send_wait_prints_notices_then_the_answer_of_a_command(self, shared_gateway):
        result = run_cli("send", "--wait", "/status", "--chat-id", "cli-3", "--url",
                         shared_gateway.url, "--token", TOKEN)
        assert result.returncode == 0, result.stderr
        assert "Turn: idle" in result.stdout

    def test_send_wait_prints_the_answer_to_its_own_message(self, shared_gateway):
        """A reply to an earlier message of the same chat that lands while ``--wait`` polls
        is not taken for this message's answer (matched by event id)."""
        key = shared_gateway.post("cli-order", "sleep 3")["session_key"]  # replied first
        while not shared_gateway.session(key)[1].get("running"):  # its turn has started
            pass
        printed: list[str] = []
        noted: list[str] = []
        client = GatewayClient(shared_gateway.url, TOKEN)
        result = send(client, SendOptions("/queue after it", chat_id="cli-order", wait=True),
                      out=printed.append, note=noted.append)
        assert result.ok and result.answer is not None
        assert printed == ["echo: after it"]  # the acknowledgement is no answer
        assert noted == ["Queued for the next turn."]
        texts = [m["text"] for m in shared_gateway.outbox("cli-order", wait=0)["messages"]]
        assert texts == ["Queued for the next turn.", "slept 3", "echo: after it"]

    def test_url_and_token_come_from_the_home_config(self, shared_gateway, tmp_path):
        home = tmp_path / "client-home"
        home.mkdir()
        (home / "config.yaml").write_text(
            f"http: {{host: 0.0.0.0, port: {shared_gateway.port}, token: {TOKEN}}}\n"
        )
        result = run_cli("send", "--wait", "via home", "--chat-id", "cli-home", "--home",
                         str(home))
        assert result.returncode == 0, result.stderr
        assert result.stdout == "echo: via home\n"

    def test_no_reply_within_the_timeout_exits_1(self, shared_gateway):
        result = run_cli("send", "--wait", "sleep 1", "--chat-id", "cli-slow", "--timeout",
                         "0.2", "--url", shared_gateway.url, "--token", TOKEN)
        assert result.returncode == 1
        assert result.stderr == "hermes-actors: error: no reply within 0.2s\n"

    def test_no_server_exits_1_with_one_line(self, tmp_path):
        # tried again until the timeout (a gateway may be restarting), then the last reason
        began = time.monotonic()
        result = run_cli("send", "--wait", "hi", "--timeout", "1", "--url",
                         "http://127.0.0.1:9")
        assert time.monotonic() - began >= 1
        assert result.returncode == 1
        assert result.stderr.startswith("hermes-actors: error: no gateway answered at ")
        assert len(result.stderr.splitlines()) == 1

    def test_a_gateway_that_does_not_answer_is_given_up_after_the_timeout(self):
        # a paused gateway (SIGSTOP, a stalled host) takes the connection and says nothing:
        # --timeout 1 waited the stream's 60 s read timeout first
        with socket.socket() as hung:
            hung.bind(("127.0.0.1", 0))
            hung.listen(8)  # connections complete in the backlog; nothing answers them
            url = f"http://127.0.0.1:{hung.getsockname()[1]}"
            began = time.monotonic()
            result = run_cli("send", "--wait", "hi", "--timeout", "1", "--url", url,
                             timeout=50)
            took = time.monotonic() - began
        assert result.returncode == 1
        assert result.stderr == f"hermes-actors: error: no gateway answered at {url} (timed out)\n"
        assert took < 30

    def test_a_token_that_is_not_ascii_is_sent_and_accepted(self, start_gateway, tmp_path):
        # the client failed to send it ("no gateway answered ... latin-1 codec"), and the
        # server refused the right token sent as UTF-8 (curl's way) with 401
        token = "pässwörd€"
        gw = start_gateway("--agent", "scripted", home=tmp_path / "home",
                           env={"HERMES_HTTP_TOKEN": token})
        result = run_cli("send", "--wait", "hi", "--chat-id", "utf8-token", "--url", gw.url,
                         "--token", token)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "echo: hi\n"
        wrong = run_cli("send", "hi", "--url", gw.url, "--token", "pässwörd")
        assert wrong.returncode == 2 and "invalid bearer token" in wrong.stderr

    def test_refused_request_exits_2(self, shared_gateway):
        wrong = run_cli("send", "hi", "--url", shared_gateway.url, "--token", "nope")
        assert wrong.returncode == 2 and "401" in wrong.stderr
        unserved = run_cli("send", "hi", "--platform", "telegram", "--url", shared_gateway.url,
                           "--token", TOKEN)
        assert unserved.returncode == 2 and "not served" in unserved.stderr

    def test_a_full_queue_is_a_runtime_failure_exit_1(self, start_gateway, tmp_path):
        # a message the busy session cannot take now (429) is no usage mistake: sent again
        # later it is taken, so it is exit 1 like any runtime failure (§1), not 2
        home = tmp_path / "home"
        home.mkdir()
        (home / "config.yaml").write_text(
            "busy_input_mode: queue\nqueue_max: 1\nrestart_drain_timeout: 0.1\n")
        gateway = start_gateway("--agent", "scripted", home=home)
        assert gateway.post("full", "sleep 30")["queue_depth"] == 0
        assert gateway.post("full", "/queue a")["queue_depth"] == 1
        result = run_cli("send", "/queue b", "--chat-id", "full", "--user-id", "7", "--url",
                         gateway.url, "--home", str(home))
        assert result.returncode == 1, result.stderr
        assert result.stderr.startswith("hermes-actors: error: the gateway answered 429: "
                                        "Queue full (1 waiting)")


class TestChat:
    """``chat`` runs an embedded gateway: each line is a message, end of input stops it."""

    def test_piped_session_prints_replies_in_order(self, tmp_path):
        home = tmp_path / "home"
        result = run_cli("chat", "--home", str(home), stdin="hello\n\n/status\nbye\n")
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[0] == "echo: hello" and lines[-1] == "echo: bye"
        assert "Turn: idle" in lines
        assert "clean_shutdown" in node_values(home)

    def test_quit_ends_the_session_and_the_rest_is_not_sent(self, tmp_path):
        result = run_cli("chat", "--home", str(tmp_path / "home"),
                         stdin="one\n/quit\ntwo\n")
        assert result.returncode == 0, result.stderr
        assert result.stdout == "echo: one\n"

    def test_a_home_that_is_a_file_is_one_line_like_run(self, tmp_path):
        home = tmp_path / "file"
        home.write_text("not a directory\n")
        expected = (f"hermes-actors: error: cannot create the home directory {str(home)!r}: "
                    f"[Errno 17] File exists: {str(home)!r}\n")
        chatted = run_cli("chat", "--home", str(home), stdin="hi\n")
        assert (chatted.returncode, chatted.stderr) == (1, expected)
        ran = run_cli("run", "--home", str(home), "--port", "0")
        assert (ran.returncode, ran.stderr) == (1, expected)

    @pytest.mark.parametrize("chat_id", ["../x", "a..b", "tab\there"])
    def test_a_chat_id_that_cannot_name_a_session_is_one_line(self, chat_id, tmp_path):
        result = run_cli("chat", "--home", str(tmp_path / "home"), "--chat-id", chat_id,
                         stdin="hello\n")
        assert result.returncode == 2
        assert result.stderr == (f"hermes-actors: error: hermes-actors chat: argument "
                                 f"--chat-id: invalid chat id {chat_id!r} (it may not "
                                 f"contain '..' or control characters)\n")

    def test_a_line_that_is_not_utf8_is_answered_and_the_session_goes_on(self, tmp_path):
        # a Latin-1 terminal: the line's undecodable byte becomes U+FFFD instead of a
        # refused write that ended the whole session (and dropped the lines after it)
        result = subprocess.run(
            [sys.executable, "-m", "hermes_actors", "chat", "--home", str(tmp_path / "home")],
            input="café\nhello\n".encode("latin-1"), capture_output=True, env=clean_env(),
            timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.decode("utf-8") == "echo: caf\ufffd\necho: hello\n"

    def test_chat_uses_home_from_env(self, tmp_path):
        home = tmp_path / "envhome"
        result = run_cli("chat", stdin="x\n", env={"HERMES_HOME": str(home)}, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        sessions = run_cli("sessions", "list", env={"HERMES_HOME": str(home)})
        assert sessions.stdout.startswith("agent:main:local:dm:console ")


class TestBench:
    """``bench`` forwards its arguments untouched to ``benchmarks.__main__.main``."""

    def test_arguments_are_forwarded(self, monkeypatch, tmp_path):
        seen = []
        fake = types.ModuleType("benchmarks.__main__")
        fake.main = lambda argv: seen.append(argv) or 3
        monkeypatch.setitem(sys.modules, "benchmarks", types.ModuleType("benchmarks"))
        monkeypatch.setitem(sys.modules, "benchmarks.__main__", fake)
        monkeypatch.delenv("HERMES_HOME", raising=False)
        code = main(["bench", "--home", str(tmp_path), "throughput", "--json", "out.json"])
        assert code == 3 and seen == [["throughput", "--json", "out.json"]]

    def test_missing_harness_exits_2(self, monkeypatch, capsys, tmp_path):
        monkeypatch.chdir(tmp_path)  # no benchmarks/ folder to fall back on
        monkeypatch.setattr(sys, "path", list(sys.path))
        monkeypatch.setitem(sys.modules, "benchmarks", None)
        monkeypatch.delitem(sys.modules, "benchmarks.__main__", raising=False)
        assert main(["bench", "fifo"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("hermes-actors: error: the benchmark harness was not found")


class TestUsage:
    """Usage and config mistakes exit 2 with one line; every command has ``--help``."""

    @pytest.mark.parametrize("command", [["run"], ["send"], ["chat"], ["bench"],
                                         ["sessions", "list"], ["db", "check"]])
    def test_help(self, command, capsys):
        assert main([*command, "--help"]) == 0
        assert "--home" in capsys.readouterr().out

    def test_run_help_tells_the_signals_as_they_work(self, capsys):
        assert main(["run", "--help"]) == 0
        text = " ".join(capsys.readouterr().out.split())
        assert ("Run the gateway until SIGTERM or SIGINT (graceful drain); a second signal "
                "(either) ends the drain at once, a third exits at once with code 130.") in text

    @pytest.mark.parametrize("group", ["db", "sessions", "cluster"])
    def test_a_group_without_its_command_prints_the_group_help(self, group, capsys):
        assert main([group]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"usage: hermes-actors {group} [-h] COMMAND")
        assert ("rebuild-fts" in err) == (group == "db")

    def test_no_command_prints_the_top_level_help(self, capsys):
        assert main([]) == 2
        assert capsys.readouterr().err.startswith("usage: hermes-actors [-h] [--version]")

    def test_version(self, capsys):
        from importlib.metadata import version

        assert main(["--version"]) == 0
        assert capsys.readouterr().out == f"hermes-actors {version('hermes_actors')}\n"

    @pytest.mark.parametrize("spelling", [["--home", "{}"], ["--home={}"]])
    def test_home_before_the_command_is_taken(self, spelling, tmp_path):
        home = tmp_path / "before"
        chatted = run_cli("chat", "--home", str(home), stdin="x\n")
        assert chatted.returncode == 0, chatted.stderr
        args = [part.format(home) for part in spelling]
        listed = run_cli(*args, "sessions", "list", env={"HERMES_HOME": str(tmp_path / "no")})
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.startswith("agent:main:local:dm:console ")

    def test_home_before_nothing_gets_a_hint(self, capsys, tmp_path):
        assert main(["--home", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert "needs a command after it" in err and "run --home DIR" in err

    def test_bench_with_home_before_it(self, monkeypatch, tmp_path):
        seen = []
        fake = types.ModuleType("benchmarks.__main__")
        fake.main = lambda argv: seen.append(argv) or 0
        monkeypatch.setitem(sys.modules, "benchmarks", types.ModuleType("benchmarks"))
        monkeypatch.setitem(sys.modules, "benchmarks.__main__", fake)
        assert main(["--home", str(tmp_path), "bench", "fifo"]) == 0
        assert seen == [["fifo"]]

    def test_bad_port_exits_2(self, capsys):
        assert main(["run", "--port", "70000"]) == 2
        assert "invalid port" in capsys.readouterr().err

    @pytest.mark.parametrize("argv", [["sessions", "list", "--home", ""],
                                      ["--home=", "db", "check"], ["db", "check", "--home", " "]])
    def test_a_blank_home_is_a_usage_error_not_the_default_home(self, argv, capsys,
                                                                 monkeypatch, tmp_path):
        # --home "$DIR" with $DIR unset fell back to $HERMES_HOME or ./hermes_home: the
        # command ran on (run: took, and served) another home than the one meant
        monkeypatch.setenv("HERMES_HOME", str(tmp_path / "production"))
        (tmp_path / "production").mkdir()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("hermes-actors: error: hermes-actors ") and err.endswith(
            "argument --home: invalid home directory "
            f"{argv[argv.index('--home') + 1] if '--home' in argv else ''!r} (give a folder)\n")
        assert list((tmp_path / "production").iterdir()) == []

    def test_run_with_a_blank_home_exits_2(self, tmp_path):
        result = run_cli("run", "--home", "", "--port", "0", cwd=tmp_path, timeout=30)
        assert result.returncode == 2
        assert result.stderr == ("hermes-actors: error: hermes-actors run: argument --home: "
                                 "invalid home directory '' (give a folder)\n")
        assert list(tmp_path.iterdir()) == []  # no ./hermes_home taken instead

    @pytest.mark.parametrize("host", ["", "  "])
    def test_blank_host_exits_2_instead_of_listening_everywhere(self, host, tmp_path):
        # http.host refuses a blank value; --host "" (an unset $HOST) listened on every
        # interface instead of loopback
        result = run_cli("run", "--home", str(tmp_path / "h"), "--host", host, "--port", "0",
                         timeout=30)
        assert result.returncode == 2
        assert result.stderr == (f"hermes-actors: error: hermes-actors run: argument --host: "
                                 f"invalid host {host!r} (an address or a name to listen on, "
                                 f"such as 127.0.0.1, or 0.0.0.0 for every interface)\n")
        assert not (tmp_path / "h").exists()

    def test_a_bad_db_writer_variable_exits_2_instead_of_running_degraded(self, tmp_path):
        # a typo in HERMES_ACTORS_DB_WRITER ran the gateway in degraded mode: its inbox,
        # ledger and outbox in memory only, accepted messages lost to the next crash
        result = run_cli("run", "--home", str(tmp_path / "h"), "--port", "0",
                         env={"HERMES_ACTORS_DB_WRITER": "threads"}, timeout=30)
        assert result.returncode == 2
        assert result.stderr.splitlines()[-1] == (
            "hermes-actors: error: HERMES_ACTORS_DB_WRITER must be 'thread' or 'process', "
            "not 'threads'")
        assert "DEGRADED" not in result.stderr

    @pytest.mark.parametrize("timeout", ["inf", "nan", "1e400", "0", "-1", "86401",
                                         "soon"])
    def test_bad_send_timeout_exits_2_before_posting(self, timeout, capsys):
        # nothing listens on port 9: a message posted there would be exit 1, not 2
        assert main(["send", "--wait", "hi", "--timeout", timeout,
                     "--url", "http://127.0.0.1:9"]) == 2
        err = capsys.readouterr().err
        assert err == (f"hermes-actors: error: hermes-actors send: argument --timeout: invalid "
                       f"number of seconds {timeout!r} (more than 0, at most 86400)\n")

    def test_missing_config_file_exits_2(self, tmp_path):
        result = run_cli("run", "--home", str(tmp_path / "h"), "--config",
                         str(tmp_path / "missing.yaml"))
        assert result.returncode == 2
        assert result.stderr.strip().splitlines() == [
            f"hermes-actors: error: config file '{tmp_path / 'missing.yaml'}' does not exist"
        ]

    def test_invalid_config_value_exits_2(self, tmp_path):
        home = tmp_path / "h"
        home.mkdir()
        (home / "config.yaml").write_text("busy_input_mode: sometimes\n")
        result = run_cli("run", "--home", str(home))
        assert result.returncode == 2
        assert "busy_input_mode" in result.stderr and "Traceback" not in result.stderr


class TestGeventFirst:
    """Loading the command line imports no ``threading``, so ``run`` can patch gevent first."""

    def test_cli_import_leaves_threading_unimported(self):
        code = "import sys, hermes_actors.cli; print('threading' in sys.modules)"
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=60)
        assert result.stdout.strip() == "False", result.stderr
