"""One canonical form for a WhatsApp person, whatever alias the bridge reports (§3, §17.7).

A WhatsApp bridge names the same person as a phone JID (``60123456789@s.whatsapp.net``),
the same JID with a device suffix (``60123456789:12@...``), a legacy ``@c.us`` JID, a typed
number (``+60 12-345 6789``) or an opaque LID (``123456789012345@lid``). If each of these
made its own session key, one conversation would split into several. Every value is
therefore reduced to E.164 (``+<digits>``); a LID is replaced by its phone when the alias
map knows it and otherwise kept recognisable as ``lid:<digits>``.

The alias map is consulted only for values that carried ``@lid``: a bare number is a phone
number, and reading it as a LID would let an alias entry hijack a real phone's session.
Group ids (``...@g.us``) are chat names, not people, and pass through untouched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["canonical_whatsapp_identifier"]

_GROUP_SUFFIX = "@g.us"
#: ``<local>[:<device>]@<domain>`` for the person domains a bridge uses.
_JID = re.compile(
    r"^(?P<local>[^@]*?)(?::\d+)?@(?P<domain>s\.whatsapp\.net|c\.us|lid)$", re.IGNORECASE
)
#: What a typed phone number may contain besides its digits.
_PHONE_PUNCTUATION = re.compile(r"[+\s\-.()]")
_PHONE_DIGITS = re.compile(r"^[0-9]{7,15}$")


def _phone_e164(value: str) -> str | None:
    """``+<digits>`` when ``value`` is phone-like (7 to 15 digits once punctuation goes)."""
    digits = _PHONE_PUNCTUATION.sub("", value)
    if _PHONE_DIGITS.match(digits):
        return "+" + digits
    return None


def _alias_of(lid: str, aliases: Mapping[object, object]) -> object:
    """The alias entry of a LID, whether the map is keyed by digits, ``<digits>@lid`` or int."""
    for key in (lid, f"{lid}@lid", int(lid) if lid.isdigit() else None):
        if key is not None and aliases.get(key) is not None:
            return aliases[key]
    return None


def _resolve_lid(lid: str, aliases: Mapping[object, object] | None) -> str:
    """The phone of a LID when the alias map knows one, else ``lid:<digits>``."""
    phone = _alias_of(lid, aliases) if aliases else None
    if phone is not None and not isinstance(phone, bool):
        e164 = _phone_e164(str(phone).strip())
        if e164 is not None:
            return e164
    return f"lid:{lid}"


def canonical_whatsapp_identifier(
    raw: object, aliases: Mapping[object, object] | None = None
) -> str:
    """The canonical form of a WhatsApp chat or participant id.

    Device suffix and domain are dropped first; a group id (``@g.us``) is returned as it is;
    a value that carried ``@lid`` becomes its aliased phone or ``lid:<digits>``; a phone-like
    value becomes ``+<digits>``; anything else is returned trimmed.
    """
    text = "" if raw is None else str(raw).strip()
    if text.lower().endswith(_GROUP_SUFFIX):
        return text
    match = _JID.match(text)
    if match is None:
        return _phone_e164(text) or text
    local = match.group("local").strip()
    if match.group("domain").lower() == "lid":
        return _resolve_lid(local, aliases)
    return _phone_e164(local) or local
