"""Shared fixtures: no actor outlives its test; ``make_harness`` starts a Gateway with a
scripted agent, an in-memory adapter and a fake clock (and fake memory probe)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pykka
import pytest

from hermes_actors import Gateway, InMemoryAdapter, MessageEvent, SessionSource, load_config
from hermes_actors.testing import FakeClock, FakeMemoryProbe, Gates, ScriptedAgent


@pytest.fixture(autouse=True)
def _stop_all_actors():
    yield
    pykka.ActorRegistry.stop_all(block=True, timeout=10)


@dataclass
class Harness:
    """A started gateway with a scripted agent, its gates, log and adapter."""

    gw: Gateway
    adapter: InMemoryAdapter
    gates: Gates
    log: list
    clock: FakeClock
    probe: FakeMemoryProbe
    agents: list = field(default_factory=list)

    def send(self, text: str, *, chat_id: str = "42", user_id: str = "7", **kw) -> str:
        src = SessionSource("telegram", chat_id=chat_id, user_id=user_id,
                            **{k: v for k, v in kw.items() if k != "internal"})
        return self.gw.submit(MessageEvent(source=src, text=text,
                                           internal=kw.get("internal", False)))

    def wake(self, text: str, *, chat_id: str = "42", user_id: str = "7",
             metadata: dict | None = None) -> str:
        src = SessionSource("telegram", chat_id=chat_id, user_id=user_id)
        return self.gw.submit(MessageEvent(source=src, text=text, internal=True,
                                           metadata=metadata or {}))

    def hold(self, gate: str = "g", command: str = "hold") -> None:
        """Start a ``hold``/``wait`` turn on ``gate`` and return once it is running."""
        self.send(f"{command} {gate}")
        assert self.gates.wait_until_waiting(gate)

    def key(self, chat_id: str = "42") -> str:
        return f"agent:main:telegram:dm:{chat_id}"

    def slow_send(self, text: str) -> tuple[threading.Event, threading.Event]:
        """Make the adapter's send of ``text`` wait: ``(sending, release)``, set once that
        send began, and the event that lets it go on."""
        sending, release, real_send = threading.Event(), threading.Event(), self.adapter.send

        def send(target, sent_text):
            if sent_text == text:
                sending.set()
                assert release.wait(10)
            return real_send(target, sent_text)

        self.adapter.send = send
        return sending, release

    def handled(self, chat_id: str = "42") -> None:
        """Return once the session's actor has handled every message sent to it so far (an
        ask queued behind them in its mailbox): a command sent before a gate opens is then
        carried out before the held turn can end."""
        self.gw.session_statistics(self.key(chat_id))

    def texts(self) -> list[str]:
        return self.adapter.texts()

    def idle(self) -> None:
        assert self.gw.wait_idle(timeout=20), "gateway did not become idle"

    def seen(self) -> list[str]:
        return [s.message for s in self.log]


@pytest.fixture
def harness_store() -> dict:
    """The ``store`` part of ``make_harness``'s config: the default backend (SQLite).

    A scenario module runs on every backend by overriding it::

        @pytest.fixture
        def harness_store(every_backend):
            return every_backend
    """
    return {}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def every_backend(request) -> dict:
    """Config for each store backend in turn: SQLite in the home, then PostgreSQL (a fresh
    database on the test server)."""
    if request.param == "sqlite":
        return {}
    dsn = request.getfixturevalue("postgres_dsn")
    return {"store": {"backend": "postgres", "dsn": dsn, "pool_size": 2}}


@pytest.fixture
def make_harness(tmp_path, harness_store):
    made: list[Harness] = []

    def make(home=None, **config) -> Harness:
        config = {**harness_store, **config}
        gates, log, agents = Gates(), [], []
        clock = FakeClock()
        adapter = InMemoryAdapter("telegram")

        def factory(context):
            agent = ScriptedAgent(gates=gates, log=log)
            agents.append(agent)
            return agent

        probe = FakeMemoryProbe(anon_mb=100.0)
        gw = Gateway(home or tmp_path / f"home{len(made)}", config=load_config(config, env={}),
                     agent_factory=factory, adapters=[adapter], clock=clock,
                     memory_probe=probe)
        gw.start()
        h = Harness(gw, adapter, gates, log, clock, probe, agents)
        made.append(h)
        return h

    yield make
    for h in made:
        h.gates.open_all()
        h.gw.stop(drain_timeout=5)


# -- PostgreSQL: one throw-away server per session, a fresh database per test ------------------


class _RunServer:
    """The session's server, and the line saying it is gone once a test found it gone."""

    server = None
    gone: str | None = None

    @classmethod
    def check(cls) -> str | None:
        """The one line saying the run's server is gone (remembered), else ``None``."""
        if cls.gone is None and cls.server is not None:
            cls.gone = cls.server.gone()
        return cls.gone


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server (``HERMES_TEST_POSTGRES_DSN``, else an embedded one started
    for this session, on its own port and data directory, and stopped at its end)."""
    from hermes_actors.testing.postgres import start_test_server

    server = start_test_server()
    _RunServer.server, _RunServer.gone = server, None
    yield server
    _RunServer.server = None
    server.stop()


@pytest.fixture
def postgres_dsn(postgres_server) -> str:
    """The DSN of a fresh, empty database, dropped after the test. Once the run's server
    is gone, every test that needs it fails with the one line saying so."""
    import psycopg

    gone = _RunServer.gone
    if gone is None:
        try:
            name = postgres_server.create_database()
        except psycopg.Error:
            gone = _RunServer.check()
            if gone is None:
                raise
    if gone is not None:
        pytest.fail(gone, pytrace=False)
    yield postgres_server.dsn_for(name)
    try:
        postgres_server.drop_database(name)
    except psycopg.Error:
        if _RunServer.check() is None:
            raise
        # gone: the test (or the next one) says so in its one line


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that failed because the run's PostgreSQL server is gone says so in one line
    (not the traceback of whichever connection noticed first)."""
    outcome = yield
    report = outcome.get_result()
    if (report.failed and call.excinfo is not None and _RunServer.server is not None
            and "postgres_server" in getattr(item, "fixturenames", ())
            and not call.excinfo.errisinstance(pytest.fail.Exception)):
        gone = _RunServer.check()
        if gone is not None:
            report.longrepr = gone


@pytest.fixture
def bot_api():
    """A running fake Telegram Bot API server on loopback, closed after the test."""
    from telegram_adapter.fake_bot_api import FakeBotApi

    api = FakeBotApi()
    yield api
    api.close()


@pytest.fixture
def slack_api():
    """A running fake Slack Web API on loopback, closed after the test."""
    from slack_adapter.fake_slack_api import FakeSlackApi

    api = FakeSlackApi()
    yield api
    api.close()


@pytest.fixture
def graph_api():
    """A running fake WhatsApp Cloud (Graph) API on loopback, closed after the test."""
    from whatsapp_adapter.fake_graph_api import FakeGraphApi

    api = FakeGraphApi()
    yield api
    api.close()
