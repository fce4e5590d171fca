"""The whole bot through the real discord.py client against the fake Discord: runtime on
a real SQLite log, stream renderer over DiscordPlatform, scripted fake agent
(``testkit.fake_discord.stack.SCRIPT`` says what each prompt word makes it do)."""

from __future__ import annotations

import os
import signal
import time
from functools import partial
from pathlib import Path
from typing import Any

import trio

from threadspindle.effects.platform import PlatformLimits
from threadspindle.ingress.discord.bot import REFUSAL
from threadspindle.ingress.discord.host import DiscordApp, run_discord_runtime
from threadspindle.runtime.core.effect_types import StartAgent
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.live.log import EventLog
from threadspindle.testkit.fake_agent import FakeAgentWorld
from threadspindle.testkit.fake_discord.harness import World, wait_for
from threadspindle.testkit.fake_discord.stack import (
    SCRIPT,
    Stack,
    discord_stack,
    is_footer,
    long_answer,
)
from threadspindle.testkit.fake_discord.store import FakeMessage

FENCE = "```"


def _contents(messages: list[FakeMessage]) -> list[str]:
    return [m.content for m in messages]


def _delivered(stack: Stack) -> list[str]:
    return [text for _, text in stack.agents.delivered]


async def _queue(stack: Stack, thread: int, text: str) -> int:
    """``/queue text`` as alice; returns the interaction id once it has been answered."""
    interaction = stack.world.fake.run_command(thread, stack.world.alice, "queue", message=text)
    await wait_for(lambda: stack.world.fake.interaction_replies(interaction))
    return interaction


async def test_cold_start_streams_then_a_follow_up_each_with_one_footer(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "hi")
        await stack.until_footers(thread, 1)
        world.fake.send_message(thread, world.alice, "and again")
        messages = await stack.until_footers(thread, 2)
        assert _contents(messages) == [
            "hi",
            "Hello from fake agent.",
            messages[2].content,
            "and again",
            "Hello from fake agent.",
            messages[5].content,
        ]
        assert is_footer(messages[2]) and is_footer(messages[5])
        # The start command was answered through its deferred interaction.
        assert world.fake.transcript(world.channel).startswith("spindle: Started claude")


async def test_queue_sends_at_once_when_idle_and_queues_in_order_when_busy(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        first = await _queue(stack, thread, "first")
        await stack.until_footers(thread, 1)
        (sent,) = world.fake.interaction_replies(first)
        assert sent.content == "Sending now." and sent.ephemeral
        world.fake.send_message(thread, world.alice, "SLOW work")
        await wait_for(lambda: _delivered(stack), lambda d: len(d) == 2)
        one = await _queue(stack, thread, "q one")
        two = await _queue(stack, thread, "q two")
        assert [r.content for r in world.fake.interaction_replies(one)] == ["Queued (position 1)."]
        assert [r.content for r in world.fake.interaction_replies(two)] == ["Queued (position 2)."]
        (button,) = world.fake.interaction_replies(two)[0].components[0]["components"]
        assert button["label"] == "Remove from queue"
        messages = await stack.until_footers(thread, 4)
        assert _delivered(stack) == ["first", "SLOW work", "q one", "q two"]
        markers = [m.content for m in messages if m.content.startswith("»")]
        # Prompts that waited are marked when they go out (one sent at once needs none).
        assert markers == ["» alice: q one", "» alice: q two"]


async def test_remove_from_queue_removes_only_that_item(world: World, tmp_path: Path) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "SLOW work")
        await wait_for(lambda: _delivered(stack))
        queued = [await _queue(stack, thread, f"item {n}") for n in (1, 2, 3)]
        (reply,) = world.fake.interaction_replies(queued[1])
        custom_id = reply.components[0]["components"][0]["custom_id"]
        world.fake.click_button(reply.id, custom_id, world.alice)
        await stack.until_footers(thread, 3)
        assert _delivered(stack) == ["SLOW work", "item 1", "item 3"]
        state = stack.runtime.snapshot(str(thread))
        assert state is not None and state.queue == () and state.counters.removed == 1


async def test_a_message_during_a_run_interrupts_it_and_keeps_the_queue(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "SLOW work")
        await wait_for(lambda: world.fake.messages(thread), lambda ms: "slow1" in ms[-1].content)
        await _queue(stack, thread, "queued later")
        world.fake.send_message(thread, world.alice, "stop, do this instead")
        messages = await stack.until_footers(thread, 2)
        assert _delivered(stack) == ["SLOW work", "stop, do this instead", "queued later"]
        texts = _contents(messages)
        interrupted = next(i for i, t in enumerate(texts) if t.startswith("slow0"))
        interrupting = texts.index("stop, do this instead")
        # No footer between the interrupted run's output and the next prompt.
        assert not any(is_footer(m) for m in messages[interrupted:interrupting])
        assert "slow9" not in texts[interrupted]
        assert sum(map(is_footer, messages)) == 2
        assert is_footer(messages[-1])


async def test_a_sticker_alone_during_a_run_is_ignored(world: World, tmp_path: Path) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "SLOW work")
        await wait_for(lambda: world.fake.messages(thread), lambda ms: "slow1" in ms[-1].content)
        world.fake.send_message(thread, world.alice, "", stickers=("thumbs up",))
        messages = await stack.until_footers(thread, 1)
        assert _delivered(stack) == ["SLOW work"]
        assert any("slow9" in m.content for m in messages)  # the run went to its end
        assert not stack.agents.interrupts
        assert "Not sent" not in world.fake.transcript(thread)  # a reaction: no answer


async def test_an_empty_message_during_a_run_is_refused_and_interrupts_nothing(
    world: World, tmp_path: Path
) -> None:
    # An embed alone (a link preview, a bot's card) arrives with empty content and no
    # attachment; before, it interrupted the run with an empty prompt.
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "SLOW work")
        await wait_for(lambda: world.fake.messages(thread), lambda ms: "slow1" in ms[-1].content)
        world.fake.send_message(thread, world.alice, "")
        await wait_for(
            lambda: world.fake.transcript(thread),
            lambda t: "Not sent: the message has no text for the agent." in t,
        )
        messages = await stack.until_footers(thread, 1)
        assert _delivered(stack) == ["SLOW work"]
        assert any("slow9" in m.content for m in messages)  # the run went to its end
        assert not stack.agents.interrupts


async def test_abort_during_a_long_tool_step_then_a_new_message_works(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "LONGTOOL please")
        await wait_for(lambda: world.fake.messages(thread), lambda ms: "sleep 30" in ms[-1].content)
        abort = world.fake.run_command(thread, world.alice, "abort")
        await wait_for(lambda: world.fake.interaction_replies(abort))
        await wait_for(
            lambda: stack.runtime.snapshot(str(thread)), lambda s: s is not None and s.run is None
        )
        world.fake.send_message(thread, world.alice, "hello after abort")
        messages = await stack.until_footers(thread, 1)
        assert sum(map(is_footer, messages)) == 1
        assert _contents(messages)[-2:] == ["Hello from fake agent.", messages[-1].content]
        assert stack.agents.interrupts  # the turn was ended in-band, the agent kept running
        assert stack.agents.serve_calls == 1


async def test_one_footer_per_run_with_several_tool_steps(world: World, tmp_path: Path) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "TOOLS")
        messages = await stack.until_footers(thread, 1)
        await trio.sleep(0.6)  # anything late would show now
        messages = world.fake.messages(thread)
        cards = [m.content for m in messages if m.content.startswith("-# 🔧")]
        assert len(cards) == 3 and all("ok " in card for card in cards)
        assert sum(map(is_footer, messages)) == 1 and is_footer(messages[-1])


async def test_typing_stops_after_the_footer(world: World, tmp_path: Path) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "SLOW work")
        messages = await stack.until_footers(thread, 1)
        footer_at = messages[-1].created_at
        await trio.sleep(1.5)  # longer than the renderer's after-post typing delay
        typing = world.fake.typing_times(thread)
        assert typing, "the typing indicator was shown during the run"
        assert max(typing) <= footer_at


async def test_abort_stops_typing_at_once(world: World, tmp_path: Path) -> None:
    """The abort's reply is a post, after which the renderer would refresh typing: the
    abort must turn typing off itself, not leave it to the turn's end (the agent takes 2 s
    to stop here, as a CLI finishing its step does)."""
    async with discord_stack(world, tmp_path) as stack:
        stack.agents.interrupt_delay_s = 2.0
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "LONGTOOL please")
        await wait_for(lambda: world.fake.messages(thread), lambda ms: "sleep 30" in ms[-1].content)
        assert world.fake.typing_times(thread), "typing was shown during the run"
        abort = world.fake.run_command(thread, world.alice, "abort")
        await wait_for(
            lambda: world.fake.interaction_replies(abort),
            lambda replies: any("Aborted" in r.content for r in replies),
        )
        replied_at = time.time()
        await wait_for(
            lambda: stack.runtime.snapshot(str(thread)), lambda s: s is not None and s.run is None
        )
        await trio.sleep(1.5)  # longer than the renderer's after-post typing delay
        late = [t - replied_at for t in world.fake.typing_times(thread) if t > replied_at]
        assert late == [], f"typing requested {late} s after the abort was answered"


async def test_a_new_message_dismisses_a_pending_permission(world: World, tmp_path: Path) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "PERMISSION needed")
        prompt = await wait_for(
            lambda: [m for m in world.fake.messages(thread) if m.components],
        )
        labels = [b["label"] for b in prompt[0].components[0]["components"]]
        assert labels == ["Accept", "Deny"]
        world.fake.send_message(thread, world.alice, "never mind")
        messages = await stack.until_footers(thread, 1)
        dismissed = world.fake.message(prompt[0].id)
        assert dismissed.components == []  # no buttons left to click
        assert dismissed.content != prompt[0].content
        assert _delivered(stack) == ["PERMISSION needed", "never mind"]
        assert sum(map(is_footer, messages)) == 1


async def test_a_dismissed_permission_loses_its_buttons_before_the_next_answer_shows(
    world: World, tmp_path: Path
) -> None:
    # Edits paced 3 s apart: the prompt is dismissed (and the next run answers) well within
    # its pacing interval. Read the moment the footer shows, not after the renderer is quiet.
    async with discord_stack(
        world, tmp_path, limits=PlatformLimits(min_edit_interval_s=3.0)
    ) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "PERMISSION needed")
        (prompt,) = await wait_for(lambda: [m for m in world.fake.messages(thread) if m.components])
        world.fake.send_message(thread, world.alice, "never mind")
        await wait_for(lambda: world.fake.messages(thread), lambda ms: any(map(is_footer, ms)))
        assert world.fake.message(prompt.id).components == []
        assert _delivered(stack) == ["PERMISSION needed", "never mind"]


async def test_accepting_a_permission_lets_the_run_finish(world: World, tmp_path: Path) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "PERMISSION needed")
        (prompt,) = await wait_for(lambda: [m for m in world.fake.messages(thread) if m.components])
        accept = prompt.components[0]["components"][0]["custom_id"]
        world.fake.click_button(prompt.id, accept, world.alice)
        messages = await stack.until_footers(thread, 1)
        assert "Permission answered." in _contents(messages)
        assert stack.agents.answers == [("perm1", True)]
        assert world.fake.message(prompt.id).components == []


async def test_choosing_a_question_option_answers_the_agent(world: World, tmp_path: Path) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "QUESTION for you")
        (asked,) = await wait_for(lambda: [m for m in world.fake.messages(thread) if m.components])
        (menu,) = asked.components[0]["components"]
        assert [o["label"] for o in menu["options"]] == ["a", "b"]
        world.fake.choose_option(asked.id, menu["custom_id"], ["b"], world.alice)
        messages = await stack.until_footers(thread, 1)
        assert "Question answered." in _contents(messages)
        assert stack.agents.answers == [("q1", "b")]


async def test_a_6000_character_answer_arrives_as_several_well_formed_messages(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "LONG answer")
        messages = await stack.until_footers(thread, 1)
        answer = messages[1:-1]
        assert len(answer) >= 4
        for message in answer:
            assert len(message.content) <= 2000
            assert message.content.count(FENCE) % 2 == 0, message.content[-200:]
        shown = "\n".join(m.content for m in answer)
        for line in long_answer().splitlines():
            assert line.strip() in shown


async def test_a_burst_of_20_deltas_a_second_gives_at_most_2_edits_a_second(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "BURST")
        messages = await stack.until_footers(thread, 1)
        answer = messages[1]
        assert answer.content.split() == [f"b{i}" for i in range(60)]
        edits = [
            c.at
            for c in world.fake.rest_calls()
            if c.method == "PATCH" and c.path.endswith(f"/messages/{answer.id}")
        ]
        assert len(edits) >= 4  # it did stream
        for start in edits:
            in_one_second = [t for t in edits if start <= t < start + 1.0]
            assert len(in_one_second) <= 2, edits


async def test_injected_429s_and_a_gateway_disconnect_lose_nothing(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        fake = world.fake
        fake.inject_fault(429, method="POST", path_contains="/messages", skip=1, times=2)
        fake.inject_fault(429, method="PATCH", path_contains="/messages", times=2)
        fake.inject_fault(503, method="POST", path_contains="/messages", skip=4, times=1)
        world.fake.send_message(thread, world.alice, "TOOLS")
        await wait_for(lambda: world.fake.messages(thread), lambda ms: len(ms) >= 3)
        fake.disconnect_gateway()
        # Sent while the bot is offline: replayed on resume, queued behind the run.
        world.fake.send_message(thread, world.alice, "after the outage. queue")
        messages = await stack.until_footers(thread, 2, timeout=30)
        texts = _contents(messages)
        assert texts.count("Three tools. ") + texts.count("Three tools.") == 1
        # Three cards, each once; finished cards may share a message while the 429s hold
        # the channel (render_pacing: ``join_cards``).
        assert sum(t.count("-# 🔧") for t in texts) == 3
        assert "All done." in texts and "Hello from fake agent." in texts
        assert sum(map(is_footer, messages)) == 2
        assert len(texts) == len(set(m.id for m in messages))
        statuses = [c.status for c in fake.rest_calls()]
        # Both POST 429s and the 503 were hit (a PATCH 429 only if the pacing made edits).
        assert statuses.count(429) >= 2 and statuses.count(503) == 1
        assert fake.gateway_counts()["resumes"] == 1
        assert _delivered(stack) == ["TOOLS", "after the outage."]


async def test_a_user_not_on_the_allow_list_gets_nothing_from_the_agent(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        refused = world.fake.run_command(world.channel, world.mallory, "claude start")
        (reply,) = await wait_for(lambda: world.fake.interaction_replies(refused))
        assert reply.content == REFUSAL and reply.ephemeral
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.mallory, "rm -rf / please")
        world.fake.send_message(thread, world.bob, "hi from bob")  # allowed by role
        await stack.until_footers(thread, 1)
        assert _delivered(stack) == ["hi from bob"]


async def test_a_message_delivered_twice_by_the_gateway_is_one_prompt(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        message = world.fake.send_message(thread, world.alice, "hi")
        world.fake.redeliver_message(message)
        await stack.until_footers(thread, 1)
        await trio.sleep(0.5)
        assert _delivered(stack) == ["hi"]
        assert sum(map(is_footer, world.fake.messages(thread))) == 1


async def test_a_restart_keeps_the_conversation_and_the_queue_and_posts_nothing_twice(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "hi")
        await stack.until_footers(thread, 1)
        world.fake.send_message(thread, world.alice, "SLOW work")
        await wait_for(lambda: world.fake.messages(thread), lambda ms: "slow1" in ms[-1].content)
        await _queue(stack, thread, "after the restart")
    # Stopped mid-run: the run was closed with a notice, the queue kept for the restart.
    before = world.fake.messages(thread)
    assert _contents(before).count("after the restart") == 0
    async with discord_stack(world, tmp_path) as stack:
        messages = await stack.until_footers(thread, 2, timeout=20)
        # Everything shown before the restart is still there, unchanged and not re-posted.
        assert [(m.id, m.content) for m in messages[: len(before)]] == [
            (m.id, m.content) for m in before
        ]
        assert _delivered(stack) == ["after the restart"]
        state = stack.runtime.snapshot(str(thread))
        assert state is not None and state.conversation is not None
        assert state.conversation.agent == "claude"
        assert stack.agents.starts[0].session_id == "sess-1"  # the session was resumed
        world.fake.send_message(thread, world.alice, "still here?")
        messages = await stack.until_footers(thread, 3)
        assert _delivered(stack) == ["after the restart", "still here?"]
        assert sum(map(is_footer, messages)) == 3


async def test_queued_messages_follow_their_edits_and_deletes(world: World, tmp_path: Path) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "SLOW work")
        await wait_for(lambda: _delivered(stack))
        edited = world.fake.send_message(thread, world.alice, "add tests. queue")
        deleted = world.fake.send_message(thread, world.alice, "add docs. queue")
        withdrawn = world.fake.send_message(thread, world.alice, "add a changelog. queue")
        kept = world.fake.send_message(thread, world.alice, "bump the version. queue")
        await wait_for(
            lambda: stack.runtime.snapshot(str(thread)),
            lambda s: s is not None and len(s.queue) == 4,
        )
        world.fake.edit_message(edited, "add more tests. queue")
        world.fake.delete_message(deleted)
        world.fake.edit_message(withdrawn, "add a changelog.")
        await stack.until_footers(thread, 3, timeout=20)
        assert _delivered(stack) == ["SLOW work", "add more tests.", "bump the version."]
        assert kept in {m.id for m in world.fake.messages(thread)}


async def test_archiving_a_thread_stops_its_agent(world: World, tmp_path: Path) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        world.fake.send_message(thread, world.alice, "LONGTOOL please")
        await wait_for(lambda: stack.agents.live())
        world.fake.archive_thread(thread)
        await wait_for(lambda: stack.runtime.actors(), lambda actors: str(thread) not in actors)
        assert stack.agents.live() == []
        assert stack.runtime.disposed == 1
        # Its renderer, closed by the actor, is let go: no task or memory kept for it.
        await wait_for(lambda: str(thread) not in stack.renderers.renderers)


async def test_under_discord_style_rate_limits_discord_py_paces_and_nothing_is_lost(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        # Much tighter than Discord's 5 per 5 s, to make the pacing show in a short run.
        world.fake.rate_limit(2, 1.0, method="POST", path_contains="/messages")
        world.fake.rate_limit(2, 1.0, method="PATCH", path_contains="/messages")
        world.fake.send_message(thread, world.alice, "LONG answer")
        messages = await stack.until_footers(thread, 1, timeout=30)
        answer = messages[1:-1]
        assert len(answer) >= 4
        assert all(m.content.count(FENCE) % 2 == 0 for m in answer)
        shown = "\n".join(m.content for m in answer)
        assert all(line.strip() in shown for line in long_answer().splitlines())
        posts = [c for c in world.fake.rest_calls() if c.path.endswith("/messages")]
        # discord.py read the buckets' headers and waited: no 429, and never more than 2
        # posts in any second.
        assert [c.status for c in posts if c.status != 200] == []
        sent = [c.at for c in posts if c.status == 200]
        for start in sent:
            assert len([t for t in sent if start <= t < start + 0.95]) <= 2


async def test_sigterm_stops_the_bot_gracefully(world: World, tmp_path: Path) -> None:
    agents = FakeAgentWorld(script=SCRIPT)
    with EventLog(tmp_path / "events.sqlite3") as log:
        async with trio.open_nursery() as nursery:
            app: DiscordApp = await nursery.start(
                partial(
                    run_discord_runtime,
                    world.settings(),
                    log=log,
                    adapter_factory=agents.factory,
                    policy=Policy(allowed_roots=(os.path.realpath(world.workdir),)),
                    stop_on_signals=True,
                )
            )
            stack = Stack(world, app.runtime, app.bot, agents, app.renderers)
            thread = await stack.start_thread()
            world.fake.send_message(thread, world.alice, "SLOW work")
            await wait_for(
                lambda: world.fake.messages(thread), lambda ms: "slow2" in ms[-1].content
            )
            with trio.fail_after(20):
                os.kill(os.getpid(), signal.SIGTERM)
                await app.stopping.wait()
        # Stopped by the signal, not cancelled: the run was closed in the thread, with
        # its text as far as it got, and the client closed last.
        assert app.bot.is_closed()
        texts = [m.content for m in world.fake.messages(thread)]
        assert any("slow2" in t for t in texts)
        assert texts[-1].startswith("⚠")  # the run's closing notice was still delivered
        assert stack.agents.live() == []


async def test_a_thread_used_again_after_its_disposal_leaves_no_renderer_behind(
    world: World, tmp_path: Path
) -> None:
    async with discord_stack(world, tmp_path) as stack:
        thread = await stack.start_thread()
        for n in range(3):
            world.fake.send_message(thread, world.alice, f"hi {n}")
            await stack.until_footers(thread, n + 1)
            assert await stack.runtime.dispose(str(thread))  # as the idle sweep would
        # Each disposal's renderer is let go once its actor closed it (none is kept).
        await wait_for(lambda: stack.renderers.running, lambda running: running == 0)
        assert str(thread) not in stack.renderers.renderers
        assert _delivered(stack) == ["hi 0", "hi 1", "hi 2"]


async def test_echo_start_opens_a_thread_with_the_echo_demo_agent(
    world: World, tmp_path: Path
) -> None:
    """``/echo start`` is a registered slash command and runs the built-in echo demo agent
    (the real adapter, as ``spindle run`` builds it), as a project channel's ``agent =
    "echo"`` does."""
    from threadspindle.agents import adapter_class
    from threadspindle.agents.base import AgentOptions

    def echo_only(start: StartAgent, thread_id: str) -> Any:
        assert start.agent == "echo"
        return adapter_class(start.agent)(AgentOptions())

    policy = Policy(allowed_roots=(os.path.realpath(world.workdir),))
    with EventLog(tmp_path / "events.sqlite3") as log:
        async with trio.open_nursery() as nursery:
            app: DiscordApp = await nursery.start(
                partial(
                    run_discord_runtime,
                    world.settings(),
                    log=log,
                    adapter_factory=echo_only,
                    policy=policy,
                    tick_interval_s=0.25,
                )
            )
            try:
                names = {c["name"] for c in world.fake.commands(world.guild)}
                assert "echo" in names
                before = set(world.fake.threads(world.channel))
                world.fake.run_command(world.channel, world.alice, "echo start")
                (thread,) = await wait_for(lambda: set(world.fake.threads(world.channel)) - before)
                world.fake.send_message(thread, world.alice, "hello there")
                # The label is in the run's footer. Usually 0.7 s; once 6 s in a loop of 43
                # runs and over 10 s once in a full run, the wait not pinned down (no run
                # with logs was slow): a margin, not a measure.
                messages = await wait_for(
                    lambda: world.fake.messages(thread),
                    lambda ms: any("echo (demo agent)" in m.content for m in ms),
                    timeout=30.0,
                )
                assert any(
                    m.content == "hello there" for m in messages if m.author_id != world.alice
                )
            finally:
                app.stop()
