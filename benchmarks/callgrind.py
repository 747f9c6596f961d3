"""Instructions a Python command of a checkout executes, counted by valgrind's callgrind.

On the VMs this project runs on, timings drift by a quarter from one minute to the next
(and by more on a contended one), so a change of a few per cent cannot be told apart by
timing. Instruction counts do not drift: ``scripts/turn_instructions.py`` (a turn),
``scripts/http_instructions.py`` (a turn over HTTP) and ``scripts/start_instructions.py`` (a
crash recovery's start) compare checkouts with them, through the pieces here: the parser of
the checkouts to measure, their check, the count, one turn from two runs, and the table.
Only the command's own process is counted (the database writer child it spawns runs
natively, uncounted). Hash randomisation is off (``PYTHONHASHSEED=0``): with it on, dict and
set layouts, and with them the counts, move by a few per cent from run to run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["checkouts", "compare", "count_instructions", "is_checkout", "per_turn",
           "script_parser", "valgrind_missing", "without_valgrind"]

_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def valgrind_missing() -> bool:
    """Whether ``valgrind`` is not on the PATH (a system package, not a Python one)."""
    return shutil.which("valgrind") is None


def without_valgrind(script: str) -> bool:
    """Whether ``valgrind`` is missing; if so, ``script`` says so on standard error (and
    exits 2)."""
    if not valgrind_missing():
        return False
    print(f"{script}: valgrind is not installed (apt install valgrind)", file=sys.stderr)
    return True


def is_checkout(tree: Path) -> bool:
    """Whether ``tree`` looks like a checkout of this project."""
    return (tree / "hermes_actors").is_dir() and (tree / "benchmarks").is_dir()


def script_parser(doc: str) -> argparse.ArgumentParser:
    """A script's parser: the first paragraph of ``doc`` as its description, and the
    checkouts to measure after this one (``trees``)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("trees", nargs="*", type=Path,
                        help="more checkouts to measure after this one (same interpreter)")
    return parser


def checkouts(parser: argparse.ArgumentParser, root: Path, more: Sequence[Path]) -> list[Path]:
    """``root``, then ``more``: every one a checkout of this project, else the parser's
    usage error (exit 2) names the one that is not."""
    trees = [root, *more]
    for tree in trees:
        if not is_checkout(tree):
            parser.error(f"{tree} is not a checkout of this project")
    return trees


def per_turn(small: tuple[int, int], large: tuple[int, int]) -> float:
    """Instructions of one turn from two runs' ``(turns, instructions)``: the difference
    over the extra turns, so that what both runs spend once (start-up) cancels out."""
    (turns_a, ir_a), (turns_b, ir_b) = small, large
    if turns_b <= turns_a:
        raise ValueError("the second run must have more turns than the first")
    return (ir_b - ir_a) / (turns_b - turns_a)


def count_instructions(tree: Path, args: list[str], *, cwd: Path | None = None) -> tuple[int, str]:
    """Run ``python ARGS`` with ``tree`` first on the path (its bytecode compiled first, as a
    restarted gateway has it), under callgrind, standard input closed. Returns the
    instructions and what the command printed; a failed run raises ``RuntimeError``."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "hermes_actors"),
                    str(tree / "benchmarks")], check=True, stdout=subprocess.DEVNULL)
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
    with tempfile.TemporaryDirectory() as scratch:
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={scratch}/cg.out",
             sys.executable, *args],
            env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    found = _COLLECTED.search(out.stderr)
    if out.returncode != 0 or found is None:
        tail = "\n".join(out.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"the run under callgrind failed (exit {out.returncode}):\n{tail}")
    return int(found.group(1)), out.stdout


def compare(rows: Sequence[tuple[Path, float]], heading: str) -> str:
    """The table the scripts print: each checkout's count (``heading``) and its ratio to
    the first one's."""
    base = rows[0][1]
    lines = [f"{'tree':<40} {heading:>18} {'vs first':>9}"]
    lines += [f"{str(tree):<40} {value:>18,.0f} {value / base:>9.3f}" for tree, value in rows]
    return "\n".join(lines)
