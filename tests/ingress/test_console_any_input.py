"""Any line typed into the console, through the in-process console command path
(``ConsoleChat.handle_line`` over the live runtime, a real SQLite log, the stream renderer
and the plain console platform): it never raises, every command is answered, and the
runtime still answers ``/status`` afterwards (issue 19.4).

The agent is the built-in echo agent with no delay between words, under every agent name
the console knows, so nothing outside the process is started; an unknown name is refused
by the real adapter registry.
"""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from threadspindle.agents import adapter_class
from threadspindle.agents.base import AgentAdapter, AgentOptions
from threadspindle.agents.echo import EchoAdapter
from threadspindle.effects.console_platform import ConsolePlatform
from threadspindle.effects.render import StreamRenderer
from threadspindle.effects.terminal_text import terminal_safe
from threadspindle.ingress.console import AGENTS, ConsoleChat
from threadspindle.ingress.input_checks import has_visible_text
from threadspindle.runtime.core.effect_types import StartAgent
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.live.log import EventLog
from threadspindle.runtime.live.registry import open_runtime

COMMANDS = (
    "",
    "/workdir set ",
    "/echo start ",
    "/claude start ",
    "/echo resume ",
    "/echo conversations",
    "/clear-queue ",
    "/model ",
    "/queue ",
    "/thread new ",
    "/thread switch ",
    "/threads",
    "/answer ",
    "/allow ",
    "/deny ",
    "/remove ",
    "/conversation end",
    "/status",
    "/abort",
    "/help",
    "/",
    "/no-such-command ",
)
NASTY = st.sampled_from(
    [
        "\0",
        "a\0b",
        "²",
        "٣",
        "-1",
        "99999999999999999999999",
        "\x1b[2J\x1b]0;t\x07",
        "\r\n",
        "'",
        '"unterminated',
        "~nobody\0/x",
        "../../..",
        "/",
        "  queue",
        "\u202e",
        "x" * 20_000,
        "é" * 3000,
    ]
)
ARGUMENT = st.one_of(st.text(max_size=60), NASTY, st.lists(NASTY, max_size=3).map(" ".join))
LINE = st.tuples(st.sampled_from(COMMANDS), ARGUMENT).map(lambda parts: parts[0] + parts[1])


def _factory(start: StartAgent, thread_id: str) -> AgentAdapter:
    adapter_class(start.agent)  # the real registry: an unknown name raises here
    return EchoAdapter(AgentOptions(), word_delay_s=0)


def _says_nothing(line: str) -> bool:
    """Lines the console answers with silence by design: blank ones, and those of only NULs
    and control characters, as empty as a blank one (``has_visible_text``)."""
    return not has_visible_text(line.rstrip("\n"))


async def _printed(out: io.StringIO, platform: ConsolePlatform) -> tuple[int, int]:
    await trio.lowlevel.checkpoint()
    return len(out.getvalue()), len(platform.messages)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(LINE, min_size=1, max_size=5))
async def test_any_line_is_answered_and_the_runtime_survives(lines: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = str(Path(tmp).resolve())
        out = io.StringIO()
        platform = ConsolePlatform(out, rich=False)
        with EventLog(Path(tmp) / "spindle.db") as log:
            async with trio.open_nursery() as nursery:

                def renderer(thread_id: str) -> StreamRenderer:
                    r = StreamRenderer(platform, thread_id)
                    nursery.start_soon(r.run)
                    return r

                async with open_runtime(
                    log=log,
                    renderer_factory=renderer,
                    adapter_factory=_factory,
                    policy=Policy(allowed_roots=(workdir,)),
                ) as runtime:
                    chat = ConsoleChat(
                        runtime,
                        out=out,
                        default_agent="echo",
                        default_workdir=workdir,
                        list_conversations=lambda agent, workdir: [],
                    )
                    await chat.ensure_conversation()
                    for line in lines:
                        before = await _printed(out, platform)
                        assert await chat.handle_line(line) is True
                        if _says_nothing(line):
                            continue
                        with trio.fail_after(10):  # every command gets its answer
                            while await _printed(out, platform) == before:
                                await trio.sleep(0.01)
                    # The runtime is alive and answers, whatever came before.
                    await chat.handle_line("/thread switch main")
                    before = len(platform.messages)
                    await chat.handle_line("/status")
                    with trio.fail_after(10):
                        while not any(
                            "Queue:" in m.text for m in list(platform.messages.values())[before:]
                        ):
                            await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
        printed = out.getvalue()
        assert "Traceback" not in printed
        assert printed == terminal_safe(printed)  # nothing typed reached the terminal raw


def test_every_console_agent_is_known_to_the_registry() -> None:
    for agent in AGENTS:
        assert adapter_class(agent) is not None
