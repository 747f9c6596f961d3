"""HTTP 503 bodies (and their log line) never show a DSN's password, even one a driver's
message echoed raw (issue 37 §2)."""

from __future__ import annotations

import io
import json
import logging
from types import SimpleNamespace

import pytest

from hermes_actors.adapters import http
from hermes_actors.adapters.outbox import Outbox
from hermes_actors.errors import HermesActorsError, StoreUnavailableError
from hermes_actors.model.dsn import remember

SECRET = "Xy?9#secret"
DSN = f"postgresql://hermes:{SECRET}@db.example/hermes"


@pytest.mark.parametrize("error", [
    StoreUnavailableError(f"cannot read: connection to {DSN} failed: password {SECRET}"),
    HermesActorsError(f"the gateway is stopping ({DSN})"),
])
def test_a_503_body_holds_no_password(tmp_path, caplog, monkeypatch, error):
    remember(DSN)  # (as the configuration and the store's Server do)
    app = http.HttpApi(SimpleNamespace(), Outbox(),
                       SimpleNamespace(token=None, max_body=1000, platforms=()))

    def fail(request, route):
        raise error

    monkeypatch.setattr(app, "_handle", fail)
    statuses: list[str] = []
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/v1/sessions", "QUERY_STRING": "",
               "wsgi.input": io.BytesIO(b""), "CONTENT_LENGTH": "0"}
    with caplog.at_level(logging.ERROR):
        body = b"".join(app(environ, lambda status, headers: statuses.append(status)))
    assert statuses[0].startswith("503")
    text = json.loads(body)["error"]
    assert SECRET not in text and "9#secret" not in text
    assert "host=db.example dbname=hermes user=hermes" in text
    assert all(SECRET not in r.getMessage() for r in caplog.records)
