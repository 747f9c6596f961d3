"""The WhatsApp Cloud API adapter: Meta's webhook in (through the HTTP adapter), the delivery
ledger out.

``client`` (the Graph API through ``requests``, token masked), ``mapping`` (webhook bodies to
events, the signature and subscription checks, replies split: pure) and ``adapter`` (the
platform the gateway sees). Nothing in ``hermes_actors`` imports this package unless
``platforms`` lists ``whatsapp``.
"""

from hermes_actors.adapters.whatsapp.adapter import (
    WEBHOOK_PATH,
    WebhookRejected,
    WhatsAppAdapter,
    WhatsAppSecrets,
    read_secrets,
)
from hermes_actors.adapters.whatsapp.client import GraphClient, WhatsAppError, mask_secrets

__all__ = ["WEBHOOK_PATH", "GraphClient", "WebhookRejected", "WhatsAppAdapter",
           "WhatsAppError", "WhatsAppSecrets", "mask_secrets", "read_secrets"]
