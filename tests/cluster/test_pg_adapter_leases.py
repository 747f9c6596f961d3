"""The pull adapters' leases on the test server (``adapter_leases``, migration 5): each
statement's rules, races of several connections for one adapter (one owner per tenure,
epochs growing by one per acquisition, stale epochs refused), and two lease managers
sharing one adapter: exactly one holds it, a clean stop hands it over at the other's next
round, a crash only after expiry, a renewal of a tenure that ended loses it at once."""

from __future__ import annotations

import threading

import pytest

from hermes_actors.cluster.events import AdapterListener
from hermes_actors.cluster.membership import LeaseManager
from hermes_actors.process.cluster import format_status, status_report
from hermes_actors.testing import FakeClock

from .test_pg_leases import sql

pytestmark = pytest.mark.postgres

TTL = 30.0
BOT = "telegram:123"


def expire_adapters(dsn: str, owner: str) -> None:
    """Make ``owner``'s adapter leases a minute old (instead of waiting)."""
    sql(dsn, "UPDATE adapter_leases SET expires_at = expires_at - 60 WHERE owner = %s",
        (owner,))


class TestStatements:
    def test_the_first_acquisition_creates_the_row_taken(self, pg_leases, postgres_dsn):
        leases = pg_leases()
        leases.ensure_cluster(2, "a")
        assert sql(postgres_dsn, "SELECT count(*) FROM adapter_leases") == [(0,)]
        [taken] = leases.acquire_adapters("a", [BOT, BOT], TTL)
        assert (taken.name, taken.epoch) == (BOT, 1)
        [row] = leases.snapshot().adapters
        assert (row.name, row.owner, row.epoch) == (BOT, "a", 1)
        assert row.expires_at == pytest.approx(taken.expires_at)
        assert row.expires_at - row.acquired_at == pytest.approx(TTL)

    def test_acquire_takes_free_expired_and_own_leases_only(self, pg_leases, postgres_dsn):
        leases = pg_leases()
        leases.ensure_cluster(2, "a")
        leases.acquire_adapters("a", [BOT], TTL)
        taken = leases.acquire_adapters("b", [BOT, "telegram:9"], TTL)
        assert [(x.name, x.epoch) for x in taken] == [("telegram:9", 1)]  # BOT is a's
        [again] = leases.acquire_adapters("a", [BOT], TTL)  # a restarted node takes it back
        assert again.epoch == 2
        expire_adapters(postgres_dsn, "a")
        [stolen] = leases.acquire_adapters("b", [BOT], TTL)
        assert stolen.epoch == 3
        leases.release_adapters("b", {BOT: 3})
        [free] = leases.acquire_adapters("a", [BOT], TTL)  # a free one
        assert free.epoch == 4
        assert [(r.name, r.owner, r.epoch) for r in leases.snapshot().adapters] == [
            (BOT, "a", 4), ("telegram:9", "b", 1)]

    def test_renew_needs_owner_epoch_and_time(self, pg_leases, postgres_dsn):
        leases = pg_leases()
        leases.ensure_cluster(2, "a")
        leases.acquire_adapters("a", [BOT], TTL)
        before = leases.snapshot().adapters[0].expires_at
        assert set(leases.renew_adapters("a", {BOT: 1}, TTL + 10)) == {BOT}
        assert leases.snapshot().adapters[0].expires_at > before
        assert leases.renew_adapters("a", {BOT: 2}, TTL) == {}  # a stale (future) epoch
        assert leases.renew_adapters("b", {BOT: 1}, TTL) == {}  # not b's
        expire_adapters(postgres_dsn, "a")
        assert leases.renew_adapters("a", {BOT: 1}, TTL) == {}  # expired: acquire again
        [taken] = leases.acquire_adapters("b", [BOT], TTL)
        assert leases.renew_adapters("a", {BOT: 1}, TTL) == {}
        assert leases.release_adapters("a", {BOT: 1}) == set()  # nor released by a
        assert set(leases.renew_adapters("b", {BOT: taken.epoch}, TTL)) == {BOT}
        assert leases.snapshot().adapters[0].owner == "b"

    def test_release_frees_only_the_callers_tenure(self, pg_leases):
        leases = pg_leases()
        leases.ensure_cluster(2, "a")
        leases.acquire_adapters("a", [BOT], TTL)
        assert leases.release_adapters("b", {BOT: 1}) == set()
        assert leases.release_adapters("a", {BOT: 5}) == set()
        assert leases.release_adapters("a", {BOT: 1}) == {BOT}
        [row] = leases.snapshot().adapters
        assert (row.owner, row.expires_at, row.acquired_at, row.epoch) == (None, None, None, 1)


class TestRaces:
    """Real concurrency on the server: each racer has its own connection."""

    def _race(self, pg_leases, work, racers: int = 5) -> list[BaseException]:
        conns = [pg_leases() for _ in range(racers)]
        barrier = threading.Barrier(racers)
        errors: list[BaseException] = []

        def run(name: str, leases) -> None:
            try:
                barrier.wait(10)
                work(name, leases)
            except BaseException as exc:  # noqa: BLE001 - asserted by the caller
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(f"t{i}", c))
                   for i, c in enumerate(conns)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        return errors

    def test_racing_to_create_one_adapter_lease_gives_one_owner(self, pg_leases):
        pg_leases().ensure_cluster(2, "setup")
        won: list[tuple[str, int]] = []

        def work(name: str, leases) -> None:
            won.extend((name, x.epoch) for x in leases.acquire_adapters(name, [BOT], TTL))

        assert self._race(pg_leases, work) == []
        [(winner, epoch)] = won  # the row was inserted once, the others found it owned
        assert epoch == 1
        assert [(r.owner, r.epoch) for r in pg_leases().snapshot().adapters] == [(winner, 1)]

    def test_racing_over_expiring_leases_never_shares_a_tenure(self, pg_leases):
        pg_leases().ensure_cluster(2, "setup")
        log: list[tuple[int, str]] = []
        stale: list[str] = []

        def work(name: str, leases) -> None:
            mine: dict[str, int] = {}
            for _ in range(25):  # ttl 0: every lease is expired by the next statement
                for lease in leases.acquire_adapters(name, [BOT, "telegram:2"], 0.0):
                    if lease.name == BOT:
                        log.append((lease.epoch, name))
                    mine[lease.name] = lease.epoch
            stale.extend(leases.renew_adapters(name, mine, TTL))

        assert self._race(pg_leases, work) == []
        assert stale == []  # every tenure was over by the time its holder renewed
        final = {r.name: r.epoch for r in pg_leases().snapshot().adapters}
        epochs = sorted(epoch for epoch, _ in log)
        assert epochs == list(range(1, final[BOT] + 1))  # one owner per epoch, no gap


class Pulls(AdapterListener):
    """What a node's pull loop would do: records gains and losses."""

    def __init__(self, changed: threading.Condition) -> None:
        self.changed = changed
        self.events: list[tuple] = []

    def gained(self, name, epoch):
        with self.changed:
            self.events.append(("gained", name, epoch))
            self.changed.notify_all()

    def lost(self, name, epoch, reason):
        with self.changed:
            self.events.append(("lost", name, epoch, reason))
            self.changed.notify_all()


@pytest.fixture
def nodes(pg_leases):
    """``nodes(name)`` joins a manager that has the bot configured; all halted after."""
    made: list[LeaseManager] = []
    changed = threading.Condition()

    def make(name: str, clock: FakeClock | None = None, **kwargs) -> LeaseManager:
        extra = {"monotonic": clock.monotonic} if clock is not None else {}
        m = LeaseManager(pg_leases(), name, shards=2, lease_ttl=kwargs.get("ttl", TTL),
                         heartbeat=kwargs.get("heartbeat", 1.0), adapters=[BOT],
                         adapter_listener=Pulls(changed), **extra)
        m.join()
        made.append(m)
        return m

    make.changed = changed  # type: ignore[attr-defined]
    yield make
    for m in made:
        m.halt()


def holders(*managers: LeaseManager) -> list[str]:
    return [m.node_id for m in managers if BOT in m.adapters_held()]


class TestManagers:
    def test_exactly_one_node_holds_the_adapter_and_keeps_it(self, nodes):
        a, b = nodes("a"), nodes("b")
        assert a.tick().adapters_gained == (BOT,)
        for _ in range(3):
            assert b.tick().adapters_gained == () and a.tick().adapters_gained == ()
        assert holders(a, b) == ["a"]
        assert a.adapter_time_left(BOT, 1) > TTL - 5 and b.adapter_time_left(BOT, 1) == 0
        assert a.adapter_listener.events == [("gained", BOT, 1)]

    def test_a_clean_stop_hands_it_over_at_the_next_round(self, nodes, postgres_dsn):
        a, b = nodes("a"), nodes("b")
        a.tick()
        b.tick()
        assert a.stop(timeout=10)
        assert a.adapter_listener.events[-1] == ("lost", BOT, 1, "released")
        assert sql(postgres_dsn, "SELECT owner, epoch FROM adapter_leases") == [(None, 1)]
        assert b.tick().adapters_gained == (BOT,)  # at once, not after the ttl
        assert holders(a, b) == ["b"] and b.adapters_held() == {BOT: 2}

    def test_release_adapters_gives_it_up_and_never_takes_it_again(self, nodes):
        a, b = nodes("a"), nodes("b")
        a.tick()
        assert a.release_adapters(timeout=10)
        assert a.adapters_held() == {} and b.tick().adapters_gained == (BOT,)
        assert b.release_adapters(timeout=10)
        a.tick()
        assert holders(a, b) == []  # a gave it up for good, though it is free

    def test_a_crashed_holder_loses_it_only_after_expiry(self, nodes, postgres_dsn):
        a, b = nodes("a"), nodes("b")
        a.tick()
        a.halt()
        assert a.adapter_listener.events[-1] == ("lost", BOT, 1, "halted")
        assert b.tick().adapters_gained == ()  # still a's in the table
        expire_adapters(postgres_dsn, "a")
        assert b.tick().adapters_gained == (BOT,) and b.adapters_held() == {BOT: 2}

    def test_a_renewal_of_an_ended_tenure_loses_it_at_once(self, nodes, postgres_dsn):
        a = nodes("a")
        a.tick()
        sql(postgres_dsn, "UPDATE adapter_leases SET epoch = epoch + 1")  # another tenure
        tick = a.tick()
        assert tick.adapters_lost == (BOT,)
        assert ("lost", BOT, 1, "fenced") in a.adapter_listener.events
        assert a.adapter_time_left(BOT, 1) == 0

    def test_the_local_deadline_ends_the_lease_before_the_database_does(self, nodes):
        clock = FakeClock()
        a = nodes("a", clock=clock, ttl=10.0, heartbeat=2.0)
        b = nodes("b")
        a.tick()
        assert a.adapter_time_left(BOT, 1) == pytest.approx(10.0)
        clock.advance(9.5)  # no round ran meanwhile (a pause, a stuck database)
        assert a.adapter_time_left(BOT, 1) == pytest.approx(0.5)
        clock.advance(1.0)
        assert a.adapter_time_left(BOT, 1) == 0 and a.adapters_held() == {}
        assert b.tick().adapters_gained == ()  # the database's expiry has not come yet
        assert a.tick().adapters_lost == (BOT,)  # a's round reports it, then takes it back
        assert ("lost", BOT, 1, "expired") in a.adapter_listener.events
        assert a.adapters_held() == {BOT: 2}

    def test_a_node_without_the_adapter_never_takes_it(self, pg_leases):
        m = LeaseManager(pg_leases(), "x", shards=2, lease_ttl=TTL, heartbeat=1.0)
        m.join()
        try:
            assert m.tick().adapters_gained == () and m.store.snapshot().adapters == ()
        finally:
            m.halt()

    def test_cluster_status_lists_the_adapter_leases(self, nodes):
        a, b = nodes("a"), nodes("b")
        a.tick()
        b.tick()
        report = status_report(a.store.snapshot(), "db")
        [lease] = report["adapter_leases"]
        assert (lease["adapter"], lease["owner"], lease["epoch"], lease["state"]) == (
            BOT, "a", 1, "held")
        assert TTL - 10 < lease["expires_in"] <= TTL
        lines = format_status(report)
        header = lines.index(next(line for line in lines if line.startswith("adapter leases")))
        assert lines[header] == ("adapter leases (pull adapters, polled by their holder): "
                                 "1 held")
        assert lines[header + 1].split() == ["ADAPTER", "OWNER", "EPOCH", "STATE", "EXPIRES"]
        assert lines[header + 2].split()[:4] == [BOT, "a", "1", "held"]

    def test_the_cli_prints_them(self, nodes, postgres_dsn, tmp_path, capsys, monkeypatch):
        import json
        import os

        import yaml

        from hermes_actors import cli

        for name in list(os.environ):
            if name.startswith("HERMES_"):
                monkeypatch.delenv(name)
        a = nodes("a")
        a.tick()
        home = tmp_path / "home"
        home.mkdir()
        (home / "config.yaml").write_text(yaml.safe_dump(
            {"store": {"backend": "postgres", "dsn": postgres_dsn}}))
        assert cli.main(["cluster", "status", "--home", str(home), "--json"]) == 0
        [lease] = json.loads(capsys.readouterr().out)["adapter_leases"]
        assert (lease["adapter"], lease["owner"], lease["state"]) == (BOT, "a", "held")
        assert cli.main(["cluster", "status", "--home", str(home)]) == 0
        text = capsys.readouterr().out
        assert "adapter leases (pull adapters, polled by their holder): 1 held" in text
