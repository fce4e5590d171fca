"""The slash commands: their definitions (names, options, descriptions, autocomplete) and
what each one posts. Each handler refuses, or defers and posts one action through
``SpindleBot.command`` / ``start_conversation``; ``/<agent> conversations`` is read-only and
answered here from the CLI's own store (``agents.list_conversations``). See
docs/commands.md.

Options are checked before anything else happens (``ingress.input_checks``): a workdir, a
model name or a session id that cannot be one raises ``InputRefused``, and the tree's
error handler (``answer_command_error``) answers it to the user alone, as it answers
anything else that goes wrong in a command: no slash command is left without an answer.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import discord
from discord import app_commands

from threadspindle.agents import list_conversations
from threadspindle.ingress.discord import translate
from threadspindle.ingress.input_checks import InputRefused, check_path, check_word, shown
from threadspindle.ingress.schedule_commands import (
    LEVELS,
    schedule_add_action,
    verbosity_action,
)
from threadspindle.ingress.workspace_commands import workspace_action
from threadspindle.runtime.core.actions import (
    AbortRequested,
    CompactRequested,
    ConversationEnded,
    ForkRequested,
    ModelChanged,
    QueueCleared,
    QueueCommand,
    ScheduleCancelled,
    SchedulesListed,
    StatusRequested,
    SteerCommand,
    WorkdirSet,
)
from threadspindle.runtime.live.schedules import local_timezone

if TYPE_CHECKING:
    from threadspindle.ingress.discord.bot import SpindleBot

__all__ = ["answer_command_error", "build_commands"]

_log = logging.getLogger(__name__)


def build_commands(bot: SpindleBot) -> None:
    """Add every slash command to ``bot.tree`` (registered per guild in ``setup_hook``)."""
    tree = bot.tree
    tree.error(answer_command_error)
    for agent in bot.settings.agents:
        tree.add_command(_agent_group(bot, agent))

    conversation = app_commands.Group(name="conversation", description="This thread's conversation")

    @conversation.command(name="end", description="End the conversation and stop its agent")
    async def end(interaction: discord.Interaction) -> None:
        await bot.command(interaction, lambda t, c: ConversationEnded(**c))

    workdir = app_commands.Group(name="workdir", description="The conversation's directory")

    @workdir.command(name="set", description="Move the conversation to another directory")
    @app_commands.describe(path="A directory inside the allowed roots")
    async def set_workdir(interaction: discord.Interaction, path: str) -> None:
        check_path(path)
        base = bot.workdir_of(str(interaction.channel_id))
        resolved = translate.resolve_workdir(path, base)
        await bot.command(
            interaction,
            lambda t, c: WorkdirSet(**c, requested_workdir=path, resolved_workdir=resolved),
        )

    set_workdir.autocomplete("path")(_workdir_completer(bot))

    @app_commands.command(name="status", description="Show the run, the queue and the agent")
    async def status(interaction: discord.Interaction) -> None:
        await bot.command(interaction, lambda t, c: StatusRequested(**c))

    @app_commands.command(name="model", description="Switch model (retries the active prompt)")
    async def model(interaction: discord.Interaction, name: str) -> None:
        check_word(name, "model name")
        await bot.command(interaction, lambda t, c: ModelChanged(**c, model=name))

    @app_commands.command(name="queue", description="Queue a prompt without interrupting")
    async def queue(interaction: discord.Interaction, message: str) -> None:
        user = interaction.user
        await bot.command(
            interaction,
            lambda t, c: QueueCommand(
                **c, author_id=str(user.id), author_name=user.display_name, text=message
            ),
        )

    @app_commands.command(name="steer", description="Add to the running turn without stopping it")
    async def steer(interaction: discord.Interaction, message: str) -> None:
        user = interaction.user
        await bot.command(
            interaction,
            lambda t, c: SteerCommand(
                **c, author_id=str(user.id), author_name=user.display_name, text=message
            ),
        )

    @app_commands.command(name="compact", description="Let the agent compact its conversation")
    async def compact(interaction: discord.Interaction) -> None:
        user = interaction.user
        await bot.command(
            interaction,
            lambda t, c: CompactRequested(
                **c, author_id=str(user.id), author_name=user.display_name
            ),
        )

    @app_commands.command(name="fork", description="A new thread continuing this conversation")
    async def fork(interaction: discord.Interaction) -> None:
        user = interaction.user
        await bot.command(
            interaction,
            lambda t, c: ForkRequested(**c, author_id=str(user.id), author_name=user.display_name),
        )

    @app_commands.command(name="btw", description="Ask on the side in a forked thread")
    @app_commands.describe(question="Asked in a new thread; the run here goes on untouched")
    async def btw(interaction: discord.Interaction, question: str) -> None:
        user = interaction.user
        await bot.command(
            interaction,
            lambda t, c: ForkRequested(
                **c, author_id=str(user.id), author_name=user.display_name, question=question
            ),
        )

    @app_commands.command(name="clear-queue", description="Drop all queued prompts, or one")
    @app_commands.describe(position="1-based position of the one prompt to drop")
    async def clear_queue(interaction: discord.Interaction, position: int | None = None) -> None:
        await bot.command(interaction, lambda t, c: QueueCleared(**c, position=position))

    @app_commands.command(name="abort", description="Stop the active run")
    async def abort(interaction: discord.Interaction) -> None:
        user_id = str(interaction.user.id)
        await bot.command(interaction, lambda t, c: AbortRequested(**c, author_id=user_id))

    schedule = _schedule_group(bot)

    @app_commands.command(name="verbosity", description="What runs show in this thread")
    @app_commands.describe(level="text: only the answer; tools: plus one line per tool; all")
    @app_commands.choices(level=[app_commands.Choice(name=level, value=level) for level in LEVELS])
    async def verbosity(interaction: discord.Interaction, level: str) -> None:
        await bot.command(interaction, lambda t, c: verbosity_action(c, level))

    commands: tuple[app_commands.Command[Any, Any, Any] | app_commands.Group, ...] = (
        *_workspace_commands(bot),
        schedule,
        verbosity,
        conversation,
        workdir,
        status,
        model,
        queue,
        steer,
        compact,
        fork,
        btw,
        clear_queue,
        abort,
    )
    for command in commands:
        tree.add_command(command)


def _workspace_commands(
    bot: SpindleBot,
) -> tuple[app_commands.Command[Any, Any, Any] | app_commands.Group, ...]:
    """/undo, /redo, /diff, /shell and the /worktree group (docs/workspaces.md)."""

    async def post(interaction: discord.Interaction, name: str, args: str) -> None:
        user = interaction.user

        def build(target: str, common: dict[str, Any]) -> Any:
            action = workspace_action(name, args, common, str(user.id), user.display_name)
            assert action is not None
            return action

        workspace_action(name, args, _CHECK, str(user.id))  # refuses bad input before deferring
        await bot.command(interaction, build)

    @app_commands.command(name="undo", description="Restore the files to before the last run")
    async def undo(interaction: discord.Interaction) -> None:
        await post(interaction, "undo", "")

    @app_commands.command(name="redo", description="Re-apply what /undo restored")
    async def redo(interaction: discord.Interaction) -> None:
        await post(interaction, "redo", "")

    @app_commands.command(name="diff", description="What changed since the conversation started")
    @app_commands.describe(base="Compare with the worktree's base branch instead")
    async def diff(interaction: discord.Interaction, base: bool = False) -> None:
        await post(interaction, "diff", "base" if base else "")

    @app_commands.command(name="shell", description="Run a shell command in the workdir")
    async def shell(interaction: discord.Interaction, command: str) -> None:
        await post(interaction, "shell", command)

    worktree = app_commands.Group(name="worktree", description="This thread's git worktree")

    @worktree.command(name="new", description="A worktree on branch spindle/<name>; move here")
    @app_commands.describe(name="The worktree's name", base="Branch to start from")
    async def new(interaction: discord.Interaction, name: str, base: str | None = None) -> None:
        await post(interaction, "worktree", f"new {name} {base or ''}")

    @worktree.command(name="list", description="The repository's worktrees")
    async def list_(interaction: discord.Interaction) -> None:
        await post(interaction, "worktree", "list")

    @worktree.command(name="remove", description="Remove a Spindle worktree (its branch stays)")
    async def remove(interaction: discord.Interaction, name: str, force: bool = False) -> None:
        await post(interaction, "worktree", f"remove {name}" + (" force" if force else ""))

    @worktree.command(name="merge", description="Commit, rebase onto the target, fast-forward it")
    async def merge(interaction: discord.Interaction, target: str | None = None) -> None:
        await post(interaction, "worktree", f"merge {target or ''}")

    return (undo, redo, diff, shell, worktree)


# Fields for checking a command's input before the interaction is deferred.
_CHECK: dict[str, Any] = {"thread_id": "check", "action_id": "check", "at": 0.0}


async def answer_command_error(
    interaction: discord.Interaction, error: app_commands.AppCommandError
) -> None:
    """The answer to a slash command that raised: a refused option says why; anything
    else is logged and answered with a short notice. Only the user sees it."""
    original = getattr(error, "original", error)
    if isinstance(original, InputRefused):
        text = str(original)
    elif isinstance(error, app_commands.TransformerError):
        text = f"Invalid value for {error.type.name.lower()} option: {shown(str(error.value))!r}."
    else:
        _log.error("slash command failed: %s", original, exc_info=original)
        text = f"⚠ That command failed ({type(original).__name__}); the bot's log has the details."
    try:
        if interaction.response.is_done():
            # Deferred: the public "thinking..." message would take the answer and show it
            # to everyone; remove it so the followup is only the user's.
            with contextlib.suppress(discord.NotFound):
                await interaction.delete_original_response()
            await interaction.followup.send(text, ephemeral=True)
        else:
            await interaction.response.send_message(text, ephemeral=True)
    except Exception as exc:  # noqa: BLE001 - an error handler must not raise in turn
        # Not only HTTPException: during a shutdown the HTTP session is closed under it
        # (aiohttp's RuntimeError "Session is closed"), and an exception from here ends
        # the asyncio loop the whole bot runs in (trio-asyncio propagates it).
        _log.warning("could not answer a failed command: %s", exc)


def _schedule_group(bot: SpindleBot) -> app_commands.Group:
    """``/schedule add|list|cancel``: Discord cannot mix a command's options with
    subcommands, so adding one is ``/schedule add when:<when> prompt:<prompt>``."""
    group = app_commands.Group(name="schedule", description="Prompts that run later")

    @group.command(name="add", description="Run a prompt later (once, or repeating by cron)")
    @app_commands.describe(
        when="in 20m, in 2h, 14:30, 2026-12-01 09:00, or a cron expression like */30 * * * *",
        prompt="The prompt to queue when it is due",
    )
    async def add(interaction: discord.Interaction, when: str, prompt: str) -> None:
        user = interaction.user
        at = bot.now()
        tz = local_timezone()
        # Checked before deferring: a bad ``when`` is answered to the user alone.
        schedule_add_action(
            {"thread_id": "", "action_id": "check", "at": at},
            when=when,
            prompt=prompt,
            author_id=str(user.id),
            author_name=user.display_name,
            tz=tz,
        )
        await bot.command(
            interaction,
            lambda t, c: schedule_add_action(
                c,
                when=when,
                prompt=prompt,
                author_id=str(user.id),
                author_name=user.display_name,
                tz=tz,
            ),
        )

    @group.command(name="list", description="This thread's scheduled prompts")
    async def list_(interaction: discord.Interaction) -> None:
        await bot.command(interaction, lambda t, c: SchedulesListed(**c))

    @group.command(name="cancel", description="Drop a scheduled prompt")
    @app_commands.describe(id="Its id, as /schedule list shows it (s1, s2 ...)")
    async def cancel(interaction: discord.Interaction, id: str) -> None:
        check_word(id, "schedule id", 20)
        await bot.command(interaction, lambda t, c: ScheduleCancelled(**c, schedule_id=id))

    return group


def _agent_group(bot: SpindleBot, agent: str) -> app_commands.Group:
    who = "the echo demo agent (no CLI needed)" if agent == "echo" else agent
    group = app_commands.Group(name=agent, description=f"Conversations with {who}")

    @group.command(name="start", description=f"Start a {agent} conversation")
    @app_commands.describe(workdir="Directory to work in (default: the configured one)")
    async def start(interaction: discord.Interaction, workdir: str | None = None) -> None:
        if workdir is not None:
            check_path(workdir)
        await bot.start_conversation(interaction, agent, workdir)

    @group.command(name="resume", description=f"Resume a {agent} session by id")
    async def resume(interaction: discord.Interaction, id: str, workdir: str | None = None) -> None:
        check_word(id, "session id")
        if workdir is not None:
            check_path(workdir)
        await bot.start_conversation(interaction, agent, workdir, session_id=id)

    @group.command(name="conversations", description=f"List recent {agent} sessions")
    async def conversations(interaction: discord.Interaction) -> None:
        await _list_sessions(bot, interaction, agent)

    async def complete_session(
        interaction: discord.Interaction, current: str
    ) -> list[app_commands.Choice[str]]:
        if not bot.allowed(interaction.user):
            return []
        sessions = list_conversations(agent, _workdir_for_listing(bot, interaction))
        return [
            app_commands.Choice(name=f"{s.session_id[:36]} {s.title}"[:100], value=s.session_id)
            for s in sessions
            if s.session_id.startswith(current.strip()) and len(s.session_id) <= 100
        ][:25]

    start.autocomplete("workdir")(_workdir_completer(bot))
    resume.autocomplete("workdir")(_workdir_completer(bot))
    resume.autocomplete("id")(complete_session)
    return group


def _workdir_for_listing(bot: SpindleBot, interaction: discord.Interaction) -> str:
    return bot.workdir_of(str(interaction.channel_id)) or os.path.expanduser(
        bot.settings.default_workdir
    )


def _workdir_completer(
    bot: SpindleBot,
) -> Callable[[discord.Interaction, str], Coroutine[Any, Any, list[app_commands.Choice[str]]]]:
    # discord.py wants a plain coroutine function here (it reads its __qualname__).
    async def complete_workdir(
        interaction: discord.Interaction, current: str
    ) -> list[app_commands.Choice[str]]:
        return await _complete_workdir(bot, interaction, current)

    return complete_workdir


async def _complete_workdir(
    bot: SpindleBot, interaction: discord.Interaction, current: str
) -> list[app_commands.Choice[str]]:
    """Directory names as the path is typed (only for those allowed to use them)."""
    if not bot.allowed(interaction.user):
        return []
    base = bot.workdir_of(str(interaction.channel_id)) or bot.settings.default_workdir
    return [
        app_commands.Choice(name=path, value=path)
        for path in translate.complete_directory(current, base)
        if len(path) <= 100
    ]


async def _list_sessions(bot: SpindleBot, interaction: discord.Interaction, agent: str) -> None:
    """Read-only: answered here, from the CLI's own session store."""
    if not bot.allowed(interaction.user):
        await bot.refuse(interaction)
        return
    workdir = _workdir_for_listing(bot, interaction)
    sessions = list_conversations(agent, workdir)
    if not sessions:
        text = f"No {agent} sessions found for `{workdir}`."
    else:
        lines = [f"`{s.session_id}`  {s.title}" for s in sessions[:15]]
        text = f"Recent {agent} sessions in `{workdir}`:\n" + "\n".join(lines)
        text += f"\nResume one with `/{agent} resume <id>`."
    await interaction.response.send_message(text[:1900], ephemeral=True)
