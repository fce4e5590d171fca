"""The pure half of the WhatsApp ingress: signatures, deliveries in the Cloud API's webhook
shape, commands and action ids. Nothing here raises on odd input."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from threadspindle.ingress.whatsapp.translate import (
    action_id,
    parse_command,
    parse_delivery,
    sign,
    signature_ok,
)
from threadspindle.testkit.fake_whatsapp.server import FakeWhatsApp, signature


def _delivery(*messages: dict[str, object], statuses: list[object] | None = None) -> bytes:
    value: dict[str, object] = {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "15550783881", "phone_number_id": "106"},
        "contacts": [{"profile": {"name": "Alice"}, "wa_id": "15551234567"}],
        "messages": list(messages),
    }
    if statuses is not None:
        value["statuses"] = statuses
    body = {
        "object": "whatsapp_business_account",
        "entry": [{"id": "1", "changes": [{"value": value, "field": "messages"}]}],
    }
    return json.dumps(body).encode()


def test_signatures_are_metas_hmac() -> None:
    body = b'{"object":"whatsapp_business_account"}'
    assert sign("s3cret", body) == signature("s3cret", body)  # the fake signs as Meta does
    assert signature_ok("s3cret", body, sign("s3cret", body))
    assert not signature_ok("s3cret", body, sign("other", body))
    assert not signature_ok("s3cret", body + b" ", sign("s3cret", body))
    assert not signature_ok("s3cret", body, None)
    assert not signature_ok("s3cret", body, "sha1=" + sign("s3cret", body)[7:])
    assert not signature_ok("", body, sign("", body))  # no app secret: nothing passes


def test_text_buttons_lists_and_audio() -> None:
    ctx = {"from": "15550783881", "id": "wamid.bot1"}
    body = _delivery(
        {
            "from": "15551234567",
            "id": "wamid.A",
            "timestamp": "1700000000",
            "type": "text",
            "text": {"body": "fix it queue"},
        },
        {
            "from": "15551234567",
            "id": "wamid.B",
            "timestamp": "1",
            "type": "interactive",
            "context": ctx,
            "interactive": {
                "type": "button_reply",
                "button_reply": {"id": "permission:allow:p1", "title": "Accept"},
            },
        },
        {
            "from": "15551234567",
            "id": "wamid.C",
            "timestamp": "1",
            "type": "interactive",
            "interactive": {
                "type": "list_reply",
                "list_reply": {"id": "question:q#2", "title": "blue"},
            },
        },
        {
            "from": "15551234567",
            "id": "wamid.D",
            "timestamp": "1",
            "type": "audio",
            "audio": {"id": "9", "mime_type": "audio/ogg; codecs=opus", "voice": True},
        },
    )
    delivery = parse_delivery(body)
    a, b, c, d = delivery.messages
    assert (a.kind, a.text, a.name, a.thread_id, a.timestamp) == (
        "text",
        "fix it queue",
        "Alice",
        "wa:15551234567",
        1700000000,
    )
    assert (b.kind, b.choice_id, b.text, b.context_id) == (
        "choice",
        "permission:allow:p1",
        "Accept",
        "wamid.bot1",
    )
    assert (c.choice_id, c.text) == ("question:q#2", "blue")
    assert d.kind == "audio" and a.phone_number_id == "106"
    assert (d.media_id, d.mime_type) == ("9", "audio/ogg; codecs=opus")
    assert action_id(a.wamid) == "wa-wamid.A"


def test_images_and_documents_are_files_other_media_are_not() -> None:
    base = {"from": "15551234567", "timestamp": "1700000000"}
    body = _delivery(
        {
            **base,
            "id": "wamid.I",
            "type": "image",
            "image": {"id": "7", "mime_type": "image/png", "caption": "this?"},
        },
        {
            **base,
            "id": "wamid.D",
            "type": "document",
            "document": {"id": "8", "mime_type": "application/pdf", "filename": "spec.pdf"},
        },
        {**base, "id": "wamid.S", "type": "sticker", "sticker": {"id": "9"}},
        {**base, "id": "wamid.X", "type": "image", "image": {"caption": "no id"}},
    )
    image, document, sticker, broken = parse_delivery(body).messages
    assert (image.kind, image.media_id, image.mime_type, image.text, image.filename) == (
        "file",
        "7",
        "image/png",
        "this?",
        None,
    )
    assert (document.kind, document.media_id, document.text, document.filename) == (
        "file",
        "8",
        "",
        "spec.pdf",
    )
    assert sticker.kind == "media" and broken.kind == "media"  # nothing to download


def test_status_updates_and_the_fakes_shape() -> None:
    statuses = [{"id": "wamid.bot1", "status": "delivered", "recipient_id": "15551234567"}]
    delivery = parse_delivery(_delivery(statuses=statuses))
    assert delivery.messages == () and delivery.statuses == 1 and delivery.skipped == 0
    with FakeWhatsApp() as fake:
        fake.add_user("15551234567", "Alice")
        sent = fake.say("15551234567", "hi")
    (message,) = parse_delivery(sent.body).messages
    assert (message.text, message.name, message.sender) == ("hi", "Alice", "15551234567")


@given(st.binary(max_size=300))
def test_garbage_is_skipped_never_raised(body: bytes) -> None:
    delivery = parse_delivery(body)
    assert delivery.messages == () or all(m.wamid for m in delivery.messages)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "entry",
                        "changes",
                        "value",
                        "messages",
                        "from",
                        "id",
                        "type",
                        "text",
                        "body",
                        "contacts",
                        "interactive",
                        "field",
                        "context",
                        "timestamp",
                        "group_id",
                        "button_reply",
                    ]
                ),
                inner,
                max_size=4,
            )
        ),
        max_leaves=20,
    )
)
def test_odd_json_is_skipped_never_raised(data: object) -> None:
    parse_delivery(json.dumps(data).encode())


def test_a_value_of_an_odd_type_skips_its_message_only() -> None:
    # Each raised out of the parser, outside the webhook's handling: a 500, retried for
    # ever, and the delivery's other messages never ran.
    good = {"from": "15551234567", "id": "wamid.good", "type": "text", "text": {"body": "ok"}}
    odd = [
        {**good, "id": "wamid.c", "context": {"id": 5}},  # a number where a string goes
        {**good, "id": "wamid.t", "timestamp": 1e400},  # infinity: int() overflows
        {**good, "id": "wamid.n", "timestamp": float("nan")},
    ]
    delivery = parse_delivery(_delivery(*odd, good))
    by_id = {m.wamid: m for m in delivery.messages}
    assert by_id["wamid.good"].text == "ok"
    assert by_id["wamid.c"].context_id is None
    assert by_id["wamid.t"].timestamp == 0 and by_id["wamid.n"].timestamp == 0


def test_commands() -> None:
    parsed = parse_command("/queue fix the tests")
    assert parsed is not None and (parsed.name, parsed.args) == ("queue", "fix the tests")
    parsed = parse_command("/Clear-Queue 2")
    assert parsed is not None and (parsed.name, parsed.args) == ("clear_queue", "2")
    parsed = parse_command("/claude\nstart ~/code")
    assert parsed is not None and (parsed.name, parsed.args) == ("claude", "start ~/code")
    assert parse_command("/") is None and parse_command("no command") is None
    assert parse_command("/usr/bin/env is a path") is None


def test_a_group_message_is_the_groups_thread() -> None:
    body = _delivery(
        {
            "from": "15551234567",
            "id": "wamid.G",
            "timestamp": "1",
            "type": "text",
            "group_id": "120363025246125486",
            "text": {"body": "/status"},
        }
    )
    (message,) = parse_delivery(body).messages
    assert message.thread_id == "wa:g:120363025246125486" and message.sender == "15551234567"
