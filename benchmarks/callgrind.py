"""Instructions a Python command of a checkout executes, counted by valgrind's callgrind.

On the VMs this project runs on, timings drift by a quarter from one minute to the next
(and by more on a contended one), so a change of a few per cent cannot be told apart by
timing. Instruction counts do not drift: ``scripts/turn_instructions.py`` (a turn) and
``scripts/start_instructions.py`` (a crash recovery's start) compare checkouts with them.
Only the command's own process is counted (the database writer child it spawns runs
natively, uncounted). Hash randomisation is off (``PYTHONHASHSEED=0``): with it on, dict and
set layouts, and with them the counts, move by a few per cent from run to run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["compare", "count_instructions", "is_checkout", "valgrind_missing"]

_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def valgrind_missing() -> bool:
    """Whether ``valgrind`` is not on the PATH (a system package, not a Python one)."""
    return shutil.which("valgrind") is None


def is_checkout(tree: Path) -> bool:
    """Whether ``tree`` looks like a checkout of this project."""
    return (tree / "hermes_actors").is_dir() and (tree / "benchmarks").is_dir()


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
