"""Platforms: the built-in enum plus a registry of plugin platforms.

An ``Enum`` cannot grow members at run time, so plugin platforms live in a small registry
beside it; everything else in the project handles platforms as plain strings and asks this
module whether a name is known, what its title is and whether its ids may be redacted.
"""

from __future__ import annotations

import threading
from enum import Enum

from hermes_actors.errors import UnknownPlatformError

__all__ = ["Platform", "normalize_platform", "platform_title", "is_pii_safe"]

_TITLES = {
    "local": "Local",
    "telegram": "Telegram",
    "discord": "Discord",
    "slack": "Slack",
    "whatsapp": "WhatsApp",
    "signal": "Signal",
    "matrix": "Matrix",
    "mattermost": "Mattermost",
    "email": "Email",
    "sms": "SMS",
    "webhook": "Webhook",
    "api_server": "API server",
    "bluebubbles": "BlueBubbles",
}

#: Built-in platforms whose ids are hashed in the prompt when ``privacy.redact_pii`` is on.
_BUILTIN_PII_SAFE = frozenset({"whatsapp", "signal", "telegram", "bluebubbles"})


class _Registry:
    """The one piece of global state: plugin platforms and their ``pii_safe`` flag."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.plugins: dict[str, bool] = {}
        #: Bumped at every change (what depends on the registry can tell it changed).
        self.version = 0


_registry = _Registry()


class Platform(str, Enum):
    """The built-in chat platforms. ``Platform.register`` adds plugin platforms."""

    LOCAL = "local"
    TELEGRAM = "telegram"
    DISCORD = "discord"
    SLACK = "slack"
    WHATSAPP = "whatsapp"
    SIGNAL = "signal"
    MATRIX = "matrix"
    MATTERMOST = "mattermost"
    EMAIL = "email"
    SMS = "sms"
    WEBHOOK = "webhook"
    API_SERVER = "api_server"
    BLUEBUBBLES = "bluebubbles"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def register(cls, name: str, *, pii_safe: bool = False) -> str:
        """Register a plugin platform; returns its normalised name.

        ``pii_safe=True`` lets ``privacy.redact_pii`` hash its ids in the prompt. Registering a
        built-in name or an already registered plugin again is harmless (the flag is updated
        for plugins).
        """
        if not isinstance(name, str) or not name.strip():
            raise UnknownPlatformError(name)
        norm = name.strip().lower()
        if not all(c.isalnum() or c in "_-." for c in norm):
            raise UnknownPlatformError(name)
        if norm in _TITLES:
            return norm
        with _registry.lock:
            _registry.plugins[norm] = bool(pii_safe)
            _registry.version += 1
        return norm

    @classmethod
    def unregister(cls, name: str) -> None:
        """Forget a plugin platform (tests use this to keep the registry clean)."""
        with _registry.lock:
            _registry.plugins.pop(str(name).strip().lower(), None)
            _registry.version += 1

    @classmethod
    def registry_version(cls) -> int:
        """A number that changes whenever a plugin platform is registered or removed."""
        return _registry.version

    @classmethod
    def is_known(cls, name: object) -> bool:
        """Whether ``name`` is a built-in or registered platform."""
        if isinstance(name, Platform):
            return True
        if not isinstance(name, str):
            return False
        norm = name.strip().lower()
        return norm in _TITLES or norm in _registry.plugins


def normalize_platform(name: object) -> str:
    """The canonical string of a platform, or :class:`UnknownPlatformError`."""
    if isinstance(name, Platform):
        return name.value
    if not Platform.is_known(name):
        raise UnknownPlatformError(name)
    return str(name).strip().lower()


def platform_title(name: str) -> str:
    """The human title used in the prompt (``API server``; plugins: first letter upper)."""
    norm = str(name)
    title = _TITLES.get(norm)
    if title is not None:
        return title
    return norm[:1].upper() + norm[1:]


def is_pii_safe(name: str) -> bool:
    """Whether ids on this platform may be hashed in the prompt (§4)."""
    norm = str(name)
    if norm in _BUILTIN_PII_SAFE:
        return True
    return _registry.plugins.get(norm, False)
