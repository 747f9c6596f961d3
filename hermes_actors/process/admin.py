"""``hermes-actors admin ...`` (issue 39): the operator routes of a running gateway
(``/v1/admin/...``, :mod:`hermes_actors.adapters.http_admin`) from the command line.

Every command talks to ``--url`` (default: as ``send``'s) with ``--admin-token`` (default:
``$HERMES_HTTP_ADMIN_TOKEN``, or ``http.admin_token`` of the home's configuration) and prints
a readable table, or the answer's JSON with ``--json``. Exit codes: 0 done; 1 the gateway
failed (unreachable, 5xx); 2 a usage error or a refusal (401 wrong token, 404 unknown or
routes off, 409 not retryable, ``delete`` without ``--yes``).
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.parse
from typing import Any

from hermes_actors.errors import CommandFailed, UsageError

__all__ = ["ADMIN_COMMANDS", "configure_admin", "configure_admin_key"]

_COLUMNS = ("session_key", "running", "queue_depth", "suspended", "resume_pending",
            "updated_at")
_DELIVERY_COLUMNS = ("obligation_id", "state", "attempts", "session_key", "last_error")


def configure_admin(parser: argparse.ArgumentParser) -> None:
    """``--url``, ``--admin-token`` and ``--json`` of every ``admin`` command."""
    parser.add_argument("--url", help="the gateway (default: http://127.0.0.1:8642, or the "
                        "host and port of http in the home's config.yaml and HERMES_HTTP_*)")
    parser.add_argument("--admin-token", help="the operator token (default: "
                        "$HERMES_HTTP_ADMIN_TOKEN, or http.admin_token in the home's "
                        "config.yaml)")
    parser.add_argument("--json", action="store_true", help="print the answer's JSON")


def configure_admin_sessions(parser: argparse.ArgumentParser) -> None:
    """``admin sessions [--state S] [--limit N]``."""
    configure_admin(parser)
    parser.add_argument("--state", default="all",
                        choices=("running", "suspended", "resume_pending", "all"))
    parser.add_argument("--limit", type=int, default=100)


def configure_admin_key(parser: argparse.ArgumentParser) -> None:
    """``admin show|cancel|reset|unsuspend KEY``."""
    configure_admin(parser)
    parser.add_argument("key", help="the session key, e.g. agent:main:telegram:dm:42")


def configure_admin_delete(parser: argparse.ArgumentParser) -> None:
    """``admin delete KEY --yes``."""
    configure_admin_key(parser)
    parser.add_argument("--yes", action="store_true",
                        help="confirm: the conversation is deleted for good")


def configure_admin_deliveries(parser: argparse.ArgumentParser) -> None:
    """``admin deliveries [--state failed|abandoned]``."""
    configure_admin(parser)
    parser.add_argument("--state", choices=("failed", "abandoned"),
                        help="only these (default: both)")


def configure_admin_retry(parser: argparse.ArgumentParser) -> None:
    """``admin retry ID``."""
    configure_admin(parser)
    parser.add_argument("obligation_id", metavar="ID", help="the delivery's obligation id")


def _request(args: argparse.Namespace, method: str, path: str,
             query: dict[str, Any] | None = None) -> Any:
    from hermes_actors.process.client import ClientError, GatewayClient
    from hermes_actors.process.commands import _home_http_settings, default_url
    from hermes_actors.process.home import resolve_home

    http = _home_http_settings(resolve_home(args))
    token = (args.admin_token or os.environ.get("HERMES_HTTP_ADMIN_TOKEN")
             or getattr(http, "admin_token", None))
    if not token:
        raise UsageError("no admin token: pass --admin-token or set HERMES_HTTP_ADMIN_TOKEN")
    try:
        client = GatewayClient(args.url or default_url(http), token)
        return client.request(method, path, query=query)
    except ClientError as exc:
        if exc.refused:
            raise UsageError(str(exc)) from None
        raise CommandFailed(str(exc)) from None


def _key_path(key: str, action: str = "") -> str:
    return "/v1/admin/sessions/" + urllib.parse.quote(key, safe="") + (
        f"/{action}" if action else "")


def _table(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(line[i]) for line in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
              for line in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return " ".join(str(value).split())  # one line a row


def _print(args: argparse.Namespace, data: Any, readable: str) -> int:
    print(json.dumps(data, ensure_ascii=False, indent=2) if args.json else readable,
          flush=True)
    return 0


def cmd_admin_sessions(args: argparse.Namespace) -> int:
    """``admin sessions``: the sessions with their live state."""
    data = _request(args, "GET", "/v1/admin/sessions",
                    {"state": args.state, "limit": args.limit})
    return _print(args, data, _table(data["sessions"], _COLUMNS))


def cmd_admin_show(args: argparse.Namespace) -> int:
    """``admin show KEY``: one session, its transcript's tail, inbox and deliveries."""
    data = _request(args, "GET", _key_path(args.key))
    lines = [f"{name}: {_cell(data.get(name))}" for name in (
        "session_key", "session_id", "platform", "chat_id", "thread_id", *_COLUMNS[1:])]
    lines.append(f"inbox: {len(data['inbox'])} unconsumed")
    lines += [f"  {event.get('event_id')}: {_cell(event.get('text'))}" for event in data["inbox"]]
    lines.append("deliveries:")
    lines += [f"  {row['obligation_id']} {row['state']} ({row['attempts']} attempts): "
              f"{_cell(row.get('content'))}" for row in data["deliveries"]]
    lines.append("transcript:")
    lines += [f"  {m.get('role')}: {_cell(m.get('content'))}" for m in data["transcript_tail"]]
    return _print(args, data, "\n".join(lines))


def _command(args: argparse.Namespace, action: str) -> int:
    data = _request(args, "POST", _key_path(args.key, action))
    if data.get("forwarded"):  # a cluster node that does not serve the session
        return _print(args, data, f"{args.key}: {action} sent to the node serving it "
                      f"(event {data['event_id']})")
    if action == "unsuspend":
        return _print(args, data, f"{args.key}: no longer suspended")
    return _print(args, data, f"{args.key}: {action} submitted as event {data['event_id']}")


def cmd_admin_cancel(args: argparse.Namespace) -> int:
    """``admin cancel KEY``: the session's chat's ``/stop``."""
    return _command(args, "cancel")


def cmd_admin_reset(args: argparse.Namespace) -> int:
    """``admin reset KEY``: the session's chat's ``/new``."""
    return _command(args, "reset")


def cmd_admin_unsuspend(args: argparse.Namespace) -> int:
    """``admin unsuspend KEY``: clear the suspension."""
    return _command(args, "unsuspend")


def cmd_admin_delete(args: argparse.Namespace) -> int:
    """``admin delete KEY --yes``: delete the conversation whole (a running turn is stopped
    first; nothing it still owed is sent)."""
    if not args.yes:
        raise UsageError(f"deleting {args.key} removes its transcript, inbox, deliveries and "
                         "outbox for good: add --yes to confirm")
    data = _request(args, "DELETE", _key_path(args.key))
    if data.get("forwarded"):  # a cluster node that does not serve the session
        return _print(args, data, f"{args.key}: delete sent to the node serving it "
                      f"(event {data['event_id']})")
    counts = ", ".join(f"{table} {count}" for table, count in data["deleted"].items())
    return _print(args, data, f"{args.key}: deleted ({counts})")


def cmd_admin_deliveries(args: argparse.Namespace) -> int:
    """``admin deliveries``: the failed and abandoned deliveries."""
    query = {"state": args.state} if args.state else None
    data = _request(args, "GET", "/v1/admin/deliveries", query)
    return _print(args, data, _table(data["deliveries"], _DELIVERY_COLUMNS))


def cmd_admin_retry(args: argparse.Namespace) -> int:
    """``admin retry ID``: a failed or abandoned delivery back to pending."""
    data = _request(args, "POST", "/v1/admin/deliveries/"
                    + urllib.parse.quote(args.obligation_id, safe="") + "/retry")
    return _print(args, data, f"{args.obligation_id}: pending again (was {data['was']}); "
                  "the next ledger sweep sends it")


def cmd_admin_cluster(args: argparse.Namespace) -> int:
    """``admin cluster``: the cluster's nodes, shards and leases as the answering node
    reads them (the table of ``cluster status``); a refusal (exit 2) from a gateway that is
    not a cluster node."""
    from hermes_actors.process.cluster import format_status

    data = _request(args, "GET", "/v1/admin/cluster")
    lines = [f"answered by node {data.get('node_id')}", *format_status(data)]
    return _print(args, data, "\n".join(lines))


#: ``(word, help, run, configure)`` of each ``admin`` subcommand (rows of ``cli.SUBCOMMANDS``).
ADMIN_COMMANDS = (
    ("sessions", "list sessions with their live state", cmd_admin_sessions,
     configure_admin_sessions),
    ("show", "show one session (transcript tail, inbox, deliveries)", cmd_admin_show,
     configure_admin_key),
    ("cancel", "stop a session's running turn (as the chat's /stop)", cmd_admin_cancel,
     configure_admin_key),
    ("reset", "start a session over (as the chat's /new)", cmd_admin_reset,
     configure_admin_key),
    ("unsuspend", "clear a session's suspension", cmd_admin_unsuspend, configure_admin_key),
    ("delete", "delete a conversation whole (needs --yes)", cmd_admin_delete,
     configure_admin_delete),
    ("deliveries", "list failed and abandoned deliveries", cmd_admin_deliveries,
     configure_admin_deliveries),
    ("retry", "put a failed or abandoned delivery back to pending", cmd_admin_retry,
     configure_admin_retry),
    ("cluster", "show the cluster's nodes, shards and leases", cmd_admin_cluster,
     configure_admin),
)
