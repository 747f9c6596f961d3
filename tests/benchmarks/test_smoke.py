"""The benchmark harness runs end to end (``--quick``) and reports every scenario as numbers.

No timing is asserted here (SPEC §14): only that each scenario ran in its gevent child,
and that its figures are numbers a reader and the JSON consumer can use. The scenarios on
SQLite run here; those on PostgreSQL (they need a server) in ``test_smoke_pg``.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.catalog import SCENARIOS as ALL_SCENARIOS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = [s for s in ALL_SCENARIOS if not s.postgres]


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The JSON report and the stdout of one quick run."""
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", str(out),
         "--workdir", str(out.parent), *(s.name for s in SCENARIOS)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


class TestQuickRun:
    """``python -m benchmarks --quick --json FILE`` covers every scenario with numeric figures."""

    def test_every_scenario_ran(self, report):
        data, _ = report
        assert data["quick"] is True and data["mode"] == "gevent"
        assert list(data["scenarios"]) == [s.name for s in SCENARIOS]
        assert "postgres" not in data  # no server started when no scenario needs one
        for name, result in data["scenarios"].items():
            assert result["ok"], f"{name}: {result['error']}"
            assert result["figures"], name

    def test_figures_are_numbers(self, report):
        data, _ = report
        for name, result in data["scenarios"].items():
            for fig in result["figures"]:
                where = f"{name}/{fig['key']}"
                assert _number(fig["value"]), where
                assert fig["status"] in ("PASS", "MISS", "info"), where
                if fig["baseline"] is not None:
                    assert _number(fig["baseline"]) and _number(fig["ratio"]), where
                if fig["target"] is not None:
                    assert fig["status"] != "info", where

    def test_machine_and_tables_are_reported(self, report):
        data, stdout = report
        assert data["machine"]["cores"] and data["machine"]["sqlite"]
        for s in SCENARIOS:
            assert f"{s.name}: {s.summary}" in stdout

    def test_throughput_reports_cpu_per_turn(self, report):
        """The CPU a turn costs, per process, and the bounds derived from it are reported: the
        writer's share is measured in its own process (gevent mode)."""
        data, _ = report
        figs = {f["key"]: f for f in data["scenarios"]["throughput"]["figures"]}
        for size in ("small", "large"):
            gateway = figs[f"{size}_cpu_gateway"]["value"]
            writer = figs[f"{size}_cpu_children"]["value"]
            assert gateway > 0 and writer > 0, size
            assert figs[f"{size}_bound_core"]["value"] == pytest.approx(1e6 / gateway)
            cores = figs[f"{size}_bound_cores"]["value"] * (gateway + writer) / 1e6
            assert cores == pytest.approx(round(cores)) and round(cores) >= 1, size
            for bound in ("bound_core", "bound_cores"):  # as shares of the raw bound too
                assert figs[f"{size}_{bound}"]["baseline"] == figs[size]["baseline"], size

    def test_throughput_counts_the_gateways_cpu_in_raw_pykka_asks(self, report):
        """The Python-bound baseline: raw asks/s in the same run, and a turn's gateway CPU
        expressed in them."""
        data, _ = report
        figs = {f["key"]: f for f in data["scenarios"]["throughput"]["figures"]}
        asks = figs["raw_asks"]["value"]
        assert asks > 0 and figs["raw_asks"]["unit"] == "asks/s"
        gateway = figs["large_cpu_gateway"]["value"]
        assert figs["large_in_asks"]["value"] == pytest.approx(gateway * asks / 1e6)

    def test_http_is_judged_against_its_raw_bound_and_in_process_submit(self, report):
        """The HTTP path's turns/s against the raw WSGI bound on the same server stack
        (target: half of it), its p99 against the in-process p99 (target: twice), its CPU
        per turn against the bound's, and the same load from a driver process of its own."""
        data, _ = report
        figs = {f["key"]: f for f in data["scenarios"]["http"]["figures"]}
        assert figs["turns"]["baseline_label"] == "raw HTTP bound"
        assert figs["turns"]["target"] == {"op": ">=", "value": 0.5, "on": "ratio"}
        assert figs["p99"]["baseline_label"] == "in-process p99"
        assert figs["p99"]["target"] == {"op": "<=", "value": 2.0, "on": "ratio"}
        assert figs["vs_submit"]["value"] == figs["turns"]["value"]
        assert figs["vs_submit"]["baseline_label"] == "in-process submit"
        assert figs["cpu"]["unit"] == "µs" and figs["cpu"]["baseline"] > 0
        assert figs["apart"]["value"] > 0 and figs["apart"]["baseline"] == figs["turns"]["value"]
        assert figs["raw_p99"]["baseline"] == figs["p99"]["value"]

    def test_sse_is_judged_against_its_raw_bound(self, report):
        """Answers per second to open streams against the raw WSGI SSE bound (target: half
        of it), with CPU per answer and latencies against the bound's."""
        data, _ = report
        result = data["scenarios"]["sse"]
        figs = {f["key"]: f for f in result["figures"]}
        assert list(figs) == ["answers", "cpu", "p50", "p99"]
        assert figs["answers"]["unit"] == "answers/s"
        assert figs["answers"]["target"] == {"op": ">=", "value": 0.5, "on": "ratio"}
        for key in figs:
            assert figs[key]["baseline_label"].startswith("raw"), key
        details = result["runs"][0]["details"]
        assert details["streams"] > 0 and details["messages"] > 0

    def test_recovery_starts_its_gateway_with_the_standalone_collector_settings(self, report):
        """The measured gateway process is the standalone one: the collector thresholds it
        sets before its start (``process.heap``) are in force during the timed start."""
        from hermes_actors.process.heap import GC_THRESHOLDS

        data, _ = report
        for run in data["scenarios"]["recovery"]["runs"]:
            assert tuple(run["details"]["gc_threshold"]) == GC_THRESHOLDS


class TestBadArguments:
    def test_a_json_file_that_cannot_be_written_is_refused_before_any_run(self, tmp_path):
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks", "--quick", "--json",
             str(tmp_path / "no-such-folder" / "x.json"), "fifo"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )
        assert proc.returncode == 2
        assert "--json: cannot write a file in" in proc.stderr.strip().splitlines()[-1]
        assert "Traceback" not in proc.stderr and "machine:" not in proc.stdout
