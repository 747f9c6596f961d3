"""The Slack adapter: the Events API in (``POST /slack/events``, signed, acknowledged after
durability) or Socket Mode (``slack.mode: socket``: a websocket the gateway opens, each
envelope acknowledged after durability), the delivery ledger out (``chat.postMessage``).

``mapping`` (events to messages, replies to parts: pure), ``adapter`` (the Web API both
share, and the Events API's route of the HTTP server) and ``socket`` (Socket Mode, a pull
adapter under a lease in a cluster). Importing this package imports slack_sdk (lazily,
when an adapter is built); nothing else in ``hermes_actors`` does unless ``platforms``
lists ``slack``.
"""

from hermes_actors.adapters.slack.adapter import (
    EVENTS_PATH,
    SlackAdapter,
    SlackError,
    check_secrets,
)
from hermes_actors.adapters.slack.socket import SlackSocketAdapter, check_socket_secrets

__all__ = ["EVENTS_PATH", "SlackAdapter", "SlackError", "SlackSocketAdapter",
           "check_secrets", "check_socket_secrets"]
