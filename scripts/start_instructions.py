#!/usr/bin/env python3
"""Instructions of a crash recovery's start: the recovery scenario's gateway process, counted
so that the VM's drifting speed does not blur a comparison of two checkouts.

The fixture is the ``recovery`` benchmark's (a crashed gateway's ``state.db``: ``SESSIONS``
sessions, ``MARKERS`` in-flight turns, half of them with a persisted reply), built once with
this checkout's code and copied fresh for every run. Each checkout's gateway process
(``python -m benchmarks._ready``: gevent patched, the standalone process's collector
settings) is started on a copy under valgrind's callgrind and counted from the interpreter's
start until ``Gateway.start()`` returned (it exits then: its standard input is closed). Its
database writer child runs natively, uncounted::

    python scripts/start_instructions.py                  # this checkout
    python scripts/start_instructions.py ../old-checkout  # and another one, same venv

A run of the full size takes about a minute and a half under callgrind. Needs ``valgrind``
on the PATH (a system package, not a Python one).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's benchmarks package, run from anywhere

from benchmarks.callgrind import (  # noqa: E402
    checkouts,
    compare,
    count_instructions,
    script_parser,
    without_valgrind,
)


def count(tree: Path, fixture: Path, markers: int) -> int:
    """Instructions of ``tree``'s gateway process from its start to ready on a copy of
    ``fixture`` (a home), checked: every marker judged."""
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "home"
        shutil.copytree(fixture, home)
        instructions, printed = count_instructions(tree, ["-m", "benchmarks._ready", str(home)],
                                                   cwd=tree)
    report = json.loads(printed.splitlines()[0])["report"] if printed.strip() else ""
    if f"recovered_replies={markers // 2}" not in report:
        raise RuntimeError(f"{tree}: recovery did not judge every marker: {report!r}")
    return instructions


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--sessions", type=int, default=100_000,
                        help="stored sessions (default 100000)")
    parser.add_argument("--markers", type=int, default=1_000,
                        help="in-flight turn markers among them (default 1000)")
    args = parser.parse_args(argv)
    if without_valgrind("start_instructions"):
        return 2
    if not 2 <= args.markers <= args.sessions:
        parser.error("--markers: at least 2 and at most --sessions")
    trees = checkouts(parser, ROOT, args.trees)
    from benchmarks.fixtures import build_state_db

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        fixture = Path(scratch) / "home"
        print(f"fixture: {args.sessions:,} sessions, {args.markers:,} markers ...",
              file=sys.stderr, flush=True)
        build_state_db(fixture, args.sessions, markers=args.markers,
                       replied=args.markers // 2, now=time.time())
        for tree in trees:
            print(f"{tree}: start under callgrind ...", file=sys.stderr, flush=True)
            rows.append((tree, count(tree, fixture, args.markers)))
    print(compare(rows, "instructions"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
