"""Configuration of the Slack app: its two tokens, where the Web API is, who may drive agents,
in which workspaces and channels, and which channels are project channels. See
docs/slack-setup.md.

``base_url`` defaults to Slack's own; tests point it at ``testkit.fake_slack``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from threadspindle.agents import check_agent, check_agents
from threadspindle.ingress.discord.settings import SLASH_AGENTS
from threadspindle.ingress.discord.translate import PlainMessageMode
from threadspindle.runtime.core.frozen import Frozen

__all__ = ["SLACK_API", "ProjectChannel", "SlackSettings", "slack_settings_from_config"]

SLACK_API = "https://slack.com/api/"


class ProjectChannel(Frozen):
    """A channel where a top-level message starts a thread with this agent/workdir."""

    channel_id: str
    agent: str = "claude"
    workdir: str

    _agent_known = field_validator("agent")(check_agent)


class SlackSettings(Frozen):
    bot_token: str  # xoxb-…: the Web API
    app_token: str  # xapp-…: Socket Mode (connections:write)
    base_url: str = SLACK_API
    # Files shared with a prompt at most this large (a larger one refuses the message).
    attachment_max_bytes: int = 25 * 1024 * 1024
    allowed_user_ids: tuple[str, ...] = ()
    allowed_team_ids: tuple[str, ...] = ()  # workspaces; empty: the app's own only
    allowed_channel_ids: tuple[str, ...] = ()  # channels served (project channels count)
    project_channels: tuple[ProjectChannel, ...] = ()
    default_workdir: str = "~"
    agents: tuple[str, ...] = SLASH_AGENTS
    command: str = "/spindle"  # the one slash command
    queue_suffix: str = " queue"
    steer_suffix: str = " steer"
    plain_message: PlainMessageMode = "interrupt"  # how a message with no suffix goes
    # At most one edit per channel this often (chat.update is Tier 3, ~50 a minute).
    min_edit_interval_s: float = 1.2
    # How often the status (assistant status, or the "working…" line) is refreshed.
    typing_refresh_s: float = Field(default=10.0, gt=0)
    # A refused user is told at most once per this many seconds.
    refusal_interval_s: float = 600.0
    catch_up: bool = True  # read what was said in known threads while Spindle was down
    # At most this many messages per thread (and new conversations per project channel)
    # are read by one catch-up: memory and the queue stay bounded after a long absence.
    catch_up_limit: int = Field(default=500, ge=1, le=10_000)

    _agents_known = field_validator("agents")(check_agents)

    def project_channel(self, channel_id: str) -> ProjectChannel | None:
        return next((p for p in self.project_channels if p.channel_id == channel_id), None)

    def is_allowed(self, user_id: str, team_id: str | None, own_team: str) -> bool:
        """Allow-listed users of an allowed workspace only. No user list: nobody."""
        teams = self.allowed_team_ids or (own_team,)
        return user_id in self.allowed_user_ids and (team_id is None or team_id in teams)

    def serves_channel(self, channel_id: str) -> bool:
        """Allow-listed channels, project channels, and direct messages with the app."""
        return (
            channel_id in self.allowed_channel_ids
            or self.project_channel(channel_id) is not None
            or channel_id.startswith("D")
        )


def slack_settings_from_config(config: Any) -> SlackSettings:
    """The app's settings from the ``spindle`` configuration (``app.config.Settings``: its
    ``[slack]`` section, the tokens, and the first allowed root as the default workdir).
    Raises ``ValueError`` without both tokens."""
    bot_token, app_token = config.slack_tokens()
    if not bot_token or not app_token:
        raise ValueError(
            "Slack needs both tokens: SPINDLE_SLACK_BOT_TOKEN (xoxb-…) and "
            "SPINDLE_SLACK_APP_TOKEN (xapp-…), or [slack] bot_token / app_token"
        )
    section = config.slack
    roots = list(config.runtime.allowed_roots) or ["~"]
    return SlackSettings(
        bot_token=bot_token,
        app_token=app_token,
        base_url=section.base_url,
        allowed_user_ids=tuple(section.allowed_user_ids),
        allowed_team_ids=tuple(section.allowed_team_ids),
        allowed_channel_ids=tuple(section.allowed_channel_ids),
        project_channels=tuple(
            ProjectChannel(channel_id=channel_id, agent=p.agent, workdir=p.workdir)
            for channel_id, p in section.project_channels.items()
        ),
        default_workdir=roots[0],
        plain_message=section.plain_message,
        min_edit_interval_s=max(section.min_edit_interval_s, config.runtime.edit_interval_s),
    )
