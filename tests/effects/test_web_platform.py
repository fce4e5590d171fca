"""``WebPlatform``: what the renderer's calls leave in a thread's view, the numbered
changes a page follows, and the bounds on memory."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from threadspindle.effects import web_platform as W
from threadspindle.effects.platform import PlatformError, SelectMenu
from threadspindle.effects.web_platform import WebPlatform
from threadspindle.runtime.core.effect_types import Button

T = "web:1"


async def test_send_edit_delete_are_numbered_changes() -> None:
    platform = WebPlatform()
    first = await platform.send(T, "**hi**", buttons=(Button(label="Accept", action="a"),))
    second = await platform.reply(T, "act-1", "Queued.", ephemeral=True)
    await platform.edit(T, first, "**hi** there")  # buttons kept
    view = platform.view(T)
    assert [m.id for m in view.messages()] == [first, second]
    message = view.get(first)
    assert message is not None
    assert message.html == "<p><strong>hi</strong> there</p>\n"
    assert [b.label for b in message.buttons] == ["Accept"]
    assert view.get(second) is not None and view.get(second).ephemeral  # type: ignore[union-attr]
    await platform.edit(T, first, "answered", buttons=())
    assert view.get(first).buttons == ()  # type: ignore[union-attr]
    await platform.delete(T, second)
    await platform.delete(T, second)  # gone already: still a success
    changes = view.changes_after(0)
    assert changes is not None
    assert [(c.seq, c.kind, c.message_id) for c in changes] == [
        (1, "put", first),
        (2, "put", second),
        (3, "put", first),
        (4, "put", first),
        (5, "delete", second),
    ]
    assert view.changes_after(3) == changes[3:]
    assert view.changes_after(5) == []
    # A page that saw change 1 is sent each message once, as it is now, at its last change.
    updates = view.updates_after(1)
    assert updates is not None
    assert [(u.seq, u.kind, u.message_id) for u in updates] == [
        (4, "put", first),
        (5, "delete", second),
    ]
    assert updates[0].message is view.get(first)
    try:
        await platform.edit(T, "999", "x")
    except PlatformError as error:
        assert "no message 999" in str(error)
    else:
        raise AssertionError("an edit of a message that never was must fail")


async def test_a_repeated_nonce_is_the_same_message() -> None:
    platform = WebPlatform()
    one = await platform.send(T, "x", nonce="n1")
    again = await platform.send(T, "x", nonce="n1")
    assert one == again and len(platform.view(T).messages()) == 1


async def test_a_dismissed_question_loses_its_menu() -> None:
    platform = WebPlatform()
    menu = SelectMenu(custom_id="question:q", options=("a", "b"))
    mid = await platform.send(T, "❓ **Question:** which?", menu=menu)
    view = platform.view(T)
    assert view.get(mid).kind == "question" and view.get(mid).menu == menu  # type: ignore[union-attr]
    await platform.edit(T, mid, "❓ **Question:** which?\n-# Answered")  # a text edit keeps it
    assert view.get(mid).menu == menu  # type: ignore[union-attr]
    await platform.edit(T, mid, "❓ **Question:** which?\n-# Expired", buttons=())
    assert view.get(mid).menu is None  # type: ignore[union-attr]


async def test_memory_is_bounded_and_a_page_far_behind_is_told_to_reload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(W, "MAX_MESSAGES", 5)
    monkeypatch.setattr(W, "MAX_CHANGES", 8)
    monkeypatch.setattr(W, "MAX_THREADS", 3)
    platform = WebPlatform()
    view = platform.view(T)
    ids = [await platform.send(T, f"m{n}") for n in range(12)]
    assert [m.id for m in view.messages()] == ids[-5:]  # the oldest went (deleted for pages)
    assert view.changes_after(0) is None  # the first changes are gone: reload
    assert view.changes_after(view.seq - 2) is not None
    for n in range(3):
        platform.view(f"web:other{n}")
    assert platform.view(T) is not view  # the least recently used view went


async def test_memory_is_bounded_by_the_size_of_messages_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 500 prompts of 100,000 quotes (6 characters each as HTML) held ~850 MB in one thread.
    monkeypatch.setattr(W, "MAX_THREAD_CHARS", 1_000)
    monkeypatch.setattr(W, "MAX_TOTAL_CHARS", 2_500)
    platform = WebPlatform()
    view = platform.view(T)
    ids = [platform.user_said(T, '"' * 100) for _ in range(10)]
    kept = view.messages()
    assert 0 < len(kept) < 10 and [m.id for m in kept] == ids[-len(kept) :]  # the newest
    assert view.chars == sum(len(m.text) + len(m.html) for m in kept) <= 1_000
    edited = await platform.send(T, "short")
    await platform.edit(T, edited, "x" * 300)  # an edit that grows it counts as well
    assert view.chars <= 1_000 and view.get(edited) is not None
    # Past the budget of every view, the threads used least recently go, not this one.
    for n in range(3):
        platform.user_said(f"web:other{n}", "y" * 800)
    assert not platform.knows(T) and platform.knows("web:other2")
    assert platform._chars == sum(v.chars for v in platform._views.values()) <= 2_500


async def test_waiting_streams_wake_on_change_and_on_typing() -> None:
    ticks = [100.0]
    platform = WebPlatform(clock=lambda: ticks[0])
    view = platform.view(T)
    woke: list[int] = []

    async def waiter() -> None:
        await view.wait_change(view.seq)
        woke.append(view.seq)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert woke == []
        await platform.typing(T)
        await trio.testing.wait_all_tasks_blocked()
        assert woke == [0] and platform.typing_now(T)  # woken with no change
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        await platform.send(T, "x")
        await trio.testing.wait_all_tasks_blocked()
        assert woke == [0, 1]
    await view.wait_change(0)  # a change is already there: no wait
    ticks[0] += W.WEB_LIMITS.typing_refresh_s + 2
    assert not platform.typing_now(T)


async def test_the_users_own_prompt_is_a_message_of_its_own_kind() -> None:
    platform = WebPlatform()
    mid = platform.user_said(T, "<b>mine</b>")
    message = platform.view(T).get(mid)
    assert message is not None and message.kind == "user"
    assert "&lt;b&gt;mine&lt;/b&gt;" in message.html
