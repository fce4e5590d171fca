"""The platform contract: one script, every chat platform (``testkit/platform_driver.py``).

Each platform runs its production wiring against its fake through the real chat library,
with the scripted fake agent, and must behave the same: one footer per answered run, the
queue and its buttons, interrupt and abort, permission prompts answered and dismissed,
questions, a long answer within the platform's limit, rate limits and server errors that
lose nothing, a restart that keeps the queue, a stranger who gets nowhere, and a file sent
with a message saved for the agent. A new
platform adds a driver to ``DRIVERS`` and passes this file.

Each case is parametrised over the platforms that have what it needs (``every``, over
``drivers_with``): the console has no strangers, no server to fail and no way to send a
file, so those cases are not collected for it; no case skips itself.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from threadspindle.ingress.thread_commands import NO_THREADS
from threadspindle.runtime.core.actions import WorkspaceJobFinished
from threadspindle.testkit.fake_discord.harness import wait_for
from threadspindle.testkit.platform_driver import (
    DRIVERS,
    PlatformDriver,
    drivers_with,
    is_footer_text,
)

pytestmark = pytest.mark.timeout(120)


def every(*capabilities: str) -> pytest.MarkDecorator:
    """Run the case on each platform that has ``capabilities`` (none: on all of them)."""
    return pytest.mark.parametrize("driver", drivers_with(*capabilities), indirect=True)


@pytest.fixture
def driver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[PlatformDriver]:
    with DRIVERS[request.param](tmp_path) as made:
        yield made


def test_every_platform_runs_the_cases_that_need_nothing() -> None:
    assert drivers_with() == sorted(DRIVERS)


def footers(driver: PlatformDriver, thread: str) -> int:
    return sum(map(is_footer_text, driver.bot_texts(thread)))


def delivered(driver: PlatformDriver) -> list[str]:
    return [text for _, text in driver.agents.delivered]


@every()
async def test_a_cold_start_answers_with_one_footer(driver: PlatformDriver) -> None:
    async with driver.running():
        thread = await driver.start()
        driver.say(thread, "hi")
        await driver.until_footers(thread, 1)
        assert "Hello from fake agent." in driver.bot_texts(thread)
        assert footers(driver, thread) == 1
        assert delivered(driver) == ["hi"]


@every()
async def test_queue_when_idle_and_when_busy(driver: PlatformDriver) -> None:
    async with driver.running():
        thread = await driver.start()
        driver.say(thread, "first. queue")  # idle: sent at once
        await driver.until_footers(thread, 1)
        driver.say(thread, "SLOW work")
        await wait_for(lambda: len(delivered(driver)) == 2)
        driver.say(thread, "later. queue")
        await wait_for(lambda: any("Queued (position 1)" in t for t in driver.bot_texts(thread)))
        await driver.until_footers(thread, 3)
        assert delivered(driver) == ["first.", "SLOW work", "later."]
        assert footers(driver, thread) == 3


@every()
async def test_remove_from_queue(driver: PlatformDriver) -> None:
    async with driver.running():
        thread = await driver.start()
        driver.say(thread, "SLOW work")
        await wait_for(lambda: delivered(driver))
        driver.say(thread, "not this. queue")
        driver.say(thread, "this. queue")
        removable = await wait_for(
            lambda: [b for b in driver.buttons(thread) if b[1] == "Remove from queue"],
            lambda bs: len(bs) == 2,
        )
        driver.click(thread, *removable[0])
        await wait_for(
            lambda: driver.snapshot(thread), lambda s: s is not None and len(s.queue) == 1
        )
        await driver.until_footers(thread, 2)
        assert delivered(driver) == ["SLOW work", "this."]


@every()
async def test_an_interrupting_message_keeps_the_queue(driver: PlatformDriver) -> None:
    async with driver.running():
        thread = await driver.start()
        driver.say(thread, "SLOW work")
        await wait_for(lambda: delivered(driver))
        driver.say(thread, "queued. queue")
        await wait_for(
            lambda: driver.snapshot(thread), lambda s: s is not None and len(s.queue) == 1
        )
        driver.say(thread, "now instead")
        await driver.until_footers(thread, 2)
        assert delivered(driver) == ["SLOW work", "now instead", "queued."]
        assert footers(driver, thread) == 2  # the interrupted run has none


@every()
async def test_abort_mid_tool_then_a_new_message(driver: PlatformDriver) -> None:
    async with driver.running():
        thread = await driver.start()
        driver.say(thread, "LONGTOOL please")
        await wait_for(lambda: any("sleep 30" in t for t in driver.bot_texts(thread)))
        driver.abort(thread)
        await wait_for(
            lambda: driver.snapshot(thread), lambda s: s is not None and s.run is None, 20
        )
        driver.say(thread, "hi again")
        await driver.until_footers(thread, 1)
        assert delivered(driver) == ["LONGTOOL please", "hi again"]
        assert not any("never" in t for t in driver.bot_texts(thread))


async def _answer_a_permission(driver: PlatformDriver, label: str) -> bool | str | None:
    """A new thread (the fake agent names every request "perm1", and a request once
    answered is never answered again), a permission prompt, ``label`` pressed: what the
    agent was told."""
    thread = await driver.start()
    driver.say(thread, "PERMISSION needed")
    (button,) = await wait_for(lambda: [b for b in driver.buttons(thread) if b[1] == label])
    before = len(driver.agents.answers)
    driver.click(thread, *button)
    await wait_for(lambda: len(driver.agents.answers) > before)
    await wait_for(lambda: not driver.buttons(thread))
    await wait_for(lambda: driver.snapshot(thread), lambda s: s is not None and s.run is None)
    return driver.agents.answers[-1][1]


@every()
async def test_permission_allowed_denied_and_dismissed(driver: PlatformDriver) -> None:
    async with driver.running():
        assert await _answer_a_permission(driver, "Accept") is True
        assert await _answer_a_permission(driver, "Deny") is False
        thread = await driver.start()
        driver.say(thread, "PERMISSION again")
        await wait_for(lambda: driver.buttons(thread))
        driver.say(thread, "never mind")
        await wait_for(lambda: not driver.buttons(thread))  # no stale buttons left
        await wait_for(lambda: delivered(driver)[-1:] == ["never mind"])
        assert driver.agents.answers[-1][1] is False  # the agent is not left waiting


@every()
async def test_a_question_answered_and_one_dismissed(driver: PlatformDriver) -> None:
    async with driver.running():
        thread = await driver.start()
        driver.say(thread, "QUESTION please")
        options = await wait_for(lambda: driver.buttons(thread))
        driver.click(thread, *options[-1])
        await wait_for(lambda: driver.agents.answers)
        assert driver.agents.answers[-1][1] == options[-1][1]
        await driver.until_footers(thread, 1)
        driver.say(thread, "QUESTION again")
        await wait_for(lambda: driver.buttons(thread))
        driver.say(thread, "skip it")
        await wait_for(lambda: not driver.buttons(thread))  # dismissed: nothing to click
        await driver.until_footers(thread, 2)
        assert delivered(driver)[-1] == "skip it"


@every()
async def test_a_6000_character_answer_is_well_formed(driver: PlatformDriver) -> None:
    async with driver.running():
        thread = await driver.start()
        driver.say(thread, "LONG answer please")
        await driver.until_footers(thread, 1, timeout=40)
        texts = driver.bot_texts(thread)
        shown = "\n".join(texts)
        assert all(len(t) <= driver.char_limit for t in texts)
        for n in range(1, 4):
            assert f"def part_{n - 1}():" in shown and f"Part {n}" in shown
        assert footers(driver, thread) == 1


@every("injects_faults")
@pytest.mark.parametrize("status", [429, 502])
async def test_rate_limits_and_server_errors_lose_nothing(
    driver: PlatformDriver, status: int
) -> None:
    async with driver.running():
        thread = await driver.start()
        driver.fail_next_sends(status, 2)
        driver.say(thread, "hi")
        await driver.until_footers(thread, 1, timeout=40)
        texts = driver.bot_texts(thread)
        assert texts.count("Hello from fake agent.") == 1  # once: not lost, not doubled
        assert footers(driver, thread) == 1


@every()
async def test_a_restart_keeps_the_queue(driver: PlatformDriver) -> None:
    async with driver.running():
        thread = await driver.start()
        driver.say(thread, "SLOW work")
        await wait_for(lambda: delivered(driver))
        driver.say(thread, "kept. queue")
        await wait_for(
            lambda: driver.snapshot(thread), lambda s: s is not None and len(s.queue) == 1
        )
    stopped = "\n".join(driver.bot_texts(thread))
    assert "Spindle stopped this run" in stopped and "1 queued prompt(s)" in stopped
    async with driver.running():
        await driver.until_footers(thread, 1, timeout=40)
        assert delivered(driver) == ["kept."]
        assert footers(driver, thread) == 1


@every("sends_files")
async def test_a_file_with_a_caption_reaches_the_agent_saved_in_the_workdir(
    driver: PlatformDriver,
) -> None:
    data = bytes(range(256)) * 20
    async with driver.running():
        thread = await driver.start()
        driver.send_file(thread, "trace.bin", data, "application/octet-stream", "why this crash?")
        await driver.until_footers(thread, 1)
        (prompt,) = driver.agents.prompts
        assert prompt.text == "why this crash?"
        (attachment,) = prompt.attachments
        assert attachment.name == "trace.bin" and attachment.size == len(data)
        assert attachment.path is not None
        saved = Path(attachment.path)
        assert saved.parent.parts[-2:] == (".spindle", "attachments")
        assert saved.read_bytes() == data


@every("has_strangers")
async def test_a_stranger_gets_nowhere(driver: PlatformDriver) -> None:
    async with driver.running():
        thread = await driver.start()
        # Where the start's reply is shown in the thread (Telegram), it can come a moment
        # after the conversation exists: let it, or it would look like an answer to the
        # stranger. (On Discord it answers the slash command, outside the thread.)
        with trio.move_on_after(2):
            while not driver.bot_texts(thread):
                await trio.sleep(0.05)
        before = driver.bot_texts(thread)
        driver.say(thread, "rm -rf / please", stranger=True)
        await trio.sleep(1.0)
        assert delivered(driver) == []
        assert driver.bot_texts(thread) == before  # nothing shown in the thread
        driver.say(thread, "hi")
        await driver.until_footers(thread, 1)
        assert delivered(driver) == ["hi"]


@every()
async def test_a_diff_patch_is_a_file_where_files_are_taken_else_paged_text(
    driver: PlatformDriver,
) -> None:
    """/diff's result as the workspace job reports it: the whole patch attached as a file
    (Discord, Telegram, Slack: the real upload through each library), the paged text on the
    others (every message within the platform's limit)."""
    async with driver.running():
        thread = await driver.start()
        patch = "diff --git a/a.txt b/a.txt\n" + "".join(f"+line {i}\n" for i in range(900))
        shown = patch[:9000]
        await driver.post(
            WorkspaceJobFinished(
                thread_id=thread,
                action_id="diff-result-1",
                at=time.time(),
                job_id="diff-1",
                op="diff",
                ok=True,
                text="Changes since the conversation started: 1 file +900 −0",
                detail=f"```diff\n{shown}\n```",
                patch=patch,
            )
        )
        await wait_for(lambda: any("1 file +900" in t for t in driver.bot_texts(thread)))
        if driver.takes_files:
            await wait_for(lambda: driver.files(thread))
            [(name, data, caption)] = driver.files(thread)
            assert (name, data.decode()) == ("changes.diff", patch)
            assert caption == "The whole patch (901 lines)."
            assert not any("+line 899" in t for t in driver.bot_texts(thread))
        else:
            last = shown.splitlines()[-1]
            await wait_for(lambda: any(last in t for t in driver.bot_texts(thread)))
            assert driver.files(thread) == []
            texts = driver.bot_texts(thread)
            pages = sum("+line" in t for t in texts)
            assert pages >= min(2, -(-len(shown) // driver.char_limit))  # paged where too long
            assert all(len(t) <= driver.char_limit for t in texts)


@every()
async def test_steer_and_a_workspace_command(driver: PlatformDriver) -> None:
    async with driver.running():
        thread = await driver.start()
        # /diff reaches the core, which starts its workspace job (these stacks run none).
        driver.command(thread, "diff")
        await wait_for(lambda: any("workspaces are not" in t for t in driver.bot_texts(thread)))
        driver.say(thread, "LONGTOOL work")
        await wait_for(lambda: any("sleep 30" in t for t in driver.bot_texts(thread)))
        driver.say(thread, "also add tests steer")
        await wait_for(lambda: len(driver.agents.steered) == 1)
        driver.command(thread, "steer", "and docs")
        await wait_for(lambda: len(driver.agents.steered) == 2)
        assert [text for _, text in driver.agents.steered] == ["also add tests", "and docs"]
        assert driver.agents.interrupts == []  # the turn went on
        assert delivered(driver) == ["LONGTOOL work"]
        driver.abort(thread)
        await wait_for(lambda: driver.snapshot(thread), lambda s: s is not None and s.run is None)


@every("opens_threads")
async def test_btw_forks_into_a_new_thread(driver: PlatformDriver) -> None:
    async with driver.running():
        thread = await driver.start()
        driver.say(thread, "hi")  # a session to fork from
        await driver.until_footers(thread, 1)
        driver.command(thread, "btw", "what is foo?")
        await wait_for(lambda: "what is foo?" in delivered(driver))
        assert len(driver.agents.forks) == 1
        await wait_for(lambda: any("Forked into" in t for t in driver.bot_texts(thread)))


@pytest.mark.parametrize(
    "driver", sorted(set(DRIVERS) - set(drivers_with("opens_threads"))), indirect=True
)
async def test_fork_is_refused_at_once_without_threads(driver: PlatformDriver) -> None:
    async with driver.running():
        thread = await driver.start()
        driver.command(thread, "fork")
        await wait_for(lambda: any(NO_THREADS in t for t in driver.bot_texts(thread)))
        assert driver.agents.forks == []
