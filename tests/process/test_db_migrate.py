"""The ``db migrate`` round trip with real processes (issue 19's must-show): a SQLite home
killed mid-turn is moved to PostgreSQL, started there, and recovers exactly as the same
home started on SQLite does.

Each scenario leaves a home the way a crash leaves it (``hermes-actors run`` with the
scripted agent, killed at a crash point while other sessions are mid-turn), copies it twice,
moves one copy with ``db migrate`` and starts each copy once: on SQLite, and on PostgreSQL
with the DSN. Both must log the same recovery summary, deliver the same texts to the same
chats, and stop with the same durable state (ledger, inbox, routing flags, transcripts,
outbox, node state; ids included, since the copy's sequences continue where SQLite's did).
The processes are followed through their log lines, their HTTP answers (the outbox long
poll waits for replies) and the session entries they serve; nothing sleeps on a guess.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import psycopg
import pytest
import yaml

from hermes_actors.runtime.delivery import RECOVERED_PREFIX
from hermes_actors.testing import wait_until

from .conftest import GatewayProcess, run_cli

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

KEY = "agent:main:webhook:dm:{}"
CRASH = "HERMES_ACTORS_CRASHPOINT"


def wait_for_marker(gateway: GatewayProcess, chat: str, timeout: float = 30.0) -> None:
    """Until the turn of ``chat`` is durably marked (the entry the gateway serves is
    published only after its commit)."""
    def marked() -> bool:
        status, body = gateway.session(KEY.format(chat))
        return status == 200 and bool(body["entry"].get("active_turn_token"))

    wait_until(marked, timeout, 0.02, f"the mark of the turn of {chat!r}")


def crash_with(gateway: GatewayProcess, chat: str, text: str) -> None:
    """Post ``text``, whose turn reaches the armed crash point: the process exits 137,
    maybe before it answered the post."""
    try:
        gateway.post(chat, text)
    except (OSError, AssertionError):
        pass  # the process died before it answered
    assert gateway.proc.wait(timeout=30) == 137, gateway.stderr.text()[-2000:]
    gateway.stderr.expect("crash point .* reached")


def write_config(home: Path, **settings) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(yaml.safe_dump(settings))


# -- the scenarios: each leaves a crashed home, and says what its restart owes ------------------


def mid_turn(home: Path, start) -> tuple[dict[str, list[str]], str]:
    """Markers on two sessions (no reply yet), a ``/queue`` waiting in the inbox, a reply
    recorded and claimed (``attempting``) when the process died, older delivered rows."""
    first = start(home)
    first.post("d", "hello d")
    first.replies("d", 1)
    assert first.stop() == 0
    crashing = start(home, {CRASH: "after_ledger_recorded"})
    crashing.post("a", "sleep 60")
    wait_for_marker(crashing, "a")
    crashing.post("b", "sleep 60")
    wait_for_marker(crashing, "b")
    crashing.post("a", "/queue later")
    crashing.replies("a", 1)  # its acknowledgement: an outbox row, a delivered notice
    crash_with(crashing, "c", "hello c")
    return ({"a": ["resumed: sleep 60\necho: later"], "b": ["resumed: sleep 60"],
             "c": [RECOVERED_PREFIX + "echo: hello c"]},
            "redelivered=1 resumed=2 suspended=0 replayed_inbox=1")


def reply_in_transcript(home: Path, start) -> tuple[dict[str, list[str]], str]:
    """Without the ledger: one session mid-turn with no reply, one whose reply reached
    the transcript while its marker was still set."""
    write_config(home, delivery_ledger=False)
    crashing = start(home, {CRASH: "after_reply_persisted"})
    crashing.post("a", "sleep 60")
    wait_for_marker(crashing, "a")
    crash_with(crashing, "c", "hello c")
    return ({"a": ["resumed: sleep 60"], "c": [RECOVERED_PREFIX + "echo: hello c"]},
            "recovered_replies=1 redelivered=0 resumed=1 suspended=0 replayed_inbox=0")


def mid_recovery(home: Path, start) -> tuple[dict[str, list[str]], str]:
    """:func:`reply_in_transcript`, then a start with the ledger that dies during its
    recovery: the recovered reply waits as a ``pending`` row, the other session is flagged
    for resume, the restart counts are written."""
    reply_in_transcript(home, start)
    write_config(home, delivery_ledger=True)
    crashed = run_cli("run", "--home", str(home), "--port", "0", "--agent", "scripted",
                      env={CRASH: "during_recovery"})
    assert crashed.returncode == 137, crashed.stderr[-2000:]
    rows = sqlite_state(home)
    assert [(r[1], r[2]) for r in rows["deliveries"]] == [("recovered", "pending")]
    return ({"a": ["resumed: sleep 60"], "c": [RECOVERED_PREFIX + "echo: hello c"]},
            "recovered_replies=0 redelivered=1 resumed=1 suspended=0 replayed_inbox=0")


SCENARIOS = {"mid_turn": mid_turn, "reply_in_transcript": reply_in_transcript,
             "mid_recovery": mid_recovery}


# -- the durable outcome, the same way from either database ------------------------------------

_QUERIES = {
    "outbox": "SELECT cursor, chat_id, text, kind FROM outbox ORDER BY cursor",
    "deliveries": "SELECT session_key, kind, state, attempts, content FROM deliveries",
    "inbox": "SELECT seq, session_key, internal, consumed_reason FROM inbox ORDER BY seq",
    "routing": "SELECT session_key, active_turn_token IS NULL, resume_pending, suspended"
               " FROM routing ORDER BY session_key",
    "messages": "SELECT m.id, s.session_key, m.role, m.content, m.is_reply FROM messages AS m"
                " JOIN sessions AS s ON s.id = m.session_id ORDER BY m.id",
    "node_state": "SELECT name, value FROM node_state ORDER BY name",
}


def _normalized(rows: dict[str, list[tuple]]) -> dict[str, object]:
    """What must be equal after the same start on either backend: the ledger as a sorted
    list (its new rows' ids hold random turn tokens), outbox texts per chat in order and
    the set of cursors, inbox and message rows per session key in order and the set of
    their ids, the flags, the restart counts (boot times and pids differ, and so do the ids
    of sessions created after the start)."""
    def flat(row: tuple) -> tuple:
        return tuple(int(v) if isinstance(v, bool) else v for v in row)

    rows = {name: [flat(r) for r in found] for name, found in rows.items()}
    per_chat: dict[str, list] = {}
    for _, chat, text, kind in rows["outbox"]:
        per_chat.setdefault(chat, []).append((text, kind))
    per_session: dict[str, list] = {}
    for _, key, role, content, is_reply in rows["messages"]:
        per_session.setdefault(key, []).append((role, content, is_reply))
    inbox: dict[str, list] = {}
    for _, key, internal, reason in rows["inbox"]:
        inbox.setdefault(key, []).append((internal, reason))
    node = dict(rows["node_state"])
    return {
        "outbox": per_chat, "cursors": sorted(r[0] for r in rows["outbox"]),
        "deliveries": sorted(rows["deliveries"]), "routing": rows["routing"],
        "messages": per_session, "message_ids": sorted(r[0] for r in rows["messages"]),
        "inbox": inbox, "inbox_seqs": sorted(r[0] for r in rows["inbox"]),
        "restart_counts": json.loads(node.get("restart_counts", "{}")),
        "node_values": sorted(node),
    }


def sqlite_state(home: Path) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        return {name: conn.execute(sql).fetchall() for name, sql in _QUERIES.items()}
    finally:
        conn.close()


def postgres_state(dsn: str) -> dict[str, list[tuple]]:
    with psycopg.connect(dsn) as conn:
        return {name: conn.execute(sql).fetchall() for name, sql in _QUERIES.items()}


def restart(start, home: Path, owed: dict[str, list[str]], env=None) -> tuple[str, dict]:
    """Start the crashed home, wait for what its recovery owes each chat (after the last
    cursor the crash left), answer one new message, stop gracefully; returns the recovery
    summary and what each chat received."""
    after = max((row[0] for row in sqlite_state(home)["outbox"]), default=0)
    gateway = start(home, env)
    summary = gateway.recovery()
    received = {}
    for chat, texts in owed.items():
        received[chat] = [m["text"] for m in gateway.replies(chat, len(texts), after=after)]
    gateway.post("fresh", "after the move")
    received["fresh"] = [m["text"] for m in gateway.replies("fresh", 1, after=after)]
    assert gateway.stop() == 0
    return summary, received


@pytest.fixture
def start(start_gateway):
    def run(home: Path, env: dict[str, str] | None = None) -> GatewayProcess:
        return start_gateway("--agent", "scripted", home=home, env=env)

    return run


class TestRoundTrip:
    """A crashed SQLite home, moved, recovers on PostgreSQL as it would have on SQLite."""

    @pytest.mark.parametrize("scenario", sorted(SCENARIOS))
    def test_recovers_exactly_as_on_sqlite(self, scenario, start, tmp_path, postgres_dsn):
        crashed = tmp_path / "crashed"
        owed, outcome = SCENARIOS[scenario](crashed, start)
        on_sqlite, on_postgres = tmp_path / "on_sqlite", tmp_path / "on_postgres"
        shutil.copytree(crashed, on_sqlite)
        shutil.copytree(crashed, on_postgres)
        database = {p.name: p.read_bytes() for p in on_postgres.glob("state.db*")
                    if not p.name.endswith("-shm")}

        moved = run_cli("db", "migrate", "--home", str(on_postgres), "--to", postgres_dsn)
        assert moved.returncode == 0, moved.stderr
        assert "db migrate: copied messages:" in moved.stderr
        assert database == {p.name: p.read_bytes() for p in on_postgres.glob("state.db*")
                            if not p.name.endswith("-shm")}  # read, never written
        before = _normalized(postgres_state(postgres_dsn))
        assert before == _normalized(sqlite_state(crashed))

        expected_sqlite = restart(start, on_sqlite, owed)
        env = {"HERMES_STORE_BACKEND": "postgres", "HERMES_STORE_DSN": postgres_dsn}
        expected_postgres = restart(start, on_postgres, owed, env)
        summary, received = expected_sqlite
        assert received == {**owed, "fresh": ["echo: after the move"]}
        assert summary.startswith("recovery: clean_shutdown=False") and summary.endswith(
            outcome)
        assert expected_postgres == expected_sqlite
        assert (_normalized(postgres_state(postgres_dsn))
                == _normalized(sqlite_state(on_sqlite)))
        # The copy continued the ids: the new rows follow those that were moved.
        assert min(set(_normalized(postgres_state(postgres_dsn))["cursors"])
                   - set(before["cursors"]), default=1) > max(before["cursors"], default=0)


class TestRefusesARunningGateway:
    def test_a_live_gateway_process_keeps_its_home(self, start_gateway, tmp_path,
                                                   postgres_dsn):
        home = tmp_path / "home"
        gateway = start_gateway(home=home)
        gateway.post("x", "hello")
        gateway.replies("x", 1)
        refused = run_cli("db", "migrate", "--home", str(home), "--to", postgres_dsn)
        assert refused.returncode == 2
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
        assert f"in use by a running gateway (pid {gateway.proc.pid})" in refused.stderr
        assert gateway.stop() == 0
        with psycopg.connect(postgres_dsn) as conn:
            assert conn.execute("SELECT to_regclass('sessions')").fetchone() == (None,)
        moved = run_cli("db", "migrate", "--home", str(home), "--to", postgres_dsn)
        assert moved.returncode == 0, moved.stderr
