"""A real gateway's HTTP API called as a WSGI application, in the process of the test: the
operator routes' tests (``/v1/admin/...``, the console and its event stream), standalone
and on a cluster node, build and call it through these."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from hermes_actors.adapters.http import HttpApi

__all__ = ["ADMIN", "TOKEN", "admin_api", "admin_call", "admin_path", "request"]

#: The ingress token and the operator's (``http.token``, ``http.admin_token``).
TOKEN = "ingress-t0ken"
ADMIN = "admin-t0ken"


def admin_api(gateway: Any, *, token: str | None = TOKEN, admin: str | None = ADMIN,
              outbox: Any = None, **settings: Any) -> HttpApi:
    """``gateway``'s API with these tokens (no admin token: no operator routes) and the
    webhook platform; ``settings`` adds more ``http.*`` settings (``max_streams``...)."""
    config = SimpleNamespace(token=token, admin_token=admin, max_body=4096,
                             platforms=("webhook",), **settings)
    return HttpApi(gateway, outbox=outbox, settings=config)


def request(api: HttpApi, path: str, *, method: str = "GET", token: str | None = None,
            query: str = "", body: bytes = b"") -> tuple[int, dict[str, str], Iterable[bytes]]:
    """``(status, headers, body iterable)`` of one request (a stream is read as it is
    iterated); ``token`` goes in ``Authorization: Bearer``."""
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query,
               "wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body))}
    if token is not None:
        environ["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    seen: list = []
    answer = api(environ, lambda status, headers: seen.append((status, headers)))
    status, headers = seen[0]
    return int(status.split()[0]), dict(headers), answer


def admin_call(api: HttpApi, path: str, *, method: str = "GET", token: str | None = ADMIN,
               query: str = "", body: bytes = b"") -> tuple[int, dict]:
    """``(status, JSON answer)`` of one request, with the operator's token by default."""
    status, _, answer = request(api, path, method=method, token=token, query=query,
                                body=body)
    return status, json.loads(b"".join(answer))


def admin_path(key: str, action: str = "") -> str:
    """``/v1/admin/sessions/<key>[/<action>]`` as a WSGI server hands it over: the key
    percent-decoded, as it is."""
    return f"/v1/admin/sessions/{key}" + (f"/{action}" if action else "")
