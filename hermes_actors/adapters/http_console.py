"""``GET /console``: the operator console, a page shipped in the package.

Plain HTML, CSS and JavaScript in ``adapters/console/`` (package data: no build step, nothing
fetched from elsewhere, so it works offline). The files open without a token, and hold no
data: the page asks the operator routes for everything, with the admin token it keeps in
``sessionStorage`` (from its form, or from a ``#token=`` fragment, which never reaches the
server) and sends only as ``Authorization: Bearer``. :class:`HttpApi` serves them only
while the operator routes are on (``http.admin_token``).

Every answer carries a Content-Security-Policy that allows the page's own scripts, styles,
images and requests and nothing else (no inline script, no other origin, no framing).
"""

from __future__ import annotations

import functools
from importlib import resources

__all__ = ["CONSOLE_PATH", "HEADERS", "console_asset", "is_console"]

CONSOLE_PATH = "/console"
#: The files of the console, and their content types.
_FILES = {
    "index.html": "text/html; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
#: Headers of every console answer.
HEADERS = (
    ("Content-Security-Policy",
     "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
     "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
)


def is_console(path: str) -> bool:
    """Whether ``path`` is the console's (the page, or one of its files)."""
    return path == CONSOLE_PATH or path.startswith(CONSOLE_PATH + "/")


def console_asset(path: str) -> tuple[bytes, str] | None:
    """``(content, content type)`` of the console file at ``path`` (``/console`` and
    ``/console/`` are the page), or ``None``."""
    name = path[len(CONSOLE_PATH):].lstrip("/") or "index.html"
    content_type = _FILES.get(name)
    if content_type is None:
        return None
    return _read(name), content_type


@functools.cache
def _read(name: str) -> bytes:
    return (resources.files("hermes_actors.adapters") / "console" / name).read_bytes()
