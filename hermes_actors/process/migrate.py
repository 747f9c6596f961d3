"""``hermes-actors db migrate --to DSN``: move a SQLite home's store into PostgreSQL.

The copy itself is :func:`hermes_actors.store.transfer.transfer` (one transaction on the
target, counts verified before the commit). This module decides whether it may run and
tells the user what came of it:

* refused, exit 2, one line: a home that does not exist or holds no ``state.db``; a home
  whose configuration (``<home>/config.yaml``, ``HERMES_STORE_*``) already keeps its store
  in PostgreSQL (``--to`` itself, or another database: ``state.db`` is then not the
  home's store); a ``--to`` that is not a DSN; a home a running gateway holds (the home
  lock, :mod:`hermes_actors.runtime.homelock`, taken for the whole copy so no gateway can
  start meanwhile); a target that holds rows; a server that cannot be reached. DSNs are
  shown with their password masked;
* failed, exit 1: the copy did not go through (nothing was committed; the message says
  why); run the command again once the cause is fixed;
* done, exit 0: a table of the rows in ``state.db`` and in the target, the node id, and the
  configuration to put in place. The home's config file is not rewritten (the project
  never rewrites it) and ``state.db`` is left as it was.

Progress lines go to stderr (``db migrate: copying messages: 300000/1000000 rows``), the
summary to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from hermes_actors.errors import UsageError
from hermes_actors.model.dsn import HIDDEN, dsn_secrets, is_dsn, mask_dsn
from hermes_actors.process.home import CONFIG_NAME, existing_home, home_config

__all__ = ["cmd_db_migrate", "same_database"]


def same_database(a: str, b: str) -> bool:
    """Whether two DSNs name the same database (their connection parameters, passwords
    and client-side settings aside); compared as text when one does not parse."""
    try:
        from psycopg import conninfo
    except ModuleNotFoundError:
        return a.strip() == b.strip()
    ignored = {"password", "application_name", "connect_timeout", "sslmode"}
    try:
        first, second = conninfo.conninfo_to_dict(a), conninfo.conninfo_to_dict(b)
    except Exception:  # noqa: BLE001 - a DSN psycopg cannot read: compare the text
        return a.strip() == b.strip()

    def key(params: dict[str, Any]) -> dict[str, str]:
        return {k: str(v) for k, v in params.items() if k not in ignored}

    return key(first) == key(second)


def _refuse_a_postgres_home(config: Any, dsn: str) -> None:
    store = config.store
    if store.backend == "sqlite":
        return
    current = mask_dsn(store.dsn or "")
    if store.backend == "postgres" and store.dsn and same_database(store.dsn, dsn):
        raise UsageError(
            f"the target {mask_dsn(dsn)} is already the store of this home (store.backend: "
            "postgres): there is no SQLite store to move")
    raise UsageError(
        f"this home's store is {store.backend} ({current}), not its state.db: db migrate "
        "moves a home that runs on SQLite")


def _progress(line: str) -> None:
    print(f"db migrate: {line}", file=sys.stderr, flush=True)


def _summary(report: Any, home: Any, dsn: str) -> list[str]:
    width = max(len(name) for name in report.source_counts)
    lines = [f"migrated {home / 'state.db'} to {report.where} in {report.seconds:.1f}s",
             "",
             f"{'table':<{width}}  {'state.db':>10}  {'postgres':>10}"]
    for name, count in report.source_counts.items():
        lines.append(f"{name:<{width}}  {count:>10}  {report.target_counts[name]:>10}")
    lines.append("")
    for column, last in report.sequences.items():
        lines.append(f"sequence {column}: next value {last + 1}")
    if report.node_id:
        lines.append(f"node id {report.node_id}: kept in {home / 'node_id'}")
    # a DSN with no secret is shown whole (to be copied); else host, port, dbname, user only
    shown = dsn if not dsn_secrets(dsn) and mask_dsn(dsn) != HIDDEN else mask_dsn(dsn)
    lines += [
        "",
        f"state.db was not changed. To run this home on PostgreSQL, put this in "
        f"{home / CONFIG_NAME}:",
        "  store:",
        "    backend: postgres",
        f"    dsn: {json.dumps(shown)}" + (
            "  # the DSN given to --to, shown without its password (host, port, dbname and "
            "user only): write it whole" if shown != dsn else ""),
        "(or set HERMES_STORE_BACKEND=postgres and HERMES_STORE_DSN), then start the gateway.",
    ]
    return lines


def cmd_db_migrate(args: argparse.Namespace) -> int:
    """Copy the home's ``state.db`` into the empty PostgreSQL database ``--to`` names."""
    from hermes_actors.runtime.homelock import HomeLock
    from hermes_actors.store.transfer import transfer

    home = existing_home(args)
    dsn = args.to
    if not is_dsn(dsn):
        raise UsageError(f"--to needs a PostgreSQL connection string (postgresql://user@host/"
                         f"db, or key=value pairs), not {mask_dsn(dsn)!r}")
    _refuse_a_postgres_home(home_config(home), dsn)
    if not (home / "state.db").is_file():
        raise UsageError(f"there is no state.db in {str(home)!r}: nothing to migrate")
    with HomeLock(home):
        report = transfer(home, dsn, progress=_progress)
    print("\n".join(_summary(report, home, dsn)))
    return 0
