"""A DSN's password is never printed, whatever it holds (issue 37): ``run``'s start error,
``db check`` and ``cluster status``, as real processes, on an unreachable server and on the
test server, with the password ``Xy?9#secret`` written raw in the URI's user part."""

from __future__ import annotations

import urllib.parse

import pytest
import yaml

from .conftest import run_cli

pytestmark = pytest.mark.postgres

SECRET = "Xy?9#secret"
#: What must never be printed: the password, and any piece of it a parser might cut.
PIECES = (SECRET, "9#secret", "#secret", "Xy?9")


def _home(tmp_path, dsn: str):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(yaml.safe_dump(
        {"store": {"backend": "postgres", "dsn": dsn}}))
    return home


def _assert_hidden(result) -> str:
    printed = result.stdout + result.stderr
    for piece in PIECES:
        assert piece not in printed, printed
    return printed


def _uri_of(dsn: str, password: str) -> str:
    """The test server's DSN as a URI with ``password`` raw in its user part."""
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(dsn)
    host = urllib.parse.quote(str(params.get("host", "localhost")), safe="")
    port = f":{params['port']}" if params.get("port") else ""
    query = ("options=" + urllib.parse.quote(str(params["options"]), safe="")
             if params.get("options") else "")
    uri = (f"postgresql://{params.get('user', 'postgres')}:{password}@{host}{port}/"
           f"{params.get('dbname', 'postgres')}" + (f"?{query}" if query else ""))
    assert conninfo_to_dict(uri)["password"] == password
    return uri


class TestUnreachable:
    DSN = f"postgresql://hermes:{SECRET}@127.0.0.1:1/hermes"

    @pytest.mark.parametrize("command", [("run",), ("db", "check"), ("cluster", "status")])
    def test_nothing_printed_holds_the_password(self, tmp_path, command):
        home = _home(tmp_path, self.DSN)
        result = run_cli(*command, "--home", str(home), timeout=60)
        assert result.returncode == 2, result.stderr
        printed = _assert_hidden(result)
        assert "host=127.0.0.1 port=1 dbname=hermes user=hermes" in printed

    def test_the_dsn_from_the_environment_too(self, tmp_path):
        home = tmp_path / "home"
        home.mkdir()
        env = {"HERMES_STORE_BACKEND": "postgres", "HERMES_STORE_DSN": self.DSN}
        result = run_cli("run", "--home", str(home), env=env, timeout=60)
        assert result.returncode == 2
        _assert_hidden(result)

    def test_a_dsn_that_does_not_parse_is_never_echoed(self, tmp_path):
        home = _home(tmp_path, f"postgresql://hermes:{SECRET}@127.0.0.1:nope/hermes")
        for command in (("db", "check"), ("cluster", "status")):
            result = run_cli(*command, "--home", str(home), timeout=60)
            assert result.returncode == 2, result.stderr
            _assert_hidden(result)


class TestOnTheServer:
    def test_cluster_status_and_db_check(self, tmp_path, postgres_dsn):
        home = _home(tmp_path, _uri_of(postgres_dsn, SECRET))
        status = run_cli("cluster", "status", "--home", str(home))
        assert status.returncode == 1, status.stderr  # no cluster in the database yet
        assert "no cluster in host=" in _assert_hidden(status)
        checked = run_cli("db", "check", "--home", str(home))
        assert "mode:" in _assert_hidden(checked)
