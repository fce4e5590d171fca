"""``WebhookApp`` alone (over httpx's ASGI transport): what it answers before anything
reaches the ingress, and that a delivery it could not handle is answered 500 (so Meta
delivers it again) and handled when it comes again."""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

import httpx
import pytest
import trio
import trio.testing

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


async def test_at_most_so_many_bodies_are_read_at_once() -> None:
    settings = SETTINGS.model_copy(update={"bodies_read_at_once": 1})
    app = WebhookApp(settings, FlakyIngress())  # type: ignore[arg-type]
    scope = {"type": "http", "path": settings.webhook_path, "method": "POST", "headers": []}
    stall = trio.Event()
    sent: list[MutableMapping[str, Any]] = []

    async def stalled_body() -> dict[str, Any]:
        await stall.wait()
        return {"type": "http.disconnect"}

    async def record(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(app, scope, stalled_body, record)
        await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(1):
            await app(scope, stalled_body, record)  # a second one is not even read
        stall.set()
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [503]
    assert app.busy == 1


async def test_refused_signatures_are_logged_once_a_minute_not_once_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Anyone can POST to the webhook: a warning per unsigned request filled the log.
    app = WebhookApp(SETTINGS, FlakyIngress())  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="threadspindle.ingress.whatsapp.host"):
        async with _client(app) as client:
            for _ in range(50):
                assert (await client.post(URL, content=b"{}")).status_code == 401
    assert app.refused_signatures == 50
    assert [r.getMessage() for r in caplog.records] == [
        "refused a webhook delivery with a bad or missing signature (more are counted, "
        "and said at most once a minute)"
    ]


async def test_a_signed_body_nested_too_deep_is_acknowledged_and_dropped() -> None:
    # json.loads raised RecursionError: a 500, and Meta would deliver it again for ever.
    ingress = FlakyIngress()
    ingress.calls = 1  # handles from the first
    app = WebhookApp(SETTINGS, ingress)  # type: ignore[arg-type]
    body = b"[" * 100_000 + b"]" * 100_000
    headers = {"x-hub-signature-256": translate.sign("secret", body)}
    async with _client(app) as client:
        answer = await client.post(URL, content=body, headers=headers)
    assert answer.status_code == 200
    (delivery,) = ingress.handled
    assert (delivery.messages, delivery.skipped) == ((), 1)
