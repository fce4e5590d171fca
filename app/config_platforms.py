"""The chat platforms' configuration sections (``[discord]``, ``[telegram]``, ``[slack]``,
``[web]``, ``[whatsapp]``) and the shape checks of their tokens. A token of the wrong shape
(a client secret where the bot token belongs, say) is refused up front whichever way it is
set: ``Settings`` applies the same ``_discord_token``, ``_telegram_token`` and
``_slack_*_token`` validators to its ``SPINDLE_..._TOKEN`` fields as the sections here
apply to their ``token`` keys; ``looks_like_discord_token`` is also what ``spindle doctor``
checks.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, SecretStr, StrictStr, field_validator

from threadspindle.agents import check_agent
from threadspindle.app.config_values import Count, Name, PathText, Snowflake, _Section, _url

__all__ = [
    "DiscordSettings",
    "PlainMessage",
    "ProjectChannel",
    "SlackId",
    "SlackProjectChannel",
    "SlackSettings",
    "TelegramProjectGroup",
    "TelegramSettings",
    "WebSettings",
    "WhatsAppSettings",
    "looks_like_discord_token",
    "looks_like_slack_token",
    "looks_like_telegram_token",
]


def _discord_token(v: SecretStr | None) -> SecretStr | None:
    if (
        v is not None
        and v.get_secret_value()
        and not looks_like_discord_token(v.get_secret_value())
    ):
        raise ValueError(
            "expected a bot token of three dot-separated parts (from the Developer "
            "Portal's Bot page), not a client secret or an application id"
        )
    return v


# How a message without a `` queue``/`` steer`` suffix is delivered while a run is active.
PlainMessage = Literal["interrupt", "queue", "steer"]


class ProjectChannel(_Section):
    """A Discord channel where a plain message starts a thread with this agent and workdir."""

    agent: Name = "claude"
    workdir: PathText
    worktree: bool = False  # each new thread gets its own git worktree (docs/workspaces.md)
    # What runs in this channel's threads show unless /verbosity says otherwise (None: the
    # runtime's default).
    verbosity: Literal["text", "tools", "all"] | None = None
    plain_message: PlainMessage | None = None  # this channel's threads; None: [discord]'s
    shell_via_agent: bool | None = None  # `!` in the agent's own shell; None: [workspaces]'s

    _agent_known = field_validator("agent")(check_agent)


class DiscordSettings(_Section):
    token: SecretStr | None = None
    application_id: Snowflake | None = None
    guild_ids: list[Snowflake] = []
    allowed_user_ids: list[Snowflake] = []
    allowed_role_ids: list[Snowflake] = []
    # For a REST rate-limit proxy such as nirn-proxy, and for the tests' fake Discord.
    rest_base_url: Annotated[StrictStr, _url(("https", "http"))] = "https://discord.com/api/v10"
    gateway_url: Annotated[StrictStr, _url(("wss", "ws"))] = "wss://gateway.discord.gg/"
    project_channels: dict[str, ProjectChannel] = {}
    plain_message: PlainMessage = "interrupt"
    # An attachment larger than this refuses its message with a reply (streamed to disk,
    # never held in memory, so the cap is about disk use and download time).
    attachment_max_mib: float = Field(default=25.0, gt=0, le=1024, allow_inf_nan=False)

    _token_shape = field_validator("token")(_discord_token)

    @field_validator("project_channels")
    @classmethod
    def _channel_ids(cls, v: dict[str, ProjectChannel]) -> dict[str, ProjectChannel]:
        for channel_id in v:
            if not channel_id.isascii() or not channel_id.isdigit() or int(channel_id) == 0:
                raise ValueError(
                    f"{channel_id!r} is not a channel id: each key is the channel's number, "
                    'e.g. [discord.project_channels."123456789012345678"]'
                )
        return v


def _telegram_token(v: SecretStr | None) -> SecretStr | None:
    token = v.get_secret_value() if v is not None else ""
    if token and not looks_like_telegram_token(token):
        raise ValueError(
            "expected a bot token such as 123456789:AA... (from @BotFather: the bot's number, "
            "a colon, then 30 or more letters, digits, '-' or '_')"
        )
    return v


class TelegramProjectGroup(_Section):
    """A Telegram forum group where a message in General opens a topic with this agent."""

    agent: Name = "claude"
    workdir: PathText
    worktree: bool = False  # each new thread gets its own git worktree (docs/workspaces.md)
    shell_via_agent: bool | None = None  # `!` in the agent's own shell; None: [workspaces]'s

    _agent_known = field_validator("agent")(check_agent)


class TelegramSettings(_Section):
    token: SecretStr | None = None  # prefer SPINDLE_TELEGRAM_TOKEN
    # A self-hosted Bot API server, or the tests' fake; the token is appended.
    base_url: Annotated[StrictStr, _url(("https", "http"))] = "https://api.telegram.org/bot"
    allowed_user_ids: list[Annotated[int, Field(gt=0)]] = []
    allowed_chat_ids: list[int] = []  # groups the bot serves (private chats always)
    project_groups: dict[str, TelegramProjectGroup] = {}
    plain_message: PlainMessage = "interrupt"
    # Telegram allows about one message a second per chat: edits at most this often.
    min_edit_interval_s: float = Field(default=1.0, ge=0.2, le=60, allow_inf_nan=False)

    _token_shape = field_validator("token")(_telegram_token)

    @field_validator("project_groups")
    @classmethod
    def _group_ids(cls, v: dict[str, TelegramProjectGroup]) -> dict[str, TelegramProjectGroup]:
        for chat_id in v:
            try:
                int(chat_id)
            except ValueError:
                raise ValueError(
                    f"{chat_id!r} is not a chat id: each key is the group's number, "
                    'e.g. [telegram.project_groups."-1001234567890"]'
                ) from None
        return v


def _slack_token(prefix: str, where: str) -> Any:
    def check(v: SecretStr | None) -> SecretStr | None:
        token = v.get_secret_value() if v is not None else ""
        if token and not looks_like_slack_token(token, prefix):
            raise ValueError(
                f"expected a Slack token starting with {prefix} ({where}; letters, digits "
                "and '-' only)"
            )
        return v

    return check


_slack_bot_token = _slack_token("xoxb-", "OAuth & Permissions: the Bot User OAuth Token")
_slack_app_token = _slack_token("xapp-", "Basic Information: an app-level token")

# A Slack id: a capital letter, then capitals and digits (U…, T…, C…).
SlackId = Annotated[StrictStr, Field(pattern=r"^[A-Z][A-Z0-9]{1,30}$")]


class SlackProjectChannel(_Section):
    """A Slack channel where a top-level message starts a thread with this agent."""

    agent: Name = "claude"
    workdir: PathText

    _agent_known = field_validator("agent")(check_agent)


class SlackSettings(_Section):
    bot_token: SecretStr | None = None  # xoxb-…; prefer SPINDLE_SLACK_BOT_TOKEN
    app_token: SecretStr | None = None  # xapp-… (Socket Mode); prefer SPINDLE_SLACK_APP_TOKEN
    # Slack's Web API, or the tests' fake.
    base_url: Annotated[StrictStr, _url(("https", "http"))] = "https://slack.com/api/"
    allowed_user_ids: list[SlackId] = []
    allowed_team_ids: list[SlackId] = []  # workspaces (empty: the app's own)
    allowed_channel_ids: list[SlackId] = []  # channels served (project channels count)
    project_channels: dict[str, SlackProjectChannel] = {}
    plain_message: PlainMessage = "interrupt"  # a message without a suffix during a run
    # chat.update is Tier 3 (about 50 a minute): edits in one channel at most this often.
    min_edit_interval_s: float = Field(default=1.2, ge=0.2, le=60, allow_inf_nan=False)

    _bot_token_shape = field_validator("bot_token")(_slack_bot_token)
    _app_token_shape = field_validator("app_token")(_slack_app_token)

    @field_validator("project_channels")
    @classmethod
    def _channel_ids(cls, v: dict[str, SlackProjectChannel]) -> dict[str, SlackProjectChannel]:
        for channel_id in v:
            if not channel_id.isascii() or not channel_id.isalnum() or channel_id[:1] != "C":
                raise ValueError(
                    f"{channel_id!r} is not a channel id: each key is the channel's id, "
                    'e.g. [slack.project_channels."C0123456789"]'
                )
        return v


def _web_host(value: str) -> str:
    import ipaddress

    if value != "localhost":
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(
                f"expected an IP address such as 127.0.0.1 (or localhost), not {value!r}"
            ) from None
    return value


class WebSettings(_Section):
    """The web chat (``spindle run --web``): a page on this machine, loopback by default."""

    enabled: bool = False
    host: Annotated[StrictStr, AfterValidator(_web_host)] = "127.0.0.1"
    port: Count = Field(default=8750, ge=0, le=65535)  # 0: any free port


class WhatsAppSettings(_Section):
    """The WhatsApp Business Cloud API (docs/whatsapp-setup.md). The three secrets are best
    set in the environment: SPINDLE_WHATSAPP_TOKEN, SPINDLE_WHATSAPP_APP_SECRET,
    SPINDLE_WHATSAPP_VERIFY_TOKEN."""

    token: SecretStr | None = None
    app_secret: SecretStr | None = None
    verify_token: SecretStr | None = None
    phone_number_id: Annotated[StrictStr, Field(pattern=r"^[0-9]*$", max_length=32)] = ""
    base_url: Annotated[StrictStr, _url(("https", "http"))] = "https://graph.facebook.com/v23.0"
    webhook_host: StrictStr = "127.0.0.1"  # behind the user's HTTPS reverse proxy or tunnel
    webhook_port: int = Field(default=8443, ge=0, le=65535)
    webhook_path: Annotated[StrictStr, Field(pattern=r"^/[A-Za-z0-9/_.-]*$")] = "/whatsapp/webhook"
    allowed_wa_ids: list[Annotated[StrictStr, Field(pattern=r"^[0-9]{5,20}$")]] = []
    allowed_group_ids: list[StrictStr] = []
    # No edits on WhatsApp: the least time between two messages of one streamed answer.
    min_message_interval_s: float = Field(default=2.0, ge=0.2, le=60, allow_inf_nan=False)


def looks_like_telegram_token(token: str) -> bool:
    """The shape @BotFather gives: digits, a colon, then the secret part."""
    number, colon, secret = token.partition(":")
    return bool(
        colon
        and number.isascii()
        and number.isdigit()
        and len(secret) >= 30
        and all(c.isascii() and (c.isalnum() or c in "-_") for c in secret)
    )


def looks_like_discord_token(token: str) -> bool:
    parts = token.split(".")
    return len(parts) == 3 and all(parts) and len(parts[0]) >= 16


def looks_like_slack_token(token: str, prefix: str) -> bool:
    """``xoxb-…`` / ``xapp-…``: the prefix, then letters, digits and dashes."""
    rest = token[len(prefix) :]
    return token.startswith(prefix) and len(rest) >= 8 and rest.replace("-", "").isalnum()
