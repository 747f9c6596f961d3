"""``scripts/start_instructions.py``: its refusal of bad sizes before anything runs under
callgrind (the refusals the scripts share: ``test_callgrind``)."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="module")
def script(load_script):
    return load_script("start_instructions")


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
@pytest.mark.parametrize("args, says", [
    (["--markers", "1"], "--markers: at least 2 and at most --sessions"),
    (["--sessions", "10", "--markers", "20"], "--markers: at least 2 and at most --sessions"),
])
def test_bad_sizes_are_refused(script, capsys, args, says):
    with pytest.raises(SystemExit):
        script.main(args)
    assert says in capsys.readouterr().err
