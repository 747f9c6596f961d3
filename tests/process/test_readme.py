"""The README's first command really starts a gateway that answers (so the README cannot drift)."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from hermes_actors.testing import node_values

from .conftest import GatewayProcess, run_cli

README = Path(__file__).resolve().parents[2] / "README.rst"


def _literal_commands() -> list[str]:
    """The indented lines that follow a ``::`` paragraph, in order (the README's commands)."""
    commands, expecting = [], False
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.rstrip().endswith("::"):
            expecting = True
        elif expecting and line.startswith("    ") and line.strip():
            commands.append(line.strip())
            expecting = False
    return commands


class TestReadme:
    """The first command sets up and runs the gateway; the second is the test command."""

    def test_first_two_commands(self):
        first, second = _literal_commands()[:2]
        assert "pip install -e '.[test]'" in first and "hermes-actors run" in first
        assert second == ".venv/bin/python -m pytest -q"

    def test_run_part_of_the_first_command_serves_and_answers(self, tmp_path):
        first = _literal_commands()[0]
        [run_part] = [part for part in first.split("&&") if "hermes-actors run" in part]
        argv = shlex.split(run_part)
        assert argv[0] == ".venv/bin/hermes-actors"
        argv[0] = str(Path(sys.executable).with_name("hermes-actors"))
        gateway = GatewayProcess(tmp_path, argv=argv, cwd=tmp_path,
                                 env={"HERMES_HTTP_PORT": "0"})
        try:
            sent = run_cli("send", "--wait", "hello", "--url", gateway.url, cwd=tmp_path)
            assert sent.returncode == 0, sent.stderr
            assert sent.stdout == "echo: hello\n"
            assert gateway.stop() == 0
        finally:
            gateway.kill()
        home = tmp_path / re.search(r"--home (\S+)", run_part).group(1)
        assert (home / "state.db").exists() and "clean_shutdown" in node_values(home)
