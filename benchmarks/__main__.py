"""``python -m benchmarks [SCENARIO ...] [--json FILE] [--quick]``: run, aggregate, report.

The parent process stays unpatched: for each scenario it starts ``--repeat`` child runs
(``python -m benchmarks._child``, gevent-patched before any import), one after another so
runs never compete for the two cores, reads each child's JSON, aggregates the figures
(median and min-max spread) and prints the scenario's table on stdout; progress lines go to
stderr. A child per run (not per scenario) also gives every run a fresh heap, which the
memory figures need.

The ``-pg`` scenarios run on PostgreSQL. When one is selected (as it is by default), the
parent starts the run's server before the first scenario and stops it after the last,
whatever happened (:mod:`benchmarks.pgserver`): the one ``--dsn`` or
``HERMES_TEST_POSTGRES_DSN`` names, else an embedded throw-away server whose data lives under
``--workdir``. Each child run takes a fresh database (schema) of its own on it.

Exit status: 0 when every run completed (targets missed or not: CI runs ``--quick`` as a
smoke test and asserts no thresholds), 1 when a run failed (an invariant broke, e.g. FIFO
order, or a child crashed or timed out), 2 for usage errors. ``--check`` also turns a
missed target into exit status 3.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.catalog import SCENARIOS
from benchmarks.machine import describe, machine_line
from benchmarks.report import aggregate, render_table

__all__ = ["main"]

_ROOT = Path(__file__).resolve().parent.parent
_NAMES = [s.name for s in SCENARIOS]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmarks of hermes_actors in gevent mode; every figure is compared "
        "with a baseline measured in the same run.",
    )
    p.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                   help=f"what to run (default: all): {', '.join(_NAMES)}")
    p.add_argument("--json", metavar="FILE", help="also write every figure as JSON")
    p.add_argument("--quick", action="store_true",
                   help="small sizes, one run each: the whole set in under a minute")
    p.add_argument("--repeat", type=int, default=None,
                   help="runs per scenario (default: 3, or 1 with --quick)")
    p.add_argument("--workdir", metavar="DIR",
                   help="where fixtures are built and the embedded PostgreSQL server keeps "
                   "its data (default: $TMPDIR)")
    p.add_argument("--dsn", metavar="DSN",
                   help="the PostgreSQL server of the -pg scenarios (a role that may create "
                   "schemas; default: $HERMES_TEST_POSTGRES_DSN, else an embedded server "
                   "started for this run and stopped at its end)")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument("--check", action="store_true", help="exit 3 when a target is missed")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    args = p.parse_args(argv)
    unknown = [s for s in args.scenarios if s not in _NAMES]
    if unknown:
        p.error(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(_NAMES)}")
    if args.repeat is not None and args.repeat < 1:
        p.error("--repeat must be at least 1")
    if args.json:  # checked now: a run of many minutes must not end in a traceback
        folder = Path(args.json).resolve().parent
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            p.error(f"--json: cannot write a file in {str(folder)!r} (no such folder, or "
                    "not writable)")
    return args


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(_ROOT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    return env


def _stderr_fd() -> int | None:
    """Children's stdout joins our stderr (stdout is for the tables), when it has a fd."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _run_child(name: str, label: str, quick: bool, timeout: float,
               workdir: str | None, env: dict[str, str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hermes-bench-out-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "benchmarks._child", name, str(out), "--label", label]
        if quick:
            cmd.append("--quick")
        if workdir:
            cmd += ["--workdir", workdir]
        try:
            proc = subprocess.run(cmd, env=_child_env(env), timeout=timeout,
                                  stdout=_stderr_fd())
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s"}
        if out.exists():
            result = json.loads(out.read_text())
        else:
            result = {"error": f"the child exited {proc.returncode} without a result"}
        if proc.returncode != 0 and "error" not in result:
            result["error"] = f"the child exited {proc.returncode}"
        return result


def _run_scenario(name: str, args: argparse.Namespace, repeat: int,
                  server: _Server) -> dict[str, Any]:
    spec = next(s for s in SCENARIOS if s.name == name)
    timeout = spec.timeout / 4 if args.quick else spec.timeout
    runs: list[dict[str, Any]] = []
    error = server.error if spec.postgres else None
    env = server.env if spec.postgres else {}
    for i in range(0 if error else repeat):
        label = f"{name} {i + 1}/{repeat}"
        print(f"[{label}] starting", file=sys.stderr, flush=True)
        result = _run_child(name, label, args.quick, timeout, args.workdir, env)
        if "error" in result:
            # a lost server is said in one line (the next -pg scenarios are not run)
            error = (server.gone() if spec.postgres else None) or result["error"]
            print(f"[{label}] FAILED: {error}", file=sys.stderr, flush=True)
            break
        print(f"[{label}] done in {result.get('seconds', 0):.1f} s", file=sys.stderr, flush=True)
        runs.append(result)
    figures = aggregate([r["figures"] for r in runs]) if runs else []
    return {
        "summary": spec.summary,
        "ok": error is None,
        "error": error,
        "figures": figures,
        "runs": runs,
    }


class _Server:
    """The run's PostgreSQL server, started when a selected scenario needs one."""

    def __init__(self) -> None:
        self.handle: Any = None
        self.error: str | None = None
        self.env: dict[str, str] = {}
        self.info: dict[str, Any] | None = None

    def start(self, dsn: str | None, workdir: str | None) -> None:
        from benchmarks import pgserver

        print("[postgres] starting the server", file=sys.stderr, flush=True)
        try:
            self.handle = pgserver.start_server(dsn, workdir)
            embedded = self.handle.pid is not None
            self.info = pgserver.describe_server(self.handle.admin_dsn, embedded=embedded)
        except Exception as exc:  # noqa: BLE001 - the -pg scenarios fail, the others run
            self.error = f"no PostgreSQL server: {type(exc).__name__}: {exc}"
            print(f"[postgres] {self.error}", file=sys.stderr, flush=True)
            self.stop()
            return
        self.info["pid"] = self.handle.pid
        self.env = {pgserver.ADMIN_DSN_ENV: self.handle.admin_dsn}
        print(f"postgres: {pgserver.server_line(self.info)}", flush=True)

    def gone(self) -> str | None:
        """One line saying the server is gone (then every later -pg scenario fails with
        it), else ``None``."""
        if self.handle is None or self.error is not None:
            return self.error
        self.error = self.handle.gone()
        return self.error

    def stop(self) -> None:
        handle, self.handle = self.handle, None
        if handle is not None:
            handle.stop()
            print("[postgres] server stopped", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; see the module docstring for the exit status."""
    args = _parse(argv)
    if args.list:
        for s in SCENARIOS:
            print(f"{s.name:<14} {s.summary}")
        return 0
    names = args.scenarios or _NAMES
    repeat = args.repeat or (1 if args.quick else 3)
    machine = describe()
    command = shlex.join(["python", "-m", "benchmarks",
                          *(sys.argv[1:] if argv is None else argv)])
    print(f"machine: {machine_line(machine)}")
    print(f"mode: gevent (each run in a child process patched before any import), "
          f"{'quick' if args.quick else 'full'}, {repeat} run(s) per scenario\n", flush=True)
    started = time.perf_counter()
    report: dict[str, Any] = {
        "command": command,
        "machine": machine,
        "mode": "gevent",
        "quick": args.quick,
        "repeat": repeat,
        "scenarios": {},
    }
    server = _Server()
    try:
        if any(s.postgres for s in SCENARIOS if s.name in names):
            server.start(args.dsn, args.workdir)
            report["postgres"] = server.info
            print(flush=True)
        for name in names:
            result = _run_scenario(name, args, repeat, server)
            report["scenarios"][name] = result
            title = f"{name}: {result['summary']}"
            if result["figures"]:
                print(render_table(title, result["figures"], markdown=args.markdown))
            if not result["ok"]:
                print(f"{name}: FAILED: {result['error']}")
            print(flush=True)
    finally:
        server.stop()
    report["seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
        except OSError as exc:
            print(f"python -m benchmarks: error: cannot write {args.json}: {exc}",
                  file=sys.stderr)
            return 1
    failed = [n for n, r in report["scenarios"].items() if not r["ok"]]
    missed = [f"{n}: {f['label']}" for n, r in report["scenarios"].items()
              for f in r["figures"] if f["status"] == "MISS"]
    print(f"{len(names)} scenario(s) in {report['seconds']} s; "
          f"{len(failed)} failed, {len(missed)} target(s) missed")
    if failed:
        return 1
    if args.check and missed:
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
