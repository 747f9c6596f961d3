#!/usr/bin/env python3
"""Instructions per turn of the gateway process: a side-by-side measure that the VM's
drifting speed does not blur.

On the VMs this project runs on, the CPU a turn costs drifts by a quarter from one minute
to the next for the same code (the database writer's own CPU per turn, whose work does not
change, drifts with it), so a change of 2-5 % cannot be told apart by timing, even pair by
pair. Instruction counts do not drift. valgrind's callgrind counts what the gateway process
executes (its database writer child runs natively, uncounted) in the throughput scenario's
closed loop at two sizes; the difference divided by the difference in turns is one turn,
free of start-up. Not of shutdown: ``Gateway.stop()`` spends about 228,000 instructions per
live actor, and the larger run stops more actors, so each turn carries a third of one
actor's stop (3 messages a session), which the timed benchmark does not count::

    python scripts/turn_instructions.py                  # this checkout
    python scripts/turn_instructions.py ../old-checkout  # and another one, same venv

Each size runs 30-100 s under callgrind. Needs ``valgrind`` on the PATH (a system package,
not a Python one). Under callgrind the gateway is ~50x slower than the writer, so frames
carry fewer op lists than in a timed run: compare trees with this, not with the timings.
The ``sessions.json`` mirror's timer is off in the measured runs: it renders every entry
every 5 s of wall time, so under callgrind it ran ~50x as often a turn as in a timed run and
its share (about 100,000 instructions a turn at 4,000 sessions, with the run's length)
blurred the turn's own.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's benchmarks package, run from anywhere

from benchmarks.callgrind import (  # noqa: E402
    checkouts,
    compare,
    count_instructions,
    per_turn,
    script_parser,
    without_valgrind,
)

#: The child: the throughput scenario's ``runtime_turns`` under gevent, ``sessions`` x 3.
CHILD = """
import sys, tempfile, pathlib
from hermes_actors._green.monkey import patch_all
patch_all()
from benchmarks.scenarios.throughput import runtime_turns
from benchmarks.util import Progress
from hermes_actors.store.store import SessionStore
SessionStore.__init__.__kwdefaults__["mirror_interval"] = None  # no mirror timer (see doc)
with tempfile.TemporaryDirectory() as home:
    runtime_turns(pathlib.Path(home) / "h", int(sys.argv[1]), 3, Progress("turns"))
"""
MESSAGES = 3


def count(tree: Path, sessions: int) -> int:
    """Instructions the gateway process of ``tree`` executes for ``sessions`` x 3 turns."""
    return count_instructions(tree, ["-c", CHILD, str(sessions)])[0]


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--sessions", type=int, nargs=2, default=(1000, 3000),
                        metavar=("SMALL", "LARGE"), help="the two sizes (default 1000 3000)")
    args = parser.parse_args(argv)
    if without_valgrind("turn_instructions"):
        return 2
    small, large = args.sessions
    if not 0 < small < large:
        parser.error("--sessions: SMALL must be positive and below LARGE")
    trees = checkouts(parser, ROOT, args.trees)
    rows = []
    for tree in trees:
        runs = []
        for sessions in (small, large):
            print(f"{tree}: {sessions:,} sessions x {MESSAGES} under callgrind ...",
                  file=sys.stderr, flush=True)
            runs.append((sessions * MESSAGES, count(tree, sessions)))
        rows.append((tree, per_turn(runs[0], runs[1])))
    print(compare(rows, "instructions/turn"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
