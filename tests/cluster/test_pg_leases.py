"""The lease table on the test server: the migration, each statement's rules, and races of
several threads and processes for the same shards (exactly one owner per tenure, epochs
growing by one per acquisition, stale epochs refused)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading

import psycopg
import pytest

from hermes_actors.cluster.membership import LeaseManager
from hermes_actors.cluster.records import NodeAnnouncement
from hermes_actors.cluster.shards import shard_of
from hermes_actors.errors import ConfigError, StoreUnavailableError
from hermes_actors.store.backends.postgres import schema

pytestmark = pytest.mark.postgres

TTL = 30.0


def sql(dsn: str, statement: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description is not None else []


def expire(dsn: str, owner: str) -> None:
    """Make ``owner``'s leases and heartbeat a minute old (instead of waiting)."""
    sql(dsn, "UPDATE shard_leases SET expires_at = expires_at - 60 WHERE owner = %s", (owner,))
    sql(dsn, "UPDATE cluster_nodes SET heartbeat_at = heartbeat_at - 60 WHERE node_id = %s",
        (owner,))


class TestSchema:
    def test_the_cluster_tables_are_migration_two(self, pg_leases, postgres_dsn):
        pg_leases().ensure_cluster(4, "a")
        # migration 3 (the fence function), 4 (the shared restart counts) and 5 (the
        # adapters' leases) follow the tables
        assert sql(postgres_dsn, "SELECT max(version) FROM schema_version") == [(5,)]
        assert schema.SCHEMA_VERSION == 5
        assert schema.MIGRATIONS[1] == (*schema.CLUSTER_DDL, schema.CLUSTER_SHARD_FUNCTION)
        assert sql(postgres_dsn, "SELECT shard, owner, epoch FROM shard_leases ORDER BY 1") == [
            (s, None, 0) for s in range(4)]

    def test_the_sql_hash_is_the_python_hash(self, pg_leases, postgres_dsn):
        pg_leases().ensure_cluster(1, "a")
        rnd = random.Random(20)
        alphabet = "abcxyz:_-0123456789äöüßéñ中文字🙂𝄞"
        keys = ["", "agent:main:telegram:dm:42"] + [
            "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(1, 40)))
            for _ in range(400)]
        for shards in (1, 7, 64, 4096):
            rows = sql(postgres_dsn, "SELECT k, cluster_shard(k, %s) FROM unnest(%s::text[]) AS k",
                       (shards, keys))
            assert {k: s for k, s in rows} == {k: shard_of(k, shards) for k in keys}

    def test_a_snapshot_of_a_database_without_a_cluster(self, pg_leases):
        snap = pg_leases().snapshot()
        assert snap.shards is None and snap.nodes == () and snap.leases == ()


class TestStatements:
    def test_the_first_shard_count_wins(self, pg_leases):
        leases = pg_leases()
        assert leases.ensure_cluster(8, "a") == 8
        assert pg_leases().ensure_cluster(16, "b") == 8
        assert len(leases.snapshot().leases) == 8

    def test_acquire_takes_free_expired_and_own_leases_only(self, pg_leases, postgres_dsn):
        leases = pg_leases()
        leases.ensure_cluster(4, "a")
        assert [(x.shard, x.epoch) for x in leases.acquire("a", [0, 1], TTL)] == [(0, 1), (1, 1)]
        assert leases.acquire("b", [0, 1, 2], TTL)[0].shard == 2  # 0 and 1 are a's
        [again] = leases.acquire("a", [0], TTL)  # a restarted node takes its own back
        assert again.epoch == 2
        expire(postgres_dsn, "a")
        assert [(x.shard, x.epoch) for x in leases.acquire("b", [0, 1], TTL)] == [(0, 3), (1, 2)]
        snap = leases.snapshot()
        assert [(r.owner, r.epoch) for r in snap.leases] == [
            ("b", 3), ("b", 2), ("b", 1), (None, 0)]
        assert all(r.expires_at == pytest.approx(snap.now + TTL, abs=5)
                   for r in snap.leases[:3])

    def test_renew_needs_owner_epoch_and_time(self, pg_leases, postgres_dsn):
        leases = pg_leases()
        leases.ensure_cluster(4, "a")
        leases.acquire("a", [0, 1, 2], TTL)
        assert set(leases.renew("a", {0: 1, 1: 1}, TTL)) == {0, 1}
        assert leases.renew("a", {0: 2}, TTL) == {}  # a stale (here: future) epoch
        assert leases.renew("b", {0: 1}, TTL) == {}  # not b's
        expire(postgres_dsn, "a")
        assert leases.renew("a", {2: 1}, TTL) == {}  # expired: acquire it again
        [taken] = leases.acquire("b", [2], TTL)
        assert leases.renew("a", {2: 1}, TTL) == {} and leases.release("a", {2: 1}) == set()
        assert set(leases.renew("b", {2: taken.epoch}, TTL)) == {2}

    def test_release_frees_only_the_callers_tenure(self, pg_leases):
        leases = pg_leases()
        leases.ensure_cluster(2, "a")
        leases.acquire("a", [0, 1], TTL)
        assert leases.release("b", {0: 1}) == set() and leases.release("a", {0: 5}) == set()
        assert leases.release("a", {0: 1, 1: 1}) == {0, 1}
        assert all(r.owner is None and r.expires_at is None and r.epoch == 1
                   for r in leases.snapshot().leases)

    def test_heartbeat_leave_and_forget(self, pg_leases, postgres_dsn):
        leases = pg_leases()
        leases.ensure_cluster(2, "a")
        leases.heartbeat(NodeAnnouncement("a", "boot1", 10.0, "host", 42, "127.0.0.1:1"))
        [first] = leases.snapshot().nodes
        leases.heartbeat(NodeAnnouncement("a", "boot1", 10.0, "host", 42, leaving=True))
        [same] = leases.snapshot().nodes
        assert same.started_at == first.started_at and same.heartbeat_at >= first.heartbeat_at
        assert same.leaving and same.address is None and (same.host, same.pid) == ("host", 42)
        leases.leave("a", "another boot")
        assert len(leases.snapshot().nodes) == 1
        leases.leave("a", "boot1")
        assert leases.snapshot().nodes == ()
        for node in ("old", "holder"):
            leases.heartbeat(NodeAnnouncement(node, "b", 10.0))
        leases.acquire("holder", [0], 3600)
        sql(postgres_dsn, "UPDATE cluster_nodes SET heartbeat_at = heartbeat_at - 7200")
        assert leases.forget_nodes(3600) == 1
        assert [n.node_id for n in leases.snapshot().nodes] == ["holder"]

    def test_an_unreachable_server_is_unavailable_with_the_password_masked(self, pg_leases):
        from hermes_actors.store.backends.postgres.leases import PgLeases

        leases = PgLeases.open("postgresql://u:hunter2@127.0.0.1:1/db")
        with pytest.raises(StoreUnavailableError) as caught:
            leases.snapshot()
        # the DSN is shown as its host, port, database and user only
        assert "hunter2" not in str(caught.value)
        assert "host=127.0.0.1 port=1 dbname=db user=u" in str(caught.value)

    def test_a_node_with_another_shard_count_refuses_to_join(self, pg_leases):
        LeaseManager(pg_leases(), "a", shards=8, lease_ttl=10, heartbeat=2).join()
        late = LeaseManager(pg_leases(), "b", shards=16, lease_ttl=10, heartbeat=2)
        with pytest.raises(ConfigError, match=r"cluster.shards.*16.*created with 8"):
            late.join()


class TestRaces:
    """Real concurrency on the server: each racer has its own connection."""

    SHARDS = 24

    def test_threads_racing_for_free_shards_get_one_owner_each(self, pg_leases):
        pg_leases().ensure_cluster(self.SHARDS, "setup")
        racers = [pg_leases() for _ in range(6)]
        barrier = threading.Barrier(len(racers))
        won: dict[str, list[int]] = {}
        errors: list[BaseException] = []

        def race(name: str, leases) -> None:
            try:
                barrier.wait(10)
                won[name] = [x.shard for x in leases.acquire(name, range(self.SHARDS), TTL)]
            except BaseException as exc:  # noqa: BLE001 - asserted below
                errors.append(exc)

        threads = [threading.Thread(target=race, args=(f"t{i}", leases))
                   for i, leases in enumerate(racers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert errors == []
        taken = [shard for shards in won.values() for shard in shards]
        assert sorted(taken) == list(range(self.SHARDS))  # each exactly once
        owners = {r.shard: (r.owner, r.epoch) for r in racers[0].snapshot().leases}
        assert all(owners[s] == (name, 1) for name, shards in won.items() for s in shards)

    def test_threads_racing_over_expiring_leases_never_share_a_tenure(self, pg_leases):
        pg_leases().ensure_cluster(4, "setup")
        racers = [pg_leases() for _ in range(4)]
        barrier = threading.Barrier(len(racers))
        log: list[tuple[int, int, str]] = []
        stale: list[int] = []
        errors: list[BaseException] = []

        def race(name: str, leases) -> None:
            try:
                barrier.wait(10)
                mine: dict[int, int] = {}
                for _ in range(25):  # ttl 0: every lease is expired by the next statement
                    for lease in leases.acquire(name, range(4), 0.0):
                        log.append((lease.shard, lease.epoch, name))
                        mine[lease.shard] = lease.epoch
                stale.extend(leases.renew(name, mine, TTL))
            except BaseException as exc:  # noqa: BLE001 - asserted below
                errors.append(exc)

        threads = [threading.Thread(target=race, args=(f"t{i}", leases))
                   for i, leases in enumerate(racers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == []
        assert stale == []  # every tenure was over by the time its holder renewed
        final = {r.shard: r.epoch for r in racers[0].snapshot().leases}
        for shard in range(4):
            epochs = sorted(epoch for s, epoch, _ in log if s == shard)
            assert epochs == list(range(1, final[shard] + 1))  # one owner per epoch, no gap

    def test_processes_racing_for_the_same_shards(self, pg_leases, postgres_dsn):
        pg_leases().ensure_cluster(self.SHARDS, "setup")
        code = (
            "import json, sys\n"
            "from hermes_actors.store.backends.postgres.leases import PgLeases\n"
            "leases = PgLeases.open(sys.argv[1]); name = sys.argv[2]\n"
            "leases.snapshot(); print('ready', flush=True); sys.stdin.readline()\n"
            "log = []\n"
            "for _ in range(20):\n"
            f"    got = leases.acquire(name, range({self.SHARDS}), 0.0)\n"
            "    log += [(x.shard, x.epoch) for x in got]\n"
            "print(json.dumps(log), flush=True)\n")
        procs = [subprocess.Popen([sys.executable, "-c", code, postgres_dsn, f"p{i}"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for i in range(3)]
        try:
            for proc in procs:
                assert proc.stdout.readline().strip() == "ready"
            for proc in procs:
                proc.stdin.write("go\n")
                proc.stdin.flush()
            logs = [json.loads(proc.stdout.readline() or "null") for proc in procs]
        finally:
            for proc in procs:
                try:
                    proc.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate()
        assert [proc.returncode for proc in procs] == [0, 0, 0] and None not in logs
        acquisitions = [(s, e) for log in logs for s, e in log]
        assert len(acquisitions) == len(set(acquisitions))  # no tenure taken twice
        final = {r.shard: r.epoch for r in pg_leases().snapshot().leases}
        for shard in range(self.SHARDS):
            assert sorted(e for s, e in acquisitions if s == shard) == list(
                range(1, final[shard] + 1))


class TestLostTables:
    def test_joining_brings_lost_cluster_tables_back_empty(self, pg_leases, postgres_dsn):
        leases = pg_leases()
        leases.ensure_cluster(4, "a")
        leases.acquire("a", [0], TTL)
        sql(postgres_dsn, "DROP TABLE shard_leases, cluster")
        assert leases.snapshot().shards is None
        assert leases.ensure_cluster(8, "b") == 8  # a new cluster: every lease free
        assert [(r.owner, r.epoch) for r in leases.snapshot().leases] == [(None, 0)] * 8


class TestFencedWritesAndLeases:
    """A write's fence (``cluster_fence``, ``FOR KEY SHARE``) against the lease statements:
    the owner's renewal never waits for it, a change of tenure always does."""

    @staticmethod
    def _write_in_flight(dsn: str, owner: str, shards: list[int], epoch: int = 1):
        """A connection inside a write transaction whose fences hold ``shards``."""
        conn = psycopg.connect(dsn)
        for shard in shards:
            conn.execute("SELECT cluster_fence(%s, %s, %s)", (shard, owner, epoch))
        return conn

    def test_a_renewal_goes_ahead_of_the_writes_in_flight(self, pg_leases, postgres_dsn):
        leases = pg_leases()
        leases.ensure_cluster(2, "a")
        leases.acquire("a", [0, 1], TTL)
        writer = self._write_in_flight(postgres_dsn, "a", [1])
        renewed: list[dict[int, float]] = []
        done = threading.Event()

        def renew() -> None:
            renewed.append(leases.renew("a", {0: 1, 1: 1}, TTL))
            done.set()

        threading.Thread(target=renew, daemon=True).start()
        try:
            # With a share lock the renewal waited here for the write's commit; and the
            # write's next fence (shard 0, which the renewal locked first) deadlocked.
            assert done.wait(10), "the renewal waited for a write in flight"
            writer.execute("SELECT cluster_fence(0, 'a', 1)")
            writer.commit()
        finally:
            writer.close()
        assert set(renewed[0]) == {0, 1}

    def test_no_other_tenure_begins_while_a_write_is_in_flight(self, pg_leases,
                                                               postgres_dsn):
        leases = pg_leases()
        leases.ensure_cluster(1, "a")
        leases.acquire("a", [0], TTL)
        writer = self._write_in_flight(postgres_dsn, "a", [0])
        try:
            expire(postgres_dsn, "a")  # the lease runs out while the write is in flight
            assert leases.acquire("b", [0], TTL) == []  # skipped, not taken
        finally:
            writer.commit()
            writer.close()
        [taken] = leases.acquire("b", [0], TTL)
        assert (taken.shard, taken.epoch) == (0, 2)
