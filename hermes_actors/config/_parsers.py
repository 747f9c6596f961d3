"""The leaf parsers of the configuration: one function per kind of value, each naming the
dotted key in its error, attached to the section fields by ``_opt``."""

from __future__ import annotations

import math
import os
import shlex
import threading
from collections.abc import Callable, Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from hermes_actors.errors import ConfigError
from hermes_actors.model.context import HomeChannel
from hermes_actors.model.platform import Platform

Parser = Callable[[str, Any], Any]


# -- leaf parsers ----------------------------------------------------------------------------

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


#: How much of a bad value an error shows.
SHOWN_CHARS = 60


def _fail(key: str, expected: str, value: Any) -> ConfigError:
    return ConfigError(f"config key {key!r}: expected {expected}, got {_shown(value)}")


def _shown(value: Any) -> str:
    """``repr(value)``, cut short when long (a 400-digit number is no help in one line)."""
    if isinstance(value, int) and value.bit_length() > 200:  # str() refuses 4,300 digits
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise _fail(key, "a boolean (true/false, yes/no, on/off, 1/0)", value)


#: The largest integer a key takes: integers go through ``float`` (exact up to 2**53), and
#: every integer key is a count or a size far below it.
MAX_INTEGER = 2**53
#: The largest other number a key takes: they are seconds (or days, or MB), and a timeout
#: above ``threading.TIMEOUT_MAX`` makes every wait on it fail with OverflowError.
MAX_SECONDS = threading.TIMEOUT_MAX


def _bound(limit: float) -> str:
    return str(int(limit)) if float(limit).is_integer() else f"{limit:g}"


def _number(minimum: float = 0.0, *, integer: bool = False, maximum: float | None = None,
            allow_none: bool = False) -> Parser:
    """A finite number within ``minimum`` and ``maximum`` (default: :data:`MAX_INTEGER` or
    :data:`MAX_SECONDS`)."""
    kind = "an integer" if integer else "a number"
    if maximum is None:
        maximum = MAX_INTEGER if integer else MAX_SECONDS
    bounds = f" >= {_bound(minimum)} and <= {_bound(maximum)}"

    def parse(key: str, value: Any) -> Any:
        if value is None and allow_none:
            return None
        if isinstance(value, bool):
            raise _fail(key, kind + bounds, value)
        if isinstance(value, int):
            num: float = value  # compared as it is: float() rounds it, or overflows
        else:
            try:
                num = float(value.strip()) if isinstance(value, str) else float(value)
            except (TypeError, ValueError):
                raise _fail(key, kind + bounds, value) from None
        if not minimum <= num <= maximum:  # (an infinity is out of bounds; NaN fails it too)
            raise _fail(key, kind + bounds, value)
        if integer:
            if not (isinstance(num, int) or num.is_integer()):
                raise _fail(key, kind + bounds, value)
            return int(num)
        return float(num)

    return parse


def _choice(*options: str) -> Parser:
    def parse(key: str, value: Any) -> str:
        if isinstance(value, str) and value.strip().lower() in options:
            return value.strip().lower()
        raise _fail(key, "one of " + ", ".join(options), value)

    return parse


def _opt_str(key: str, value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise _fail(key, "a string", value)


def _token(key: str, value: Any) -> str | None:
    """A secret: ``None`` or ``""`` (no token), or a string that is not blank, without the
    spaces around it (a header's value loses them, so a token of spaces could never
    match)."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)  # (as _opt_str)
    if not isinstance(value, str):
        raise ConfigError(f"config key {key!r}: expected a token (a string) or null, got a "
                          f"{type(value).__name__} (not shown: it may be the token)")
    if not value.strip():
        raise _fail(key, "a token that is not blank (or null or \"\" for none)", value)
    return value.strip()


def _str(key: str, value: Any) -> str:
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise _fail(key, "a non-empty string", value)


def _command(key: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            parts = shlex.split(value)
        except ValueError as exc:
            raise _fail(key, f"a shell-style command line ({exc})", value) from None
        return tuple(parts) or None
    if isinstance(value, (list, tuple)) and all(isinstance(p, str) for p in value):
        return tuple(value) or None
    raise _fail(key, "a command line string or a list of strings", value)


def _positive_days(key: str, value: Any) -> float | None:
    """A positive number of days, or ``null`` (``None``; ``null``/``none`` from the
    environment): off."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("null", "none")):
        return None
    expected = "a positive number of days, or null (keep everything)"
    try:
        days = _number(0.0)(key, value)
    except ConfigError:
        raise _fail(key, expected, value) from None
    if days <= 0:
        raise _fail(key, expected, value)
    return float(days)


def _memory_budget(key: str, value: Any) -> float | str | None:
    """``auto``, a number of MB, or ``0``/``off``/``false`` (disabled → ``None``)."""
    if value is False or value is None:
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "auto":
            return "auto"
        if text in _FALSE:
            return None
    num = _number(0.0)(key, value) if not isinstance(value, bool) else None
    if num is None:
        raise _fail(key, "'auto', a number of MB, or 0/off/false", value)
    return None if num == 0 else num


def _platform_list(key: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [p for p in value.replace(",", " ").split() if p]
    if not isinstance(value, (list, tuple)):
        raise _fail(key, "a list of platform names", value)
    out = []
    for item in value:
        if not Platform.is_known(item):
            raise _fail(key, "known platform names", item)
        out.append(str(item).strip().lower())
    return tuple(dict.fromkeys(out))


def _home_channels(key: str, value: Any) -> dict[str, HomeChannel]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _fail(key, "a mapping of platform -> {chat_id, name}", value)
    out: dict[str, HomeChannel] = {}
    for platform, spec in value.items():
        sub = f"{key}.{platform}"
        if not Platform.is_known(platform):
            raise _fail(sub, "a known platform name", platform)
        if not isinstance(spec, Mapping) or spec.get("chat_id") in (None, ""):
            raise _fail(sub, "a mapping with a chat_id", spec)
        chat_id = _opt_str(sub + ".chat_id", spec["chat_id"])
        name = _opt_str(sub + ".name", spec.get("name"))
        assert chat_id is not None  # checked above
        out[str(platform).strip().lower()] = HomeChannel(chat_id, name)
    return out


def _aliases(key: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _fail(key, "a mapping of LID -> phone number", value)
    out = {}
    for lid, phone in value.items():
        if isinstance(phone, bool) or not isinstance(phone, (str, int)):
            raise _fail(f"{key}.{lid}", "a phone number", phone)
        lid_text = str(lid).strip()
        if lid_text.endswith("@lid"):
            lid_text = lid_text[: -len("@lid")]
        out[lid_text] = str(phone).strip()
    return out


def _chat_ids(key: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise _fail(key, "a list of chat ids", value)
    out = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (str, int)) or not str(item).strip():
            raise _fail(key, "a list of chat ids (numbers or strings)", item)
        out.append(str(item).strip())
    return tuple(dict.fromkeys(out))


def _url(key: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower().startswith(("http://", "https://")):
        return value.strip().rstrip("/")
    raise _fail(key, "an http:// or https:// URL", value)


def _path(key: str, value: Any) -> Path | None:
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)) and str(value).strip():
        return Path(os.path.expanduser(str(value).strip()))
    raise _fail(key, "a directory path", value)


def _opt(parser: Parser, default: Any) -> Any:
    return field(default=default, metadata={"parse": parser})


def _section(cls: type) -> Any:
    return field(default_factory=cls, metadata={"section": cls})
