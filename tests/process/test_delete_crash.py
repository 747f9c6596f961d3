"""A conversation's delete is all or nothing across a SIGKILL (issue 39): a real ``hermes-actors
run`` process killed just before the delete's transaction keeps the conversation whole (its
routing, session id and transcript), one killed just after it has none of it; and
``hermes-actors admin delete`` deletes through a running gateway."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from hermes_actors.testing import db_rows, wait_until

from .conftest import TOKEN, run_cli

CRASH = "HERMES_ACTORS_CRASHPOINT"
ADMIN = "operator-t0ken"
ENV = {"HERMES_HTTP_TOKEN": TOKEN, "HERMES_HTTP_ADMIN_TOKEN": ADMIN}
AGENT = ("--agent", "scripted")


def _show(gw, key: str) -> tuple[int, object]:
    status, _, body = gw.request("GET", _path(key), token=ADMIN)
    return status, body


def _path(key: str) -> str:
    return "/v1/admin/sessions/" + urllib.parse.quote(key, safe="")


def _killed_deleting(start_gateway, home, point: str) -> tuple[str, str]:
    """A conversation (in ``sessions.json`` too: the clean stop writes it), then its delete
    killed at ``point``: its key and session id."""
    first = start_gateway(*AGENT, home=home, env=ENV, token=TOKEN)
    key = first.post("c1", "hello zanzibar")["session_key"]
    first.replies("c1", 1)
    assert first.stop() == 0
    mirror = json.loads((home / "sessions" / "sessions.json").read_text())
    session_id = mirror[key]["session_id"]
    gw = start_gateway(*AGENT, home=home, env={**ENV, CRASH: point}, token=TOKEN)
    with pytest.raises(OSError):  # the process dies before it answers
        gw.request("DELETE", _path(key), token=ADMIN)
    assert gw.proc.wait(timeout=30) == 137
    return key, session_id


def test_killed_before_the_transaction_nothing_is_deleted(start_gateway, tmp_path):
    home = tmp_path / "home"
    key, session_id = _killed_deleting(start_gateway, home, "delete_before_commit")
    # sessions.json was already written without the key: the database's row wins
    assert key not in json.loads((home / "sessions" / "sessions.json").read_text())

    again = start_gateway(*AGENT, home=home, env=ENV, token=TOKEN)
    status, shown = _show(again, key)
    assert status == 200 and shown["session_id"] == session_id
    assert [m["content"] for m in shown["transcript_tail"]] == [
        "hello zanzibar", "echo: hello zanzibar"]

    # the CLI asks for a confirmation, then deletes through the running gateway
    args = ("admin", "delete", key, "--url", again.url, "--admin-token", ADMIN)
    unconfirmed = run_cli(*args)
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr
    assert "Traceback" not in unconfirmed.stderr
    assert _show(again, key)[0] == 200
    deleted = run_cli(*args, "--yes")
    assert deleted.returncode == 0, deleted.stderr
    assert f"{key}: deleted (routing 1, sessions 1, messages 2" in deleted.stdout
    assert _show(again, key)[0] == 404
    missing = run_cli(*args, "--yes")
    assert missing.returncode == 2 and "404" in missing.stderr

    # a running turn (under gevent) is stopped, then its conversation deleted
    busy = again.post("c2", "sleep 30")["session_key"]
    wait_until(lambda: again.session(busy)[1].get("running"), 30, 0.05,
               "the start of the busy turn")
    stopped = run_cli("admin", "delete", busy, "--url", again.url, "--admin-token", ADMIN,
                      "--yes", "--json", timeout=20)
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["deleted"]["inbox"] == 1
    assert _show(again, busy)[0] == 404
    assert again.stop() == 0


def test_killed_after_the_transaction_everything_is_deleted(start_gateway, tmp_path):
    home = tmp_path / "home"
    key, session_id = _killed_deleting(start_gateway, home, "delete_after_commit")

    again = start_gateway(*AGENT, home=home, env=ENV, token=TOKEN)
    assert _show(again, key)[0] == 404
    posted = again.post("c1", "hello again")
    [reply] = again.replies("c1", 1)  # the deleted conversation's reply is not there
    assert reply["text"] == "echo: hello again"
    status, shown = _show(again, key)
    assert status == 200 and shown["session_id"] != session_id
    assert [m["content"] for m in shown["transcript_tail"]] == [
        "hello again", "echo: hello again"]
    assert posted["session_key"] == key
    assert again.stop() == 0
    for table in ("messages", "sessions"):
        assert {row["session_id" if table == "messages" else "id"]
                for row in db_rows(home, table)} == {shown["session_id"]}
    assert [row["text"] for row in db_rows(home, "outbox")] == ["echo: hello again"]
