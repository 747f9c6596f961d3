"""``pw``: peewee, imported without its PostgreSQL drivers.

peewee imports ``psycopg2`` and ``psycopg`` at its own import when they are installed, to
offer them to ``PostgresqlDatabase``. psycopg 3 takes 110-300 ms to import here (its type
adapters, libpq): on the SQLite backend that is paid twice at every start, in the gateway
and in its writer process, for a driver that is never used, and it is more than the whole
recovery of 100,000 sessions. So every backend module imports peewee from here: the first
import in a process runs with the drivers hidden, and peewee's own driver globals stay
``None``. The PostgreSQL backend imports psycopg itself when it is chosen and hands it to
peewee through the extension point peewee gives for that (the ``psycopg3_adapter`` class
attribute of ``PostgresqlDatabase``), so it does not depend on which import came first.

Only in the tested range of peewee (``_versions.TESTED``; its version read from the first
lines of ``peewee.py``, without importing it): outside it peewee is imported plainly, its
drivers with it.

Rejected: making psycopg an optional extra only (the test and benchmark installs have it,
and an operator who installs it for one home would slow every SQLite home); a lazy module
object standing in for psycopg (peewee touches its attributes at import).
"""

from __future__ import annotations

import importlib.util
import re
import sys

from hermes_actors._versions import in_tested_range

__all__ = ["HIDDEN_DRIVERS", "peewee_source_version", "pw"]

#: The driver modules peewee tries at import, hidden while it is imported from here.
HIDDEN_DRIVERS = ("psycopg2cffi", "psycopg2", "psycopg")


_VERSION_LINE = re.compile(r"""^__version__ = ['"]([^'"]+)['"]""", re.MULTILINE)


def peewee_source_version() -> str | None:
    """peewee's ``__version__`` read from the start of its (one-file) source, without
    importing it; ``None`` when not found."""
    spec = importlib.util.find_spec("peewee")
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    try:
        with open(spec.origin, encoding="utf-8") as file:
            head = file.read(8192)
    except OSError:
        return None
    match = _VERSION_LINE.search(head)
    return match.group(1) if match else None


def _import_peewee():  # noqa: ANN202 - the peewee module (untyped)
    if "peewee" in sys.modules:
        return sys.modules["peewee"]
    if not in_tested_range("peewee", peewee_source_version()):
        import peewee  # the public way: its drivers are imported too

        return peewee
    hidden = [name for name in HIDDEN_DRIVERS if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        import peewee
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return peewee


#: The peewee module.
pw = _import_peewee()
