"""``hermes-actors cluster status``: nodes, shards per node and leases, as text and JSON;
the exit codes; and the DSN's password never shown."""

from __future__ import annotations

import json

import pytest
import yaml

from hermes_actors import cli
from hermes_actors.cluster.membership import LeaseManager

from .test_pg_leases import expire

pytestmark = pytest.mark.postgres


@pytest.fixture(autouse=True)
def _no_hermes_env(monkeypatch):
    import os

    for name in list(os.environ):
        if name.startswith("HERMES_"):
            monkeypatch.delenv(name)


@pytest.fixture
def home(tmp_path):
    path = tmp_path / "home"
    path.mkdir()
    return path


def configure(home, dsn: str) -> None:
    (home / "config.yaml").write_text(yaml.safe_dump({"store": {"backend": "postgres",
                                                                "dsn": dsn}}))


def status(home, *extra: str) -> int:
    return cli.main(["cluster", "status", "--home", str(home), *extra])


@pytest.fixture
def two_nodes(pg_leases):
    managers = [LeaseManager(pg_leases(), name, shards=8, lease_ttl=30, heartbeat=1,
                             address=f"127.0.0.1:{port}")
                for name, port in (("node-a", 8001), ("node-b", 8002))]
    for m in managers:
        m.join()
    for m in managers * 2:
        m.tick()
    yield managers
    for m in managers:
        m.halt()


class TestStatus:
    def test_text_lists_nodes_shards_and_leases(self, home, postgres_dsn, two_nodes, capsys):
        configure(home, postgres_dsn)
        assert status(home) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith("cluster: 8 shards in ")
        assert out[1] == "nodes: 2 live, 0 leaving, 0 dead"
        assert out[2].split() == ["NODE", "STATE", "HEARTBEAT", "STARTED", "HOST", "PID",
                                  "ADDRESS", "SHARDS"]
        a_row, b_row = out[3].split(), out[4].split()
        assert a_row[:2] == ["node-a", "live"] and a_row[-2:] == ["127.0.0.1:8001", "4"]
        assert b_row[:2] == ["node-b", "live"] and b_row[-1] == "4"
        assert out[5] == "leases: 8 held, 0 free"
        assert out[6].split() == ["SHARD", "OWNER", "EPOCH", "STATE", "EXPIRES"]
        shard0 = out[7].split()
        assert shard0[:4] == ["0", "node-a", "1", "held"] and shard0[4] == "in"
        assert len(out) == 7 + 8

    def test_json_has_every_field(self, home, postgres_dsn, two_nodes, capsys):
        configure(home, postgres_dsn)
        expire(postgres_dsn, "node-b")
        assert status(home, "--json") == 0
        report = json.loads(capsys.readouterr().out)
        assert report["shards"] == 8 and report["held"] == 4 and report["free"] == 4
        nodes = {n["node_id"]: n for n in report["nodes"]}
        assert nodes["node-a"]["state"] == "live" and nodes["node-a"]["shards"] == 4
        assert nodes["node-b"]["state"] == "dead" and nodes["node-b"]["shards"] == 0
        assert nodes["node-b"]["heartbeat_age"] >= 60
        assert nodes["node-a"]["pid"] and nodes["node-a"]["address"] == "127.0.0.1:8001"
        leases = report["leases"]
        assert [lease["shard"] for lease in leases] == list(range(8))
        expired = [lease for lease in leases if lease["owner"] == "node-b"]
        assert expired and all(lease["state"] == "expired" and lease["expires_in"] < 0
                               for lease in expired)
        assert all(lease["epoch"] == 1 for lease in leases)

    def test_a_database_without_a_cluster_exits_1(self, home, postgres_dsn, capsys):
        configure(home, postgres_dsn)
        assert status(home) == 1
        assert "no cluster in" in capsys.readouterr().out

    def test_the_password_is_masked(self, home, postgres_dsn, two_nodes, capsys):
        configure(home, postgres_dsn + " password=hunter2")  # the test server trusts
        assert status(home) == 0
        out = capsys.readouterr().out
        assert "hunter2" not in out and "password" not in out


class TestUserErrors:
    def test_a_sqlite_home_exits_2(self, home, capsys):
        assert status(home) == 2
        err = capsys.readouterr().err
        assert "cluster status reads a PostgreSQL store" in err and "'sqlite'" in err

    def test_a_missing_home_exits_2(self, tmp_path, capsys):
        assert status(tmp_path / "nowhere") == 2
        assert "does not exist" in capsys.readouterr().err

    def test_an_unreachable_server_exits_2_without_the_password(self, home, capsys):
        configure(home, "postgresql://hermes:hunter2@127.0.0.1:1/hermes")
        assert status(home) == 2
        err = capsys.readouterr().err
        assert "hunter2" not in err
        assert "host=127.0.0.1 port=1 dbname=hermes user=hermes" in err
