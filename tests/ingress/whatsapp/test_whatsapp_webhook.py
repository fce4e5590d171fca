"""``WebhookApp`` alone (over httpx's ASGI transport): what it answers before anything
reaches the ingress, and that a delivery it could not handle is answered 500 (so Meta
delivers it again) and handled when it comes again."""

from __future__ import annotations

import httpx

from threadspindle.ingress.whatsapp import translate
from threadspindle.ingress.whatsapp.host import MAX_BODY, WebhookApp
from threadspindle.ingress.whatsapp.settings import WhatsAppSettings

SETTINGS = WhatsAppSettings(
    token="t", app_secret="secret", verify_token="vt", phone_number_id="106"
)
URL = "http://testserver/whatsapp/webhook"


class FlakyIngress:
    """Fails the first delivery it is handed, records the ones it handles."""

    def __init__(self) -> None:
        self.calls = 0
        self.handled: list[translate.Delivery] = []

    async def handle_delivery(self, delivery: translate.Delivery) -> None:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("the log is not there yet")
        self.handled.append(delivery)


def _client(app: WebhookApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app))  # type: ignore[arg-type]


async def test_a_failed_delivery_is_500_and_handled_when_it_comes_again() -> None:
    ingress = FlakyIngress()
    app = WebhookApp(SETTINGS, ingress)  # type: ignore[arg-type]
    body = (
        b'{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"field":'
        b'"messages","value":{"messages":[{"from":"15551234567","id":"wamid.A","type":"text",'
        b'"text":{"body":"hi"}}]}}]}]}'
    )
    headers = {"x-hub-signature-256": translate.sign("secret", body)}
    async with _client(app) as client:
        first = await client.post(URL, content=body, headers=headers)
        again = await client.post(URL, content=body, headers=headers)
    assert (first.status_code, again.status_code) == (500, 200)
    (delivery,) = ingress.handled
    assert [m.wamid for m in delivery.messages] == ["wamid.A"]
    assert (app.failed, app.accepted) == (1, 1)


async def test_what_never_reaches_the_ingress() -> None:
    ingress = FlakyIngress()
    app = WebhookApp(SETTINGS, ingress)  # type: ignore[arg-type]
    big = b"x" * (MAX_BODY + 1)
    async with _client(app) as client:
        too_big = await client.post(URL, content=big, headers={"x-hub-signature-256": "x"})
        unsigned = await client.post(URL, content=b"{}")
        put = await client.put(URL, content=b"{}")
        other = await client.post(URL + "/x", content=b"{}")
        no_token = await client.get(URL, params={"hub.mode": "subscribe", "hub.challenge": "1"})
    assert too_big.status_code == 413
    assert unsigned.status_code == 401
    assert put.status_code == 405
    assert other.status_code == 404
    assert no_token.status_code == 403
    assert ingress.calls == 0
