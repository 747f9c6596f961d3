"""The SQLite backend imports peewee without peewee's PostgreSQL drivers (their import costs
more than a whole recovery), and leaves them importable for whoever needs them."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
import hermes_actors.store.backends.sqlite.writer_child  # what the writer process imports
import peewee
loaded = sorted(n for n in ("psycopg", "psycopg2") if n in sys.modules)
drivers = [peewee.psycopg is not None, peewee.psycopg2 is not None]
import psycopg  # still importable afterwards
print(json.dumps({"loaded": loaded, "peewee_drivers": drivers, "psycopg": psycopg.__name__}))
"""


@pytest.mark.skipif(importlib.util.find_spec("psycopg") is None,
                    reason="psycopg is not installed, so there is nothing to keep out")
class TestPeeweeWithoutDrivers:
    """peewee comes up without psycopg, which stays importable."""

    def test_the_sqlite_backend_does_not_load_psycopg(self):
        out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                             check=True, timeout=60)
        seen = json.loads(out.stdout)
        assert seen == {"loaded": [], "peewee_drivers": [False, False], "psycopg": "psycopg"}
