"""The operator routes (issue 39): ``/v1/admin/...`` behind ``http.admin_token``, called as a
WSGI application in front of a real gateway (``make_harness``)."""

from __future__ import annotations

import json
import logging

import pytest
from wsgi_api import ADMIN, TOKEN, admin_api, admin_call, admin_path

from hermes_actors import load_config
from hermes_actors.errors import ConfigError


class TestAuth:
    def test_wrong_ingress_and_missing_tokens_are_refused(self, make_harness):
        api = admin_api(make_harness().gw)
        for token in ("wrong", TOKEN, None):
            status, body = admin_call(api, "/v1/admin/sessions", token=token)
            assert status == 401, (token, body)
        assert admin_call(api, "/v1/admin/sessions")[0] == 200

    def test_the_admin_token_does_not_open_the_ingress_routes(self, make_harness):
        api = admin_api(make_harness().gw)
        body = json.dumps({"chat_id": "1", "text": "hi"}).encode()
        assert admin_call(api, "/v1/messages", method="POST", token=ADMIN, body=body)[0] == 401
        assert admin_call(api, "/v1/sessions", token=ADMIN)[0] == 401
        assert admin_call(api, "/v1/messages", method="POST", token=TOKEN, body=body)[0] == 202

    def test_without_an_admin_token_the_routes_are_off(self, make_harness):
        api = admin_api(make_harness().gw, admin=None)
        for token in (None, TOKEN, ADMIN):
            assert admin_call(api, "/v1/admin/sessions", token=token)[0] == 404

    def test_config_env_and_no_logging_of_the_token(self):
        config = load_config(env={"HERMES_HTTP_ADMIN_TOKEN": ADMIN})
        assert config.http.admin_token == ADMIN
        assert ADMIN not in repr(config.http)
        assert load_config(env={}).http.admin_token is None
        with pytest.raises(ConfigError, match="admin_token"):
            load_config(env={"HERMES_HTTP_ADMIN_TOKEN": "same", "HERMES_HTTP_TOKEN": "same"})

    def test_a_refused_request_logs_no_token(self, make_harness, caplog):
        api = admin_api(make_harness().gw)
        with caplog.at_level(logging.DEBUG):
            admin_call(api, "/v1/admin/sessions", token="wrong")
            admin_call(api, "/v1/admin/sessions")
        assert ADMIN not in caplog.text and "wrong" not in caplog.text


class TestSessions:
    def test_list_and_show(self, make_harness):
        h = make_harness()
        api = admin_api(h.gw)
        h.send("hello", chat_id="1")
        h.idle()
        h.hold("g", command="wait")  # chat 42 runs a turn
        status, body = admin_call(api, "/v1/admin/sessions")
        assert status == 200
        by_key = {s["session_key"]: s for s in body["sessions"]}
        assert set(by_key) == {h.key("1"), h.key("42")}
        running = by_key[h.key("42")]
        assert running["running"] is True and running["queue_depth"] == 0
        assert running["platform"] == "telegram" and running["chat_id"] == "42"
        assert set(running) == {"session_key", "session_id", "platform", "chat_id",
                                "thread_id", "running", "queue_depth", "suspended",
                                "resume_pending", "updated_at"}
        assert by_key[h.key("1")]["running"] is False
        status, body = admin_call(api, "/v1/admin/sessions", query="state=running")
        assert [s["session_key"] for s in body["sessions"]] == [h.key("42")]
        assert admin_call(api, "/v1/admin/sessions", query="state=suspended")[1] == {"sessions": []}
        assert len(admin_call(api, "/v1/admin/sessions", query="limit=1")[1]["sessions"]) == 1
        assert admin_call(api, "/v1/admin/sessions", query="state=bogus")[0] == 400

        status, shown = admin_call(api, admin_path(h.key("1")))
        assert status == 200
        assert shown["session_key"] == h.key("1") and shown["running"] is False
        assert [m["content"] for m in shown["transcript_tail"]] == ["hello", "echo: hello"]
        assert shown["inbox"] == []
        assert [(row["session_key"], row["content"], row["state"])
                for row in shown["deliveries"]] == [(h.key("1"), "echo: hello", "delivered")]
        assert admin_call(api, admin_path("agent:main:telegram:dm:nobody"))[0] == 404
        h.gates.open_all()

    def test_show_lists_the_unconsumed_inbox(self, make_harness):
        h = make_harness()
        api = admin_api(h.gw)
        h.hold("g", command="wait")
        queued = h.send("/queue later")
        h.handled()
        shown = admin_call(api, admin_path(h.key()))[1]
        assert queued in [event["event_id"] for event in shown["inbox"]]
        h.gates.open_all()


class TestCommands:
    def test_cancel_stops_the_running_turn_as_a_chat_stop(self, make_harness):
        h = make_harness()
        api = admin_api(h.gw)
        h.hold("g", command="wait")
        held = h.adapter  # the event of the held turn:
        running_id = h.gw.store.get(h.key()).active_turn_events[0]
        status, body = admin_call(api, admin_path(h.key(), "cancel"), method="POST")
        assert status == 202 and body["event_id"]
        h.idle()
        stopped = [m for m in held.sent if m.text == "Stopped"]
        assert len(stopped) == 1 and running_id in stopped[0].in_reply_to
        assert stopped[0].final

    def test_reset_starts_a_new_session(self, make_harness):
        h = make_harness()
        api = admin_api(h.gw)
        h.send("hello")
        h.idle()
        before = h.gw.store.get(h.key()).session_id
        status, body = admin_call(api, admin_path(h.key(), "reset"), method="POST")
        assert status == 202
        h.idle()
        assert h.gw.store.get(h.key()).session_id != before
        assert "✨ Started a new session." in h.texts()

    def test_unsuspend(self, make_harness):
        h = make_harness()
        api = admin_api(h.gw)
        h.send("hello")
        h.idle()
        assert h.gw.store.suspend_session(h.key())
        listed = admin_call(api, "/v1/admin/sessions", query="state=suspended")[1]["sessions"]
        assert [s["session_key"] for s in listed] == [h.key()]
        assert admin_call(api, admin_path(h.key(), "unsuspend"), method="POST")[0] == 200
        assert h.gw.store.get(h.key()).suspended is False
        assert admin_call(api, admin_path("agent:main:telegram:dm:none", "unsuspend"),
                          method="POST")[0] == 404
        assert admin_call(api, admin_path("agent:main:telegram:dm:none", "cancel"),
                          method="POST")[0] == 404
        assert admin_call(api, admin_path(h.key(), "cancel"))[0] == 405


class TestDeliveries:
    def test_a_failed_delivery_is_listed_and_retried(self, make_harness):
        h = make_harness()
        api = admin_api(h.gw)
        h.adapter.fail_sends = True
        h.send("hello")
        h.idle()
        status, body = admin_call(api, "/v1/admin/deliveries")
        assert status == 200
        [row] = body["deliveries"]
        assert (row["session_key"], row["content"], row["state"]) == (
            h.key(), "echo: hello", "failed")
        assert row["attempts"] >= 1 and row["last_error"]
        assert admin_call(api, "/v1/admin/deliveries", query="state=abandoned")[1] == {
            "deliveries": []}
        assert admin_call(api, "/v1/admin/deliveries", query="state=delivered")[0] == 400
        oid = row["obligation_id"]
        retry = f"/v1/admin/deliveries/{oid}/retry"
        assert admin_call(api, retry)[0] == 405
        status, body = admin_call(api, retry, method="POST")
        assert (status, body["state"], body["was"]) == (202, "pending", "failed")
        [pending] = h.gw.store.ledger_rows(session_key=h.key())
        assert (pending["state"], pending["attempts"], pending["last_error"]) == (
            "pending", 0, None)
        assert admin_call(api, retry, method="POST")[0] == 409  # pending now, not failed
        h.adapter.fail_sends = False
        h.gw.housekeeping_tick()  # the ledger sweep sends it
        assert h.adapter.wait_for(1) and h.texts() == ["echo: hello"]
        assert h.gw.store.ledger_rows(session_key=h.key())[0]["state"] == "delivered"
        assert admin_call(api, retry, method="POST")[0] == 409
        assert admin_call(api, "/v1/admin/deliveries/nope/retry", method="POST")[0] == 404
