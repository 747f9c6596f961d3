"""``hermes-actors admin ...`` against a real ``run`` process (issue 39)."""

from __future__ import annotations

import json

from .conftest import TOKEN, run_cli

ADMIN = "operator-t0ken"


def _admin(gw, *args: str, token: str | None = ADMIN):
    extra = ("--admin-token", token) if token is not None else ()
    return run_cli("admin", *args, "--url", gw.url, *extra)


def test_admin_commands_against_a_running_gateway(start_gateway, tmp_path):
    gw = start_gateway("--agent", "scripted", env={"HERMES_HTTP_TOKEN": TOKEN,
                                                   "HERMES_HTTP_ADMIN_TOKEN": ADMIN},
                       token=TOKEN)
    posted = gw.post("adm", "sleep 30")
    key = posted["session_key"]
    while not gw.session(key)[1].get("running"):  # its turn has started
        pass

    listed = _admin(gw, "sessions", "--state", "running", "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)["sessions"]
    assert (row["session_key"], row["running"], row["chat_id"]) == (key, True, "adm")
    table = _admin(gw, "sessions")
    assert table.returncode == 0 and table.stdout.splitlines()[0].startswith("session_key")
    assert key in table.stdout

    shown = _admin(gw, "show", key)
    assert shown.returncode == 0, shown.stderr
    assert f"session_key: {key}" in shown.stdout and "running: yes" in shown.stdout

    cancelled = _admin(gw, "cancel", key, "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    stop_id = json.loads(cancelled.stdout)["event_id"]
    [stopped] = gw.replies("adm", 1)
    assert stopped["text"] == "Stopped" and stopped["final"]
    assert posted["event_id"] in stopped["in_reply_to"]
    assert stop_id in stopped["in_reply_to"]

    reset = _admin(gw, "reset", key)
    assert reset.returncode == 0 and "reset submitted as event" in reset.stdout
    unsuspended = _admin(gw, "unsuspend", key)
    assert unsuspended.returncode == 0 and "no longer suspended" in unsuspended.stdout

    deliveries = _admin(gw, "deliveries", "--json")
    assert deliveries.returncode == 0 and json.loads(deliveries.stdout) == {"deliveries": []}
    unknown = _admin(gw, "retry", "nope")
    assert unknown.returncode == 2 and "404" in unknown.stderr
    missing = _admin(gw, "show", "agent:main:webhook:dm:none")
    assert missing.returncode == 2 and "404" in missing.stderr

    wrong = _admin(gw, "sessions", token="wrong")
    assert wrong.returncode == 2 and "401" in wrong.stderr
    ingress = _admin(gw, "sessions", token=TOKEN)  # the ingress token opens nothing here
    assert ingress.returncode == 2 and "401" in ingress.stderr
    none = _admin(gw, "sessions", token=None)
    assert none.returncode == 2 and "no admin token" in none.stderr
    # the admin token does not open the ingress routes
    assert gw.request("GET", "/v1/sessions", token=ADMIN)[0] == 401
    assert ADMIN not in gw.stderr.text()


def test_admin_routes_are_off_without_an_admin_token(start_gateway):
    gw = start_gateway("--agent", "scripted", env={"HERMES_HTTP_TOKEN": TOKEN}, token=TOKEN)
    off = _admin(gw, "sessions")
    assert off.returncode == 2 and "404" in off.stderr
