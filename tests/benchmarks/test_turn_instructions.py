"""``scripts/turn_instructions.py``: its refusal of bad sizes (one turn from two sizes and
the refusals the scripts share: ``test_callgrind``)."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="module")
def script(load_script):
    return load_script("turn_instructions")


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_bad_sizes_are_refused(script, capsys):
    with pytest.raises(SystemExit):
        script.main(["--sessions", "300", "100"])
    assert "SMALL must be positive and below LARGE" in capsys.readouterr().err
