"""Each test run has a PostgreSQL server of its own, and a run whose server is gone says so
in one line (issue 40: two runs on one machine must not reach each other's server, and a
lost server is one clear failure per test, not a cascade of tracebacks).

One inner pytest run (the project's own fixtures, loaded from ``tests/conftest.py``) starts
its embedded server, reports its port and data directory, kills it with SIGKILL, and goes
on to two more tests that need it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from hermes_actors.testing.postgres import TEST_DSN_ENV, server_parent

ROOT = Path(__file__).resolve().parents[3]

CONFTEST = textwrap.dedent(f"""
    import importlib.util
    import sys

    _spec = importlib.util.spec_from_file_location("project_conftest",
                                                   {str(ROOT / "tests" / "conftest.py")!r})
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["project_conftest"] = _module
    _spec.loader.exec_module(_module)
    globals().update({{k: v for k, v in vars(_module).items() if not k.startswith("__")}})
""")

TESTS = textwrap.dedent("""
    import os
    import signal

    import psycopg

    from hermes_actors.testing import wait_until

    def test_1_the_server_is_killed(postgres_server, postgres_dsn):
        print(f"SERVER port={postgres_server.port} data={postgres_server.data_dir}")
        with psycopg.connect(postgres_dsn) as conn:
            assert conn.execute("SHOW port").fetchone()[0] == str(postgres_server.port)
        os.kill(postgres_server.pid, signal.SIGKILL)
        wait_until(lambda: postgres_server.gone(), message="the server's end")
        psycopg.connect(postgres_dsn).close()  # what a test would meet next

    def test_2_a_later_test(postgres_dsn):
        raise AssertionError("ran without a server")

    def test_3_another(postgres_dsn):
        raise AssertionError("ran without a server")
""")


@pytest.mark.slow
def test_a_run_has_its_own_server_and_says_in_one_line_that_it_is_gone(
        tmp_path, postgres_server):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(TESTS)
    env = {k: v for k, v in os.environ.items() if k != TEST_DSN_ENV}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), "-c", os.devnull, "--basetemp", str(tmp_path / "base"),
         str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    [server] = [line for line in out.splitlines() if line.startswith("SERVER ")]
    port, data = (part.split("=", 1)[1] for part in server.split()[1:])
    # its own server: a port and a data directory of its own, not this run's
    if postgres_server.port is not None:
        assert int(port) != postgres_server.port, out
        assert data != str(postgres_server.data_dir), out
    assert Path(data).name == "data" and not Path(data).exists(), out  # removed at its end
    # every test that needed it failed with the one line, and no traceback was shown
    line = "the run's PostgreSQL server (pid "
    gone = [x for x in out.splitlines() if line in x and "is gone: its process no longer runs"
            in x]
    assert len(gone) >= 3, out
    assert "Traceback" not in out and "OperationalError" not in out, out
    assert "During handling" not in out and "connection is bad" not in out, out
    assert "ran without a server" not in out, out


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0,
                    reason="as another user the server runs as the caller: any folder works")
def test_a_data_directory_the_servers_user_cannot_reach_is_not_opened_up(tmp_path):
    """Under root the server runs as a user of its own: a base folder it cannot pass
    through (pytest's private ``/tmp/pytest-of-root`` is one) is left as it is, and the
    data directory goes to the system's temporary directory; a reachable one is used."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    assert server_parent(private) == Path(tempfile.gettempdir())
    assert private.stat().st_mode & 0o777 == 0o700
    shared = Path(tempfile.mkdtemp())
    try:
        shared.chmod(0o755)
        assert server_parent(shared) == shared
    finally:
        shared.rmdir()
    assert server_parent(None) == Path(tempfile.gettempdir())
