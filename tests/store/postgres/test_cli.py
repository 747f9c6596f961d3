"""``hermes-actors db check``, ``db rebuild-fts`` and ``sessions`` on a home whose store is a
PostgreSQL database (named by the home's config.yaml)."""

from __future__ import annotations

import json

import yaml

from hermes_actors import cli
from hermes_actors.store.ops import AppendMessage, CreateSession, PutRouting
from hermes_actors.store.routing import NO_FLAGS

SID = "20231114_221320_00000001"
KEY = "agent:main:telegram:dm:42"


def _configure(home, dsn: str) -> None:
    (home / "config.yaml").write_text(yaml.safe_dump({"store": {"backend": "postgres",
                                                                "dsn": dsn}}))


def _lines(text: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in text.strip().splitlines())


class TestDbTools:
    """The db commands read and repair the configured database."""

    def test_check_reports_postgres(self, open_pg, postgres_dsn, home, capsys):
        _configure(home, postgres_dsn)
        open_pg().apply([CreateSession(SID, KEY, None, 1.0),
                         AppendMessage(SID, {"role": "user", "content": "hi", "timestamp": 1.0})])
        assert cli.main(["db", "check", "--home", str(home)]) == 0
        assert _lines(capsys.readouterr().out) == {
            "mode": "postgres", "integrity": "ok", "fts": "ok", "sessions": "1",
            "messages": "1"}

    def test_rebuild_fts_repairs_a_missing_index(self, open_pg, postgres_dsn, home, capsys):
        _configure(home, postgres_dsn)
        pg = open_pg()
        pg.detach_fts()
        assert cli.main(["db", "check", "--home", str(home)]) == 1
        assert _lines(capsys.readouterr().out)["fts"] == "missing"
        assert cli.main(["db", "rebuild-fts", "--home", str(home)]) == 0
        assert _lines(capsys.readouterr().out) == {"fts": "ok", "messages": "0"}
        assert pg.check_fts() == "ok"

    def test_an_empty_database_is_reported_degraded(self, postgres_dsn, home, capsys):
        _configure(home, postgres_dsn)
        assert cli.main(["db", "check", "--home", str(home)]) == 1
        assert _lines(capsys.readouterr().out)["mode"] == "degraded"

    def test_sessions_list_reads_the_routing_table(self, open_pg, postgres_dsn, home, capsys):
        _configure(home, postgres_dsn)
        when = "2023-11-14T22:13:20+00:00"
        text = json.dumps({"session_key": KEY, "session_id": SID, "created_at": when,
                           "updated_at": when})
        open_pg().apply([PutRouting(KEY, text, *NO_FLAGS)])
        assert cli.main(["sessions", "list", "--home", str(home)]) == 0
        assert f"{KEY}  {SID}" in capsys.readouterr().out
