"""The standalone process's collector settings (run in a child: they are process-wide)."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import gc
from hermes_actors.process.heap import GC_THRESHOLDS, freeze_startup_heap, tune_gc
tune_gc()
assert gc.get_threshold() == GC_THRESHOLDS, gc.get_threshold()
loaded = [dict(n=n) for n in range(1000)]
before = gc.get_freeze_count()
freeze_startup_heap()
assert gc.get_freeze_count() >= before + 1000
print("ok")
"""


def test_thresholds_raised_and_startup_heap_frozen():
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
