"""A local fake WhatsApp Cloud API (the Graph API's ``/messages`` on 127.0.0.1, with
throttling and 5xx injection) and Meta's side of the webhook: signed deliveries in the real
JSON shape, retried until answered 200."""

from threadspindle.testkit.fake_whatsapp.server import (
    APP_SECRET,
    PHONE_ID,
    TOKEN,
    VERIFY_TOKEN,
    FakeWhatsApp,
    WaMessage,
)

__all__ = ["APP_SECRET", "PHONE_ID", "TOKEN", "VERIFY_TOKEN", "FakeWhatsApp", "WaMessage"]
