#!/usr/bin/env python3
"""Instructions per turn of the HTTP path (``POST /v1/messages`` -> long-poll reply) and
per answer pushed to an open ``GET /v1/stream``: the ``http`` and ``sse`` scenarios' loads,
counted by valgrind's callgrind, so two checkouts compare on a contended machine whose
timings drift by more than the change.

The gateway process is counted with its load driver (the clients run in it, as in the
timed scenarios); its database writer child runs natively, uncounted. The server and the
driver are this checkout's (:mod:`benchmarks.scenarios.http`, :mod:`benchmarks.httpload`)
whatever tree is measured, so an older tree, without them, is measured with the same
load; only ``hermes_actors`` comes from the tree. Two runs per tree differ only in the
number of turns; their difference over the extra turns is one turn, free of start-up::

    python scripts/http_instructions.py                  # this checkout
    python scripts/http_instructions.py ../old-checkout  # and another one, same venv
    python scripts/http_instructions.py --scenario sse   # answers to 1,000 open streams
    python scripts/http_instructions.py --scenario long-poll-raw  # the raw bound's

Each run takes 15-60 s under callgrind. Needs ``valgrind`` on the PATH.
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

#: The child: ``hermes_actors`` from the measured tree, the load from this checkout.
CHILD = """
import sys, tempfile, pathlib
from hermes_actors._green.monkey import patch_all
patch_all()
import hermes_actors
sys.path.insert(0, sys.argv[1])
from benchmarks.scenarios.http import gateway_server, raw_server
from benchmarks.httpload import long_poll_load, stream_load
from hermes_actors.store.store import SessionStore
SessionStore.__init__.__kwdefaults__["mirror_interval"] = None  # no mirror timer
scenario, size, messages = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
kind, raw = scenario.removesuffix("-raw"), scenario.endswith("-raw")
http = {"max_streams": size + 8, "max_connections": size + 64}
with tempfile.TemporaryDirectory() as home:
    with raw_server(http) if raw else gateway_server(pathlib.Path(home) / "h", http) as port:
        if kind == "long-poll":
            long_poll_load(port, size, messages, 32, timeout=900)
        else:
            stream_load(port, size, messages, 32, timeout=900)
"""
#: Per scenario: the two runs' ``(size, messages)``; the long poll varies the sessions (3
#: messages each), the stream the answers per stream (1,000 streams open in both).
RUNS = {"long-poll": ((100, 3), (300, 3)), "sse": ((1000, 1), (1000, 2))}
#: ``-raw``: the same load against the raw bound (:class:`benchmarks.rawhttp.RawApi`), what
#: the server stack and the driver alone execute.
RUNS.update({f"{name}-raw": sizes for name, sizes in list(RUNS.items())})


def count(tree: Path, scenario: str, size: int, messages: int) -> int:
    """Instructions the gateway process of ``tree`` executes for the run."""
    args = ["-c", CHILD, str(ROOT), scenario, str(size), str(messages)]
    return count_instructions(tree, args)[0]


def main(argv: list[str] | None = None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("--scenario", choices=sorted(RUNS), default="long-poll",
                        help="the load (default long-poll)")
    args = parser.parse_args(argv)
    if without_valgrind("http_instructions"):
        return 2
    trees = checkouts(parser, ROOT, args.trees)
    rows = []
    for tree in trees:
        runs = []
        for size, messages in RUNS[args.scenario]:
            print(f"{tree}: {args.scenario} {size:,} x {messages} under callgrind ...",
                  file=sys.stderr, flush=True)
            turns = size * messages
            runs.append((turns, count(tree, args.scenario, size, messages)))
        rows.append((tree, per_turn(runs[0], runs[1])))
    print(compare(rows, "instructions/turn"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
