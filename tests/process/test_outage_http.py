"""During an outage of the database server the HTTP API says so at once (issue 37 §3):
``/healthz`` answers ``503 {"status": "store_unavailable"}`` (not "stopping"), ``GET
/v1/outbox`` 503 within a second (not after the read pool's timeout), a full write queue is
a 503 with ``Retry-After``, and psycopg's pool logs one warning per outage, not dozens."""

from __future__ import annotations

import json
import logging
import threading
import time

from hermes_actors.adapters.http import HttpApi
from hermes_actors.config import HttpConfig
from hermes_actors.errors import StoreBusyError
from hermes_actors.store.backends.postgres.connection import PoolWarnings


class SlowOutbox:
    """An outbox whose store does not answer (a read would wait for the pool's timeout)."""

    def head(self) -> int:
        time.sleep(10)
        raise AssertionError("the store was asked during an outage")

    def wait(self, *args, **kwargs):
        return self.head()


class Slot:
    """A ``GatewaySlot`` between an outage and the new gateway's start."""

    running = False
    replacing = True
    outage = threading.Event()


class Running:
    running = True
    replacing = False

    def __init__(self) -> None:
        self.outage = threading.Event()


def _call(app, method: str, path: str, query: str = "") -> tuple[str, dict, dict]:
    answer: list = []
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query,
               "wsgi.input": None}
    body = b"".join(app(environ, lambda status, headers: answer.extend([status, headers])))
    return answer[0], dict(answer[1]), json.loads(body)


def test_healthz_says_the_store_is_unavailable_while_the_gateway_is_replaced():
    app = HttpApi(Slot(), SlowOutbox(), HttpConfig())
    status, _, body = _call(app, "GET", "/healthz")
    assert status.startswith("503") and body["status"] == "store_unavailable"


def test_healthz_says_so_once_the_outage_is_reported():
    gateway = Running()
    gateway.outage.set()
    app = HttpApi(gateway, SlowOutbox(), HttpConfig())
    status, _, body = _call(app, "GET", "/healthz")
    assert status.startswith("503") and body["status"] == "store_unavailable"


def test_the_outbox_answers_503_at_once():
    app = HttpApi(Slot(), SlowOutbox(), HttpConfig())
    began = time.monotonic()
    status, headers, body = _call(app, "GET", "/v1/outbox", "chat_id=1&wait=30")
    assert time.monotonic() - began < 1.0
    assert status.startswith("503") and "unavailable" in body["error"]
    assert "Retry-After" in headers


def test_a_full_write_queue_is_a_503_to_retry_soon():
    class Busy(SlowOutbox):
        def head(self) -> int:
            raise StoreBusyError("the database's write queue is full")

    app = HttpApi(Running(), Busy(), HttpConfig())
    status, headers, body = _call(app, "GET", "/v1/outbox", "chat_id=1")
    assert status.startswith("503") and headers["Retry-After"] == "1"
    assert "busy" in body["error"]


def test_pool_warnings_are_one_line_per_outage(caplog):
    now = [0.0]
    logger = logging.getLogger("psycopg.pool")
    assert any(isinstance(f, PoolWarnings) for f in logger.filters)  # installed
    mine = PoolWarnings(quiet=60.0, clock=lambda: now[0])
    installed = [f for f in logger.filters if isinstance(f, PoolWarnings)]
    for f in installed:
        logger.removeFilter(f)
    logger.addFilter(mine)
    try:
        with caplog.at_level(logging.WARNING, logger="psycopg.pool"):
            for _ in range(40):  # an outage: a failed attempt every half second
                logger.warning("error connecting in %r: %s", "hermes-actors-reads", "refused")
                now[0] += 0.5
            now[0] += 120  # back, and quiet
            logger.warning("error connecting in %r: %s", "hermes-actors-reads", "refused")
    finally:
        logger.removeFilter(mine)
        for f in installed:
            logger.addFilter(f)
    lines = [r.getMessage() for r in caplog.records if r.name == "psycopg.pool"]
    assert len(lines) == 2, lines  # one per outage
    assert "muted" in lines[0]
    assert mine.muted == 39
