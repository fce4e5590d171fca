"""Configuration of the Telegram bot: token, where the Bot API is, who may drive agents, in
which chats, and which groups are project groups. See docs/telegram-setup.md.

``base_url`` defaults to Telegram's own; point it at a self-hosted Bot API server or, in
tests, at ``testkit.fake_telegram``.
"""

from __future__ import annotations

from typing import Any

from pydantic import field_validator

from threadspindle.agents import check_agent, check_agents
from threadspindle.ingress.discord.settings import SLASH_AGENTS
from threadspindle.ingress.discord.translate import PlainMessageMode
from threadspindle.ingress.transcribe import TranscriptionConfig
from threadspindle.runtime.core.frozen import Frozen

__all__ = ["TELEGRAM_API", "ProjectGroup", "TelegramSettings", "telegram_settings_from_config"]

TELEGRAM_API = "https://api.telegram.org/bot"


class ProjectGroup(Frozen):
    """A forum group where a message in General opens a topic with this agent/workdir."""

    chat_id: int
    agent: str = "claude"
    workdir: str
    worktree: bool = False  # each new topic gets its own git worktree (docs/workspaces.md)
    # `!` commands in the agent's own shell (docs/workspaces.md); None: [workspaces]'s.
    shell_via_agent: bool | None = None

    _agent_known = field_validator("agent")(check_agent)


class TelegramSettings(Frozen):
    token: str
    base_url: str = TELEGRAM_API  # the token is appended
    allowed_user_ids: tuple[int, ...] = ()
    # Groups the bot serves (private chats of allowed users always); project groups count.
    allowed_chat_ids: tuple[int, ...] = ()
    project_groups: tuple[ProjectGroup, ...] = ()
    default_workdir: str = "~"
    agents: tuple[str, ...] = SLASH_AGENTS
    queue_suffix: str = " queue"
    steer_suffix: str = " steer"
    plain_message: PlainMessageMode = "interrupt"  # how a message with no suffix goes
    poll_timeout_s: float = 30.0  # long polling: how long one getUpdates may wait
    # At most one edit per chat this often (Telegram allows about one message a second).
    min_edit_interval_s: float = 1.0
    # A refused user is told at most once per this many seconds.
    refusal_interval_s: float = 600.0

    # Photos and files sent to the agent at most this large (the Bot API lets a bot
    # download 20 MB at most; a larger one is refused with a reply).
    attachment_max_bytes: int = 20 * 1024 * 1024

    # Voice messages are transcribed here (None: voice messages are refused with a reply).
    transcription: TranscriptionConfig | None = None

    _agents_known = field_validator("agents")(check_agents)

    def project_group(self, chat_id: int) -> ProjectGroup | None:
        return next((p for p in self.project_groups if p.chat_id == chat_id), None)

    def is_allowed(self, user_id: int) -> bool:
        """Allow-listed users only. No list: nobody."""
        return user_id in self.allowed_user_ids

    def serves_chat(self, chat_id: int, private: bool) -> bool:
        """Private chats, allow-listed groups and project groups."""
        return (
            private or chat_id in self.allowed_chat_ids or self.project_group(chat_id) is not None
        )


def telegram_settings_from_config(config: Any) -> TelegramSettings:
    """The bot's settings from the ``spindle`` configuration (``app.config.Settings``: its
    ``[telegram]`` section, the token, and the first allowed root as the default workdir).
    Raises ``ValueError`` without a token."""
    token = config.telegram_bot_token()
    if not token:
        raise ValueError("no Telegram token: set SPINDLE_TELEGRAM_TOKEN or [telegram] token")
    section = config.telegram
    roots = list(config.runtime.allowed_roots) or ["~"]
    return TelegramSettings(
        token=token,
        base_url=section.base_url,
        allowed_user_ids=tuple(section.allowed_user_ids),
        allowed_chat_ids=tuple(section.allowed_chat_ids),
        project_groups=tuple(
            ProjectGroup(
                chat_id=int(chat_id),
                agent=p.agent,
                workdir=p.workdir,
                worktree=p.worktree,
                shell_via_agent=p.shell_via_agent,
            )
            for chat_id, p in section.project_groups.items()
        ),
        default_workdir=roots[0],
        plain_message=section.plain_message,
        min_edit_interval_s=max(section.min_edit_interval_s, config.runtime.edit_interval_s),
        transcription=config.transcription.config(),
    )
