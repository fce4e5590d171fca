"""``SlackIngress`` alone, with a runtime of the test's own: envelopes are handled in the order
they arrived, and an envelope is settled (so bolt may acknowledge it to Slack) only once
every action it made is durable."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import trio
import trio_asyncio

from threadspindle.ingress.slack.bot import SlackIngress
from threadspindle.ingress.slack.settings import ProjectChannel, SlackSettings
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.model import ThreadState


class _Receipt:
    def __init__(self, gate: trio.Event) -> None:
        self.gate = gate

    async def durable(self) -> bool:
        await self.gate.wait()
        return True


class _Runtime:
    def __init__(self) -> None:
        self.gate = trio.Event()
        self.posted: list[A.Action] = []

    async def post(self, action: A.Action, *, channel_id: str | None = None) -> Any:
        self.posted.append(action)
        return _Receipt(self.gate)

    def snapshot(self, thread_id: str) -> ThreadState | None:
        return None

    def snapshots(self) -> Mapping[str, ThreadState]:
        return {}


class _Platform:
    def __init__(self) -> None:
        self.authors: dict[str, str] = {}

    def remember_author(self, action_id: str, user_id: str) -> None:
        self.authors[action_id] = user_id


def _settings(tmp: str) -> SlackSettings:
    return SlackSettings(
        bot_token="xoxb-test",
        app_token="xapp-test",
        allowed_user_ids=("U1",),
        project_channels=(ProjectChannel(channel_id="CPROJ", agent="echo", workdir=tmp),),
        default_workdir=tmp,
    )


def _envelope(n: int, text: str) -> dict[str, Any]:
    ts = f"1700000000.{n:06d}"
    event = {"type": "message", "channel": "CPROJ", "user": "U1", "text": text, "ts": ts}
    payload = {"event_id": f"Ev{n}", "team_id": "T1", "event": event, "type": "event_callback"}
    return {"envelope_id": f"env-{n}", "type": "events_api", "payload": payload}


async def test_an_envelope_is_settled_only_once_its_actions_are_durable(tmp_path: Any) -> None:
    runtime = _Runtime()
    async with trio_asyncio.open_loop():
        ingress = SlackIngress(
            _settings(str(tmp_path)),
            _Platform(),
            runtime,
            bot_user="U0BOT",
            team="T1",  # type: ignore[arg-type]
        )
        ingress.bind(asyncio.get_event_loop())
        settled: list[str | None] = []

        async def wait_settled(payload: dict[str, Any]) -> None:
            settled.append(await trio_asyncio.aio_as_trio(ingress.settled)(payload))

        async with trio.open_nursery() as nursery:
            await nursery.start(ingress.run)
            envelope = _envelope(1, "fix the login page")
            await ingress.on_envelope(None, envelope)
            nursery.start_soon(wait_settled, envelope["payload"])
            await trio.sleep(0.3)
            # Handled as far as it can be: the conversation posted, not yet durable.
            assert [type(a) for a in runtime.posted] == [A.ConversationStarted]
            assert settled == []
            runtime.gate.set()
            with trio.fail_after(5):
                while not settled:
                    await trio.sleep(0.01)
            assert [type(a) for a in runtime.posted] == [A.ConversationStarted, A.UserMessage]
            nursery.cancel_scope.cancel()


async def test_envelopes_are_handled_in_the_order_they_arrived(tmp_path: Any) -> None:
    runtime = _Runtime()
    runtime.gate.set()
    async with trio_asyncio.open_loop():
        ingress = SlackIngress(
            _settings(str(tmp_path)),
            _Platform(),
            runtime,
            bot_user="U0BOT",
            team="T1",  # type: ignore[arg-type]
        )
        ingress.bind(asyncio.get_event_loop())
        async with trio.open_nursery() as nursery:
            await nursery.start(ingress.run)
            for n in range(1, 21):
                await ingress.on_envelope(None, _envelope(n, f"prompt {n}"))
            await ingress.on_envelope(None, _envelope(3, "prompt 3"))  # delivered again
            with trio.fail_after(5):
                while ingress.handled < 21:
                    await trio.sleep(0.01)
            prompts = [a for a in runtime.posted if isinstance(a, A.UserMessage)]
            assert [p.text for p in prompts] == [f"prompt {n}" for n in range(1, 21)] + ["prompt 3"]
            # The second delivery is the same action: the core drops it by its id.
            assert prompts[-1].action_id == prompts[2].action_id
            nursery.cancel_scope.cancel()
