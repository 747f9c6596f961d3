"""The cluster's scenarios of the benchmark harness run end to end (``--quick``).

As in ``test_smoke_pg``, nothing about timing is asserted: ``cluster-handover`` and
``cluster-scaling`` ran their real node processes against the run's server, every figure
is a number, the headlines carry their baselines and ratio targets, the parts of the
handover add up to it, and no node process they started is left running.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["cluster-handover", "cluster-scaling", "cluster-cost"]


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The JSON report and the stdout of one quick run of both scenarios."""
    out = tmp_path_factory.mktemp("bench-cluster") / "quick.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", str(out),
         "--workdir", str(out.parent), *NAMES],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


def _figures(data, name):
    return {f["key"]: f for f in data["scenarios"][name]["figures"]}


class TestQuickClusterRun:
    """``python -m benchmarks --quick cluster-handover cluster-scaling cluster-cost``."""

    def test_both_ran_with_numeric_figures(self, report):
        data, stdout = report
        assert list(data["scenarios"]) == NAMES
        for name, result in data["scenarios"].items():
            assert result["ok"], f"{name}: {result['error']}"
            assert f"{name}: {result['summary']}" in stdout
            for fig in result["figures"]:
                assert _number(fig["value"]), f"{name}/{fig['key']}"
                if fig["baseline"] is not None:
                    assert _number(fig["baseline"]) and _number(fig["ratio"]), fig["key"]

    def test_handover_against_lease_ttl_plus_recovery(self, report):
        data, _ = report
        figs = _figures(data, "cluster-handover")
        head = figs["handover"]
        assert head["target"] == {"op": "<=", "value": 1.5, "on": "ratio"}
        assert head["baseline_label"].startswith("lease_ttl")
        details = data["scenarios"]["cluster-handover"]["runs"][0]["details"]
        # the baseline is lease_ttl + the single gateway's spawn -> every chat answered
        assert head["baseline"] == pytest.approx(details["lease_ttl"]
                                                 + figs["single"]["value"])
        parts = sum(figs[k]["value"] for k in ("lease_wait", "recovery", "dispatch"))
        assert parts == pytest.approx(head["value"], abs=0.2)
        # the survivor waited for the dead node's leases to expire
        assert figs["lease_wait"]["value"] >= details["lease_ttl"] - details["heartbeat"] - 0.1

    def test_scaling_against_a_one_node_cluster(self, report):
        data, _ = report
        figs = _figures(data, "cluster-scaling")
        assert figs["cpu_per_turn"]["target"] == {"op": "<=", "value": 1.25, "on": "ratio"}
        for key in ("cpu_per_turn", "cpu_nodes", "cpu_server", "max"):
            assert figs[key]["baseline_label"] == "one-node cluster", key
            assert figs[key]["value"] > 0 and figs[key]["baseline"] > 0, key
        assert figs["cpu_per_turn"]["value"] == pytest.approx(
            figs["cpu_nodes"]["value"] + figs["cpu_server"]["value"])

    def test_cost_against_a_single_gateway(self, report):
        data, _ = report
        figs = _figures(data, "cluster-cost")
        assert figs["max"]["target"] == {"op": ">=", "value": 0.7, "on": "ratio"}
        assert figs["max_cpu"]["target"] == {"op": "<=", "value": 1.5, "on": "ratio"}
        assert figs["max_flushes"]["target"] == {"op": "<=", "value": 2.0, "on": "value"}
        for key in ("max", "max_cpu", "max_flushes", "paced_cpu"):
            assert figs[key]["baseline_label"].startswith("single gateway"), key
            assert figs[key]["value"] > 0 and figs[key]["baseline"] > 0, key
        assert figs["max_cpu"]["value"] == pytest.approx(
            figs["max_cpu_node"]["value"] + figs["max_cpu_server"]["value"])
        assert figs["idle_commits"]["unit"] == "commits/s"
        assert figs["duplicated"]["value"] == 0

    def test_no_node_process_is_left(self, report):
        data, _ = report
        for name in NAMES:
            for pid in data["scenarios"][name]["runs"][0]["details"]["pids"]:
                assert not psutil.pid_exists(pid) or \
                    psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, (name, pid)
