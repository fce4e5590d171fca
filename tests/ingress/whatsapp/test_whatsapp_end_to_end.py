"""The whole WhatsApp connection against the fake Cloud API: signed webhook deliveries into
the webhook under hypercorn, the live runtime on a real SQLite log, the renderer over
``WhatsAppPlatform`` (httpx), the scripted fake agent. What is WhatsApp's own is here; what
every platform must do is tests/platforms/test_platform_contract.py."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import trio

from threadspindle.effects.whatsapp_platform import whatsapp_thread_id
from threadspindle.ingress.whatsapp.bot import NO_LONGER_PENDING, NO_TRANSCRIPTION, REFUSAL
from threadspindle.runtime.core.agent_events import QuestionAsked, TextDelta
from threadspindle.testkit.connection_flood import open_flood, until_accepted
from threadspindle.testkit.fake_agent import Step
from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.fake_discord.stack import SCRIPT, long_answer
from threadspindle.testkit.fake_whatsapp.server import signature
from threadspindle.testkit.fake_whatsapp.stack import (
    WhatsAppStack,
    WhatsAppWorld,
    is_footer,
    whatsapp_stack,
)


def _delivered(stack: WhatsAppStack) -> list[str]:
    return [text for _, text in stack.agents.delivered]


async def test_the_verification_handshake(wa: WhatsAppWorld, tmp_path: Path) -> None:
    async with whatsapp_stack(wa, tmp_path) as stack:
        url = stack.app.whatsapp.webhook_url
        async with httpx.AsyncClient() as client:
            ok = await client.get(
                url,
                params={
                    "hub.mode": "subscribe",
                    "hub.verify_token": "fake-verify-token",
                    "hub.challenge": "1158201444",
                },
            )
            wrong = await client.get(
                url,
                params={
                    "hub.mode": "subscribe",
                    "hub.verify_token": "guess",
                    "hub.challenge": "1158201444",
                },
            )
            elsewhere = await client.get(url.rsplit("/", 1)[0] + "/other")
        assert (ok.status_code, ok.text) == (200, "1158201444")
        assert wrong.status_code == 403 and "1158201444" not in wrong.text
        assert elsewhere.status_code == 404


async def test_a_forged_or_missing_signature_is_refused_and_nothing_is_logged(
    wa: WhatsAppWorld, tmp_path: Path
) -> None:
    async with whatsapp_stack(wa, tmp_path) as stack:
        thread = await stack.start_chat()
        user = wa.chat(thread)
        body = wa.fake.delivery_body(
            user,
            "user0",
            [
                {
                    "from": user,
                    "id": "wamid.forged1",
                    "timestamp": "1",
                    "type": "text",
                    "text": {"body": "rm -rf / please"},
                },
            ],
        )
        forged = signature("not-the-app-secret", body)
        tampered = body.replace(b"rm -rf", b"ls -la")
        statuses = [
            await trio.to_thread.run_sync(wa.fake.post, body, forged),
            await trio.to_thread.run_sync(wa.fake.post, body, None),
            await trio.to_thread.run_sync(wa.fake.post, body, "sha256=" + "0" * 64),
            await trio.to_thread.run_sync(
                wa.fake.post, tampered, signature(wa.fake.app_secret, body)
            ),
        ]
        assert statuses == [401, 401, 401, 401]
        await trio.sleep(0.5)
        assert stack.app.whatsapp.webhook.refused_signatures == 4
        assert _delivered(stack) == []
        state = stack.runtime.snapshot(thread)
        assert "wa-wamid.forged1" not in state.recent_action_ids
    with sqlite3.connect(tmp_path / "events.sqlite3") as db:
        logged = [row[0] for row in db.execute("SELECT action FROM actions")]
    assert logged and not any("forged1" in a or "rm -rf" in a for a in logged)


async def test_a_redelivered_webhook_runs_nothing_twice(wa: WhatsAppWorld, tmp_path: Path) -> None:
    async with whatsapp_stack(wa, tmp_path) as stack:
        thread = await stack.start_chat()
        delivery = wa.fake.say(wa.chat(thread), "hi")
        await stack.until_footers(thread, 1)
        assert delivery.statuses == [200]
        again = wa.fake.redeliver(delivery)
        await wait_for(lambda: again.done.is_set())
        await trio.sleep(0.5)
        assert again.statuses == [200]  # acknowledged, so Meta stops retrying
        assert _delivered(stack) == ["hi"]
        assert stack.app.whatsapp.ingress.duplicates == 1
        assert sum(map(is_footer, wa.bot_messages(thread))) == 1
    # And after a restart: the ids handled are on disk.
    async with whatsapp_stack(wa, tmp_path) as stack:
        third = wa.fake.redeliver(delivery)
        await wait_for(lambda: third.done.is_set())
        await trio.sleep(0.5)
        assert _delivered(stack) == []
        assert sum(map(is_footer, wa.bot_messages(thread))) == 1


async def test_a_delivery_replayed_after_a_restart_and_many_actions_runs_nothing(
    wa: WhatsAppWorld, tmp_path: Path
) -> None:
    # Meta signs only the body: a delivery captured on its way (a proxy's log) can be sent
    # again for as long as its message is young enough to be taken. The core drops it
    # only while the thread's 64 latest actions hold its id, and the ids in memory were
    # gone at a restart: with 70 commands in between, the old prompt ran again.
    async with whatsapp_stack(wa, tmp_path) as stack:
        thread = await stack.start_chat()
        user = wa.chat(thread)
        captured = wa.fake.say(user, "REPLAYME")
        await stack.until_footers(thread, 1)
        for _ in range(70):
            last = wa.fake.say(user, "/status")
        await wait_for(lambda: last.done.is_set(), timeout=60)
        state = stack.runtime.snapshot(thread)
        assert _delivered(stack) == ["REPLAYME"]
    [message] = json.loads(captured.body)["entry"][0]["changes"][0]["value"]["messages"]
    assert f"wa-{message['id']}" not in state.recent_action_ids  # past the core's window
    async with whatsapp_stack(wa, tmp_path) as stack:
        status = await trio.to_thread.run_sync(wa.fake.post, captured.body)
        assert status == 200  # acknowledged: Meta (or whoever) stops sending it
        await trio.sleep(1.0)
        assert _delivered(stack) == []
        assert stack.app.whatsapp.ingress.duplicates == 1
    # And the file is what kept it: without it, the replay runs (the case fixed here).
    async with whatsapp_stack(wa, tmp_path, seen_path=None) as stack:
        await trio.to_thread.run_sync(wa.fake.post, captured.body)
        await wait_for(lambda: _delivered(stack), timeout=10)
        assert _delivered(stack) == ["REPLAYME"]


async def test_digits_that_are_no_choice_number_are_a_prompt_not_a_failed_delivery(
    wa: WhatsAppWorld, tmp_path: Path
) -> None:
    # "²".isdigit() is True and int("²") raises, as does int() of 5,000 digits: the
    # delivery failed (500) on every retry, and its other messages never ran.
    async with whatsapp_stack(wa, tmp_path) as stack:
        thread = await stack.start_chat()
        user = wa.chat(thread)
        texts = ["²", "7" * 5000, "REAL PROMPT queue"]
        messages = [_text(user, f"wamid.d{i}", text) for i, text in enumerate(texts)]
        status = await trio.to_thread.run_sync(
            wa.fake.post, wa.fake.delivery_body(user, "u", messages)
        )
        assert status == 200
        await wait_for(lambda: _delivered(stack), lambda d: len(d) == 3, timeout=30)
        assert _delivered(stack) == texts[:2] + ["REAL PROMPT"]
        assert stack.app.whatsapp.webhook.failed == 0


async def test_a_6000_character_answer_is_well_formed_messages_with_the_footer_last(
    wa: WhatsAppWorld, tmp_path: Path
) -> None:
    async with whatsapp_stack(wa, tmp_path) as stack:
        thread = await stack.start_chat()
        wa.fake.say(wa.chat(thread), "LONG STREAMED answer please")
        messages = await stack.until_footers(thread, 1, timeout=40)
        answer = [m for m in messages if m.type == "text"]
        answer = answer[answer.index(next(m for m in answer if "Part 1" in m.text)) :]
        assert is_footer(answer[-1]) and not any(map(is_footer, answer[:-1]))
        texts = [m.text for m in answer[:-1]]
        assert len(texts) >= 2  # more than one message, none over the limit
        assert all(0 < len(t) <= 4096 for t in texts)
        for text in texts:  # every message is well-formed: its code blocks are closed
            assert text.count("```") % 2 == 0, text
        shown = "\n".join(texts)
        for n in range(3):
            assert f"def part_{n}():" in shown and f"*Part {n + 1}*" in shown
        assert "value_17 = compute(17)" in shown
        # What the agent wrote arrives whole: every line of it, in order.
        lines = [line for line in long_answer().splitlines() if line.strip() and "```" not in line]
        sent = [line for line in shown.splitlines() if line.strip() and "```" not in line]
        assert [ln for ln in sent if ln.startswith("    value_")] == [
            ln for ln in lines if ln.startswith("    value_")
        ]
        # Nothing was edited, and no two messages of the answer came closer than allowed.
        sends = [c for c in wa.fake.sends() if c.body.get("to") == wa.chat(thread)]
        assert all(c.body["type"] in ("text", "interactive") for c in sends)


async def test_read_receipts_typing_and_voice_messages(wa: WhatsAppWorld, tmp_path: Path) -> None:
    async with whatsapp_stack(wa, tmp_path) as stack:
        thread = await stack.start_chat()
        user = wa.chat(thread)
        wa.fake.say(user, "SLOW work")
        await stack.until_footers(thread, 1)
        prompt = [m for m in wa.fake.messages(user) if not m.from_bot][-1]
        await wait_for(lambda: prompt.id in wa.fake.reads)
        assert prompt.id in wa.fake.typing  # shown while the agent worked
        wa.fake.voice(user)
        # No transcription configured: told so (tests/ingress/whatsapp/test_whatsapp_voice.py).
        await wait_for(lambda: [m for m in wa.bot_messages(thread) if m.text == NO_TRANSCRIPTION])
        assert _delivered(stack) == ["SLOW work"]


async def test_a_stranger_is_told_once_in_their_own_chat(wa: WhatsAppWorld, tmp_path: Path) -> None:
    async with whatsapp_stack(wa, tmp_path) as stack:
        wa.fake.say(wa.mallory, "/claude start /")
        wa.fake.say(wa.mallory, "hello?")
        await wait_for(lambda: len([d for d in wa.fake.deliveries if d.done.is_set()]) == 2)
        texts = [m.text for m in wa.fake.bot_messages(wa.mallory)]
        assert texts == [REFUSAL]
        assert stack.runtime.snapshot(whatsapp_thread_id(wa.mallory)) is None
        assert stack.app.whatsapp.ingress.refusals == 2


def _many_options(prompt: str) -> list[Step]:
    if "MANY" in prompt:
        options = tuple(f"option {n}" for n in range(1, 13))
        return [
            Step("ask", QuestionAsked(request_id="q9", question="Which one?", options=options)),
            Step("event", TextDelta(text="Thanks.")),
        ]
    return SCRIPT(prompt)


async def test_a_question_with_more_options_than_a_list_is_answered_by_number(
    wa: WhatsAppWorld, tmp_path: Path
) -> None:
    async with whatsapp_stack(wa, tmp_path, script=_many_options) as stack:
        thread = await stack.start_chat()
        user = wa.chat(thread)
        wa.fake.say(user, "MANY choices")
        numbered = await wait_for(
            lambda: [m for m in wa.bot_messages(thread) if "Reply 1, 2," in m.text]
        )
        assert "12. option 12" in numbered[0].text and not numbered[0].choices()
        wa.fake.say(user, "11")
        await wait_for(lambda: stack.agents.answers)
        assert stack.agents.answers[-1][1] == "option 11"
        await stack.until_footers(thread, 1)
        # The prompt is closed: a number now is an ordinary prompt again.
        wa.fake.say(user, "7")
        await stack.until_footers(thread, 2)
        assert _delivered(stack) == ["MANY choices", "7"]


async def test_a_stale_button_is_no_longer_pending_and_commands_are_plain_text(
    wa: WhatsAppWorld, tmp_path: Path
) -> None:
    async with whatsapp_stack(wa, tmp_path) as stack:
        thread = await stack.start_chat()
        user = wa.chat(thread)
        wa.fake.say(user, "PERMISSION please")
        prompt = await wait_for(lambda: [m for m in wa.bot_messages(thread) if m.buttons])
        wa.fake.click(user, prompt[0].id, "Accept")
        await wait_for(lambda: stack.agents.answers)
        await stack.until_footers(thread, 1)
        closing = [m for m in wa.bot_messages(thread) if m.context == prompt[0].id]
        assert len(closing) == 1 and "Permission needed" in closing[0].text
        wa.fake.click(user, prompt[0].id, "Deny")  # WhatsApp still shows the old buttons
        await wait_for(lambda: [m for m in wa.bot_messages(thread) if m.text == NO_LONGER_PENDING])
        assert len(stack.agents.answers) == 1 and stack.agents.answers[0][1] is True
        status = wa.fake.say(user, "/status")
        await wait_for(lambda: status.done.is_set())
        wamid = json.loads(status.body)["entry"][0]["changes"][0]["value"]["messages"][0]["id"]
        reply = await wait_for(lambda: [m for m in wa.bot_messages(thread) if m.context == wamid])
        assert "claude" in reply[0].text.lower()
        wa.fake.say(user, "/bogus")
        await wait_for(lambda: [m for m in wa.bot_messages(thread) if "/bogus" in m.text])


async def _answer_of(stream: trio.SocketStream) -> bytes:
    """What the server sends until it closes the connection."""
    got = b""
    while chunk := await stream.receive_some():
        got += chunk
    return got


async def test_a_stalled_body_is_answered_408_while_signed_deliveries_go_through(
    wa: WhatsAppWorld, tmp_path: Path
) -> None:
    # Unauthenticated: a body must be read whole before its signature can be checked, so a
    # client that sends one byte of it and stalls held its connection (a descriptor) for
    # ever.
    async with whatsapp_stack(wa, tmp_path, body_timeout_s=0.5) as stack:
        url = urlsplit(stack.app.whatsapp.webhook_url)
        assert url.hostname is not None and url.port is not None
        head = f"POST {url.path} HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{{"
        stalled = []
        for _ in range(5):
            stream = await trio.open_tcp_stream(url.hostname, url.port)
            await stream.send_all(head.encode())
            stalled.append(stream)
        user = wa.fresh_user()
        status = await trio.to_thread.run_sync(
            wa.fake.post, wa.fake.delivery_body(user, "u", [_text(user, "wamid.meanwhile")])
        )
        assert status == 200
        with trio.fail_after(5):
            answers = [await _answer_of(stream) for stream in stalled]
        assert all(a.startswith(b"HTTP/1.1 408") for a in answers), answers
        assert stack.app.whatsapp.webhook.too_slow == 5


async def test_a_flood_of_connections_is_held_to_the_cap_and_deliveries_go_through_after(
    wa: WhatsAppWorld, tmp_path: Path
) -> None:
    # The webhook listens for the internet: every connection it held was a descriptor the
    # agents' pipes and the database need (effects/connection_cap.py).
    async with whatsapp_stack(wa, tmp_path, max_connections=8) as stack:
        url = urlsplit(stack.app.whatsapp.webhook_url)
        assert url.hostname is not None and url.port is not None
        flood = await open_flood(url.hostname, url.port, 80)
        assert len(flood.kept) == 8 and flood.closed == 72
        await flood.aclose()
        await until_accepted(url.hostname, url.port)
        user = wa.fresh_user()
        status = await trio.to_thread.run_sync(
            wa.fake.post, wa.fake.delivery_body(user, "u", [_text(user, "wamid.after")])
        )
        assert status == 200


def _text(user: str, wamid: str, text: str = "hi", timestamp: int | None = None) -> dict[str, str]:
    when = int(time.time()) if timestamp is None else timestamp
    return {
        "from": user,
        "id": wamid,
        "timestamp": str(when),
        "type": "text",
        "text": {"body": text},
    }


async def test_a_message_sent_too_long_ago_is_dropped_and_a_late_one_runs(
    wa: WhatsAppWorld, tmp_path: Path
) -> None:
    # The ids seen are forgotten at a restart and the core keeps only a thread's recent
    # action ids: a captured signed delivery replayed later ran its prompt again.
    async with whatsapp_stack(wa, tmp_path) as stack:
        thread = await stack.start_chat()
        user = wa.chat(thread)
        now = int(time.time())
        replayed = _text(user, "wamid.old", "REPLAYED rm -rf build", timestamp=now - 25 * 3600)
        late = _text(user, "wamid.late", "sent during an outage", timestamp=now - 3 * 3600)
        for message in (replayed, late):
            body = wa.fake.delivery_body(user, "u", [message])
            assert await trio.to_thread.run_sync(wa.fake.post, body) == 200  # Meta stops
        await stack.until_footers(thread, 1)
        assert _delivered(stack) == ["sent during an outage"]
        assert stack.app.whatsapp.ingress.stale == 1
