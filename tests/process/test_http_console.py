"""The operator console's server side (issue 39): ``GET /console`` and its files, shipped as
package data, and ``GET /v1/admin/events``, the admin event stream the page follows; called
as a WSGI application in front of a real gateway (``make_harness``). The page itself is
driven in a real browser by ``test_console_browser.py``."""

from __future__ import annotations

import configparser
import fnmatch
import json
import re
from pathlib import Path

import pytest
from wsgi_api import ADMIN, TOKEN, admin_api, request

from hermes_actors.adapters.http import HttpApi
from hermes_actors.adapters.http_admin_events import look
from hermes_actors.adapters.http_requests import RequestError
from hermes_actors.adapters.outbox import Outbox

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = ROOT / "hermes_actors" / "adapters" / "console"


def _api(gateway, *, admin: str | None = ADMIN, max_streams: int = 4) -> HttpApi:
    api = admin_api(gateway, admin=admin, outbox=Outbox(), max_streams=max_streams,
                    stream_keepalive=30.0)
    api.admin_events_interval = 0.01
    return api


def _events(chunk: bytes) -> dict[str, object]:
    """``{event name: data}`` of the events in one chunk of the stream."""
    found = {}
    for block in chunk.decode("utf-8").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines()
                      if line and not line.startswith(":"))
        if "event" in fields:
            found[fields["event"]] = json.loads(fields["data"])
    return found


class TestPage:
    def test_the_page_and_its_files_need_no_token_and_have_their_types(self, make_harness):
        api = _api(make_harness().gw)
        expected = {"/console": "text/html", "/console/": "text/html",
                    "/console/console.js": "text/javascript",
                    "/console/console.css": "text/css",
                    "/console/favicon.svg": "image/svg+xml"}
        for path, content_type in expected.items():
            status, headers, body = request(api, path)
            assert status == 200, path
            assert headers["Content-Type"].startswith(content_type), (path, headers)
            assert headers["X-Content-Type-Options"] == "nosniff"
            assert "script-src 'self'" in headers["Content-Security-Policy"]
            assert "connect-src 'self'" in headers["Content-Security-Policy"]
            assert b"".join(body)
        page = b"".join(request(api, "/console")[2]).decode()
        assert '<script src="/console/console.js"' in page

    def test_unknown_files_other_methods_and_an_off_console(self, make_harness):
        gw = make_harness().gw
        api = _api(gw)
        assert request(api, "/console/../setup.cfg")[0] == 404
        assert request(api, "/console/nothing.js")[0] == 404
        assert request(api, "/console", method="POST")[0] == 405
        # without an admin token the operator routes, and so the console, are off
        status, _, body = request(_api(gw, admin=None), "/console")
        assert status == 404 and "set http.admin_token" in json.loads(b"".join(body))["error"]

    def test_nothing_is_loaded_from_elsewhere(self):
        """No CDN and no build step: every file of the console is plain text in the
        package, and none of them names another origin."""
        for path in CONSOLE.iterdir():
            text = re.sub(r'xmlns="[^"]*"', "", path.read_text(encoding="utf-8"))  # (a name)
            assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text, re.I), path
        page = (CONSOLE / "index.html").read_text(encoding="utf-8")
        for ref in re.findall(r'(?:src|href)="([^"]+)"', page):
            assert ref.startswith("/console/"), ref
        assert "<script>" not in page and "<style>" not in page  # (CSP: 'self' only)
        assert not re.search(r"<[^>]+\son[a-z]+=", page)  # no inline handlers (CSP forbids)

    def test_an_installed_package_ships_the_console(self):
        """setup.cfg's package data covers every console file (an installed, non-editable
        package has them)."""
        config = configparser.ConfigParser()
        config.read(ROOT / "setup.cfg")
        patterns = config["options.package_data"]["hermes_actors"].split(",")
        patterns = [p.strip() for line in patterns for p in line.split()]
        for path in CONSOLE.iterdir():
            relative = path.relative_to(ROOT / "hermes_actors").as_posix()
            assert any(fnmatch.fnmatch(relative, p) for p in patterns), relative


class TestEvents:
    def test_the_stream_sends_the_views_and_each_change(self, make_harness):
        h = make_harness()
        api = _api(h.gw)
        h.send("hello", chat_id="1")
        h.idle()
        status, headers, body = request(api, "/v1/admin/events", token=ADMIN)
        assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
        assert api.streams.open == 1
        chunks = iter(body)
        assert next(chunks).startswith(b"retry: ")
        first = _events(next(chunks))
        assert [s["session_key"] for s in first["sessions"]["sessions"]] == [h.key("1")]
        assert first["deliveries"] == {"deliveries": []}
        cluster = request(api, "/v1/admin/cluster", token=ADMIN)[0]
        assert ("cluster" in first) is (cluster == 200)  # (a single gateway: 404, not sent)

        h.send("hello", chat_id="2")  # a conversation that starts after the client connected
        keys: list[str] = []
        while h.key("2") not in keys:
            changed = _events(next(chunks))
            assert set(changed) <= {"sessions"}  # only what changed is sent again
            keys = [s["session_key"] for s in changed["sessions"]["sessions"]]
        assert h.key("1") in keys
        api._outbox.close()  # the gateway stops: the stream ends
        assert b"stopping" in b"".join(chunks)
        body.close()
        assert api.streams.open == 0

    def test_a_view_is_sent_only_while_its_route_answers(self):
        answers = {"/v1/admin/sessions": {"sessions": []},
                   "/v1/admin/deliveries": {"deliveries": []}}

        def handle(method: str, path: str, query: str):
            assert method == "GET" and query == ("limit=5" if "sessions" in path else "")
            if path not in answers:
                raise RequestError(404, f"no such endpoint: {path}")
            return 200, answers[path]

        assert look(handle, "limit=5") == {"sessions": {"sessions": []},
                                           "deliveries": {"deliveries": []}}
        answers["/v1/admin/cluster"] = {"nodes": [{"node_id": "n1"}], "shards": []}
        assert look(handle, "limit=5")["cluster"] == answers["/v1/admin/cluster"]
        del answers["/v1/admin/sessions"]  # the sessions route refusing is the request's error
        with pytest.raises(RequestError):
            look(handle, "limit=5")

    def test_tokens_query_and_the_stream_limit(self, make_harness):
        api = _api(make_harness().gw, max_streams=1)
        for token in (None, "wrong", TOKEN):
            assert request(api, "/v1/admin/events", token=token)[0] == 401
        assert request(api, "/v1/admin/events", token=ADMIN, query="state=bogus")[0] == 400
        assert request(api, "/v1/admin/events", token=ADMIN, method="POST")[0] == 405
        status, _, held = request(api, "/v1/admin/events", token=ADMIN)
        assert status == 200
        assert request(api, "/v1/admin/events", token=ADMIN)[0] == 503
        held.close()
        assert api.streams.open == 0
        assert request(_api(make_harness().gw, admin=None), "/v1/admin/events",
                       token=ADMIN)[0] == 404
