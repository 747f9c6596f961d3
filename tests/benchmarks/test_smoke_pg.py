"""The PostgreSQL scenarios of the benchmark harness run end to end (``--quick``).

As in ``test_smoke``, nothing about timing is asserted: each ``-pg`` scenario ran in its
gevent child against the server the harness started for the run (or the one
``HERMES_TEST_POSTGRES_DSN`` names), its figures are numbers, the server's CPU per turn is
reported beside the gateway's, and an embedded server is gone when the harness exits.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from benchmarks.catalog import SCENARIOS

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
#: The cluster's scenarios start node processes of their own: ``test_smoke_cluster``.
PG_SCENARIOS = [s.name for s in SCENARIOS if s.postgres and not s.name.startswith("cluster-")]


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The JSON report and the stdout of one quick run of the -pg scenarios."""
    out = tmp_path_factory.mktemp("bench-pg") / "quick.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", str(out),
         "--workdir", str(out.parent), *PG_SCENARIOS],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


class TestQuickPostgresRun:
    """``python -m benchmarks --quick throughput-pg latency-pg recovery-pg``."""

    def test_the_default_set_includes_them(self):
        assert {"throughput-pg", "latency-pg", "recovery-pg"} <= set(PG_SCENARIOS)

    def test_every_scenario_ran_with_numeric_figures(self, report):
        data, stdout = report
        assert list(data["scenarios"]) == PG_SCENARIOS
        for name, result in data["scenarios"].items():
            assert result["ok"], f"{name}: {result['error']}"
            assert result["figures"], name
            assert f"{name}: {result['summary']}" in stdout
            for fig in result["figures"]:
                where = f"{name}/{fig['key']}"
                assert _number(fig["value"]), where
                if fig["baseline"] is not None:
                    assert _number(fig["baseline"]) and _number(fig["ratio"]), where
                if fig["target"] is not None:
                    assert fig["status"] in ("PASS", "MISS"), where

    def test_each_headline_has_its_baseline_and_target(self, report):
        data, _ = report
        heads = {"throughput-pg": ("large", "raw psycopg bound"),
                 "latency-pg": ("p99", "raw pykka ask p99"),
                 "recovery-pg": ("ready", "raw psycopg read")}
        for name, (key, baseline) in heads.items():
            figs = {f["key"]: f for f in data["scenarios"][name]["figures"]}
            assert figs[key]["baseline_label"] == baseline, name
            assert figs[key]["target"]["on"] == "ratio", name

    def test_server_cpu_is_reported_beside_the_gateways(self, report):
        data, _ = report
        if data["postgres"]["pid"] is None:
            pytest.skip("a server named by a DSN: its processes may not be visible here")
        figs = {f["key"]: f for f in data["scenarios"]["throughput-pg"]["figures"]}
        for size in ("small", "large"):
            gateway = figs[f"{size}_cpu_gateway"]["value"]
            server = figs[f"{size}_cpu_server"]["value"]
            assert gateway > 0 and server > 0, size
            assert figs[f"{size}_cpu_server"]["baseline"] > 0, size  # the raw bound's
            cores = figs[f"{size}_bound_cores"]["value"] * (gateway + server) / 1e6
            assert cores == pytest.approx(round(cores)) and round(cores) >= 1, size

    def test_the_embedded_server_is_stopped(self, report):
        data, stdout = report
        info = data["postgres"]
        assert info["version"] and info["settings"]["synchronous_commit"]
        assert "postgres: PostgreSQL" in stdout
        if info["pid"] is not None:
            assert not psutil.pid_exists(info["pid"]) or \
                psutil.Process(info["pid"]).status() == psutil.STATUS_ZOMBIE


class TestLostServer:
    """A run whose server is gone says so in one line, and runs no more -pg scenario."""

    def test_the_failure_names_the_lost_server(self, tmp_path, monkeypatch):
        from benchmarks import __main__ as harness
        from hermes_actors.testing.postgres import TestServer

        ran: list[str] = []

        def child(name, *args):
            ran.append(name)
            return {"error": "server closed the connection unexpectedly"}

        monkeypatch.setattr(harness, "_run_child", child)
        server = harness._Server()
        server.handle = TestServer(f"host={tmp_path} port=1 dbname=hermes user=hermes")
        args = harness._parse(["--quick", *PG_SCENARIOS[:2]])
        first, second = (harness._run_scenario(name, args, 1, server)
                         for name in PG_SCENARIOS[:2])
        line = first["error"]
        assert line.startswith(f"the run's PostgreSQL server (host {tmp_path}, port 1) is "
                               "gone: ") and "\n" not in line, line
        assert second["error"] == line and not second["ok"]
        assert ran == PG_SCENARIOS[:1]  # the second was not started against no server
