"""The soak script, briefly: real process, real restarts, every accepted message reconciled
by event id."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SOAK = Path(__file__).resolve().parents[2] / "scripts" / "soak.py"


@pytest.mark.slow
def test_short_soak_loses_and_duplicates_nothing(tmp_path):
    """A 15-second soak with restarts every few seconds ends with 0 lost, 0 duplicated,
    0 unnamed (by event id)."""
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, str(SOAK), "--minutes", "0.25", "--chats", "4", "--seed", "7",
         "--restart-min", "3", "--restart-max", "5", "--home", str(tmp_path / "home"),
         "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["messages"] > 0 and result["restarts"] >= 2
    assert result["lost"] == 0 and result["duplicated"] == 0 and result["unnamed"] == 0
    assert proc.stdout.strip().splitlines()[-1].startswith(f"soak: {result['messages']} messages")
