"""The web chat served for real (hypercorn on 127.0.0.1, the runtime, the scripted fake
agent): the live stream as a page reads it, resuming after ``Last-Event-ID``, a page too
far behind told to reload, a stranger refused, and injected platform failures retried."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from threadspindle.effects import web_platform as W
from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.web_stack import WebStack, web_stack


async def _events(
    stack: WebStack,
    thread: str,
    *,
    after: int = 0,
    last_event_id: str | None = None,
    until: Any,
    timeout: float = 15.0,
) -> list[tuple[str, dict[str, Any], str | None, float]]:
    """(event, data, id, seconds since the request) until ``until(events)`` holds."""
    got: list[tuple[str, dict[str, Any], str | None, float]] = []
    headers = {"last-event-id": last_event_id} if last_event_id else {}
    started = time.monotonic()
    with trio.fail_after(timeout):
        async with stack.client.stream(
            "GET", f"/t/{thread}/events?after={after}", headers=headers
        ) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            event, data, event_id = "message", "", None
            async for line in stream.aiter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    data = line[6:]
                elif line.startswith("id: "):
                    event_id = line[4:]
                elif line == "" and data:
                    got.append((event, json.loads(data), event_id, time.monotonic() - started))
                    event, data, event_id = "message", "", None
                    if until(got):
                        return got
    raise AssertionError("the stream ended")


async def test_the_stream_follows_a_run_and_resumes_after_the_last_event(
    tmp_path: Path,
) -> None:
    async with web_stack(tmp_path) as stack:
        thread = await stack.start()
        stack.request("POST", f"/t/{thread}/say", {"text": "SLOW stream please"})

        def answered(events: list[Any]) -> bool:
            return any(e == "put" and "$0.0010" in d["html"] for e, d, _, _ in events)

        events = await _events(stack, thread, until=answered, timeout=30)
        puts = [(int(i), d) for e, d, i, _ in events if e == "put"]
        assert [n for n, _ in puts] == sorted(n for n, _ in puts)  # numbered in order
        statuses = [d["phase"] for e, d, _, _ in events if e == "status"]
        assert "running" in statuses and statuses[-1] in ("running", "idle")
        # The slow answer arrived edit after edit over seconds, not all at the end.
        per_message: dict[str, list[float]] = {}
        for e, d, _, t in events:
            if e == "put":
                per_message.setdefault(d["id"], []).append(t)
        streamed = max(per_message.values(), key=len)
        assert len(streamed) >= 3, per_message
        assert streamed[-1] - streamed[0] > 1.0, streamed
        # Resuming after event k sends each message changed since k once, as it is now,
        # in the order of their last changes: nothing before k, nothing missing.
        middle = puts[len(puts) // 2][0]
        last = puts[-1][0]
        resumed = await _events(
            stack,
            thread,
            last_event_id=str(middle),
            until=lambda evs: any(e == "put" and int(i) == last for e, _, i, _ in evs),
        )
        sent = [(int(i), d["id"]) for e, d, i, _ in resumed if e in ("put", "delete")]
        numbers = [n for n, _ in sent]
        ids = [m for _, m in sent]
        assert numbers == sorted(numbers) and numbers[0] > middle and numbers[-1] == last
        changed = stack.platform.view(thread).changes_after(middle)
        assert changed is not None
        assert sorted(ids) == sorted({c.message_id for c in changed if c.seq <= last})
        # A page claiming to be further than the server is (a restarted Spindle) reloads.
        ahead = await _events(stack, thread, after=last + 1000, until=lambda evs: True)
        assert ahead[0][0] == "reload"


async def test_a_page_too_far_behind_reloads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(W, "MAX_CHANGES", 3)
    async with web_stack(tmp_path) as stack:
        thread = await stack.start()
        for n in range(3):
            stack.platform.user_said(thread, f"line {n}")
        events = await _events(stack, thread, after=0, until=lambda evs: True)
        assert events[0][0] == "reload"


async def test_a_stranger_is_refused_and_failures_are_retried(tmp_path: Path) -> None:
    async with web_stack(tmp_path) as stack:
        thread = await stack.start()
        stack.request("POST", f"/t/{thread}/say", {"text": "hi"}, cookie=False)
        stack.platform.fail_next_sends(429, 1)
        stack.platform.fail_next_sends(502, 1)
        stack.request("POST", f"/t/{thread}/say", {"text": "hi"})
        await stack.until_footers(thread, 1, timeout=30)
        assert stack.statuses == [401, 204]
        assert stack.platform.failed == 2
        texts = [m.text for m in stack.bot_messages(thread)]
        assert texts.count("Hello from fake agent.") == 1
        assert [p for _, p in stack.agents.delivered] == ["hi"]
        async with httpx.AsyncClient(base_url=stack.pages) as stranger:
            page = await stranger.get(f"/t/{thread}")
            assert page.status_code == 401 and "Hello from fake agent" not in page.text
        await wait_for(lambda: stack.runtime.snapshot(thread), lambda s: s.run is None)


async def test_the_agents_title_names_the_thread_in_the_list_the_page_and_the_tab(
    tmp_path: Path,
) -> None:
    async with web_stack(tmp_path) as stack:
        thread = await stack.start()
        home = (await stack.client.get("/")).text
        assert "claude · " in home and "Session title" not in home  # no title yet
        stack.request("POST", f"/t/{thread}/say", {"text": "TITLE please"})

        def titled(events: list[Any]) -> bool:
            return any(e == "status" and d["title"] == "Session title 3" for e, d, _, _ in events)

        events = await _events(stack, thread, until=titled, timeout=30)
        shown = [d["title"] for e, d, _, _ in events if e == "status"]
        assert shown[0].startswith("claude · ")  # the place until the agent names it
        # The page drawn now, and the thread list: the title, escaped like any text.
        page = (await stack.client.get(f"/t/{thread}")).text
        assert "<title>Session title 3 · Spindle</title>" in page
        assert '<h1 id="thread-title">Session title 3</h1>' in page
        home = (await stack.client.get("/")).text
        assert f'<a href="{stack.base}/t/{thread}">Session title 3</a>' in home
        assert "claude · " in home  # the place stays beside the title
