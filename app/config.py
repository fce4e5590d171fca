"""Spindle's configuration: one TOML file plus environment variables, validated by pydantic.

Where values come from, strongest first: environment variables (``SPINDLE_...``, nested keys
joined by ``__``, e.g. ``SPINDLE_RUNTIME__QUEUE_LIMIT=20``), then the TOML file
(``--config PATH``, else ``$SPINDLE_CONFIG``, else ``<user config dir>/spindle/config.toml``),
then the defaults here. Secrets (the Discord token, the MCP bearer token) are ``SecretStr``:
they never appear in a repr, a log line or ``spindle status``.

A wrong value is a ``ConfigError`` naming the key and the expected form, raised before
anything starts; nothing that passes here may fail later for its shape. What is checked:

- types strictly where a coercion would hide a mistake (a number where a path belongs);
- ranges of every number (no NaN or infinity), ids as positive integers;
- paths: not empty, no NUL, absolute or starting with ``~`` (a relative one would depend on
  the directory Spindle is started from); the data dir and database not the wrong kind of
  file when they exist;
- texts handed to processes (arguments, environment, instructions) without NUL;
- tokens: the Discord token's shape (both ways of setting it), the MCP token's length and
  characters (it goes into an HTTP header);
- URLs: scheme and host;
- the file on its own: a wrong value in it is refused even when the environment overrides
  that key (it would bite the day the variable is gone);
- environment variables holding a list or a table must be JSON: a bad one is named.

The pieces live beside this module, and everything is importable from here as before: the
value types in ``config_values``, the chat platforms' sections in ``config_platforms``,
reading the sources and describing errors in ``config_loading``.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import platformdirs
from pydantic import (
    AfterValidator,
    Field,
    SecretStr,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from threadspindle.agents import check_agents, known_agents
from threadspindle.agents.base import AgentOptions
from threadspindle.app.config_loading import (
    ConfigError,
    _describe,
    _env_json_problem,
    _read_toml,
    _Sources,
    default_config_path,
)
from threadspindle.app.config_platforms import (
    DiscordSettings,
    PlainMessage,
    ProjectChannel,
    SlackId,
    SlackProjectChannel,
    SlackSettings,
    TelegramProjectGroup,
    TelegramSettings,
    WebSettings,
    WhatsAppSettings,
    _discord_token,
    _slack_app_token,
    _slack_bot_token,
    _telegram_token,
    looks_like_discord_token,
    looks_like_slack_token,
    looks_like_telegram_token,
)
from threadspindle.app.config_values import (
    Count,
    EnvName,
    Name,
    PathText,
    Seconds,
    Snowflake,
    Text,
    _Section,
    _url,
)
from threadspindle.effects.sandbox import Sandbox
from threadspindle.effects.shell_command import ShellLimits
from threadspindle.effects.workspace_port import WorkspaceOptions
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.core.workspace_model import WorkspacePolicy

__all__ = [
    "AGENT_NAMES",
    "ClusterSettings",
    "ConfigError",
    "Settings",
    "default_config_path",
    "load_settings",
    # defined beside, importable from here as before
    "Count",
    "DiscordSettings",
    "EnvName",
    "Name",
    "PathText",
    "PlainMessage",
    "ProjectChannel",
    "Seconds",
    "SlackId",
    "SlackProjectChannel",
    "SlackSettings",
    "Snowflake",
    "TelegramProjectGroup",
    "TelegramSettings",
    "Text",
    "WebSettings",
    "WhatsAppSettings",
    "looks_like_discord_token",
    "looks_like_slack_token",
    "looks_like_telegram_token",
]

AGENT_NAMES = ("claude", "codex", "gemini", "opencode")


class RuntimeSettings(_Section):
    queue_limit: Count = Field(default=50, ge=1, le=10_000)
    edit_interval_s: Seconds = Field(default=0.5, ge=0.05, le=60)
    interrupt_grace_s: Seconds = Field(default=10.0, gt=0, le=600)
    turn_idle_timeout_s: Seconds = Field(default=600.0, gt=0, le=7 * 86400)
    idle_actor_timeout_s: Seconds = Field(default=3600.0, gt=0, le=30 * 86400)
    allowed_roots: list[PathText] = ["~"]
    default_agent: StrictStr = "auto"  # "auto": the first genuine CLI found, else echo
    # "bwrap": every agent CLI (and the processes it starts through the process manager)
    # runs under bubblewrap; docs/security.md says what that protects.
    agent_sandbox: Literal["none", "bwrap"] = "none"
    agent_sandbox_binary: Name = "bwrap"  # a path, or a name on PATH
    # What a run shows in its thread unless /verbosity (or a project channel) says otherwise:
    # "text" only the answer; "tools" plus one line per tool call; "all" everything.
    verbosity: Literal["text", "tools", "all"] = "all"
    # Threads with no action for this many days, and nothing going on, are archived when
    # ``spindle run`` starts (app/log_archive.py, as ``spindle log archive --idle-days``):
    # the log keeps every action otherwise, and grows for ever. Unset: never.
    archive_idle_days: Seconds | None = Field(default=None, ge=1, le=36_500)

    @field_validator("allowed_roots")
    @classmethod
    def _roots(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError('expected at least one directory (e.g. ["~/code"])')
        return v

    @field_validator("default_agent")
    @classmethod
    def _agent(cls, v: str) -> str:
        known = ("auto", *known_agents())
        if v not in known:
            raise ValueError(f"expected one of {', '.join(known)}")
        return v

    def policy(self) -> Policy:
        roots = tuple(os.path.realpath(os.path.expanduser(r)) for r in self.allowed_roots)
        return Policy(
            queue_limit=self.queue_limit,
            allowed_roots=roots,
            interrupt_grace_s=self.interrupt_grace_s,
            turn_idle_timeout_s=self.turn_idle_timeout_s,
            verbosity=self.verbosity,
        )


class WorkspaceSettings(_Section):
    """``[workspaces]``: checkpoints and undo, the footer's change summary, `!` shell
    commands, worktrees (docs/workspaces.md)."""

    checkpoints: bool = True  # a checkpoint of the workdir before each run (/undo, /diff)
    keep_checkpoints: Count = Field(default=50, ge=1, le=10_000)  # per thread
    checkpoint_max_age_s: Seconds = Field(default=14 * 86400.0, gt=0, le=3650 * 86400)
    footer_changes: bool = True  # "3 files +40 −12" in a run's footer
    shell_users: list[StrictStr] = []  # user ids allowed `!` commands; none by default
    # `!` in the agent's own shell where it has one (Codex, OpenCode), so it sees the command.
    shell_via_agent: bool = False
    shell_timeout_s: Seconds = Field(default=120.0, gt=0, le=86400)
    shell_output_chars: Count = Field(default=2000, ge=100, le=100_000)  # per streamed piece
    worktree_dir: PathText | None = None  # default "<repo>.worktrees" beside the repository
    diff_max_chars: Count = Field(default=20_000, ge=500, le=1_000_000)
    # The patch /diff attaches as a file (Discord, Telegram, Slack); it is logged with the
    # result, so bounded well below a log record's limit.
    diff_file_max_bytes: Count = Field(default=256 * 1024, ge=1024, le=768 * 1024)

    def policy(self) -> WorkspacePolicy:
        return WorkspacePolicy(
            checkpoints=self.checkpoints,
            footer_changes=self.footer_changes and self.checkpoints,
            shell_users=tuple(self.shell_users),
            shell_via_agent=self.shell_via_agent,
        )

    def options(self, sandbox: Sandbox | None = None) -> WorkspaceOptions:
        """``sandbox``: where `!` commands run (the agents' sandbox, when configured)."""
        return WorkspaceOptions(
            keep_checkpoints=self.keep_checkpoints,
            checkpoint_max_age_s=self.checkpoint_max_age_s,
            worktree_dir=self.worktree_dir,
            diff_max_chars=self.diff_max_chars,
            diff_file_max_bytes=self.diff_file_max_bytes,
            shell=ShellLimits(
                timeout_s=self.shell_timeout_s,
                piece_chars=self.shell_output_chars,
                sandbox=sandbox,
            ),
        )


class AgentSettings(_Section):
    binary: Name | None = None
    model: Name | None = None
    extra_args: list[Text] = []
    env: dict[EnvName, Text] = {}
    system_instruction: Text | None = None
    per_turn: bool = False
    home: PathText | None = None
    max_retries: Count = Field(default=2, ge=0, le=10)  # model API retries before a turn fails
    sandbox: Literal["none", "bwrap"] | None = None  # None: runtime.agent_sandbox
    # Only for the generic "command" agent: its command line as a list (instead of
    # ``binary``, a command line split like a shell would).
    command: list[Name] = []

    @model_validator(mode="after")
    def _one_command_line(self) -> AgentSettings:
        if self.command and self.binary:
            raise ValueError("set `binary` or `command`, not both")
        if "command" in self.model_fields_set and not self.command:
            raise ValueError("`command`: the program to run, then its arguments (it is empty)")
        if self.binary is not None:
            # Split as the adapters split it, here: a bad line stops the start, not every
            # turn of the agent, later, each with a retry.
            try:
                words = shlex.split(self.binary)
            except ValueError as exc:
                raise ValueError(f"`binary` is no command line: {exc}") from None
            if not words:  # (quotes alone: `Name` refuses a blank one)
                raise ValueError("`binary`: the program to run (it is blank)")
        return self

    def options(self) -> AgentOptions:
        return AgentOptions(
            binary=shlex.join(self.command) if self.command else self.binary,
            extra_args=tuple(self.extra_args),
            env=tuple(sorted(self.env.items())),
            home=os.path.expanduser(self.home) if self.home else None,
            model=self.model,
            system_instruction=self.system_instruction,
            per_turn=self.per_turn,
            max_retries=self.max_retries,
        )


MCP_TOKEN_MIN = 16  # effects.mcp_manager.auth.TokenAuthority signs thread tokens with it


def _mcp_token(v: SecretStr | None) -> SecretStr | None:
    token = v.get_secret_value() if v is not None else ""
    if not token:
        return v  # unset: generated at start-up
    if len(token) < MCP_TOKEN_MIN:
        raise ValueError(
            f"expected at least {MCP_TOKEN_MIN} characters (it signs every thread's token), "
            f"not {len(token)}; leave it out to have one generated"
        )
    if any(c.isspace() or not c.isprintable() for c in token) or not token.isascii():
        raise ValueError("expected printable ASCII without spaces (it goes in an HTTP header)")
    return v


class TranscriptionSettings(_Section):
    """Voice messages: an OpenAI-compatible ``/audio/transcriptions`` endpoint (OpenAI,
    Groq, a local whisper server). Off until ``enabled``; the key is best set from the
    environment (SPINDLE_TRANSCRIPTION__API_KEY)."""

    enabled: bool = False
    base_url: Annotated[StrictStr, _url(("https", "http"))] = "https://api.openai.com/v1"
    model: Name = "whisper-1"
    api_key: SecretStr | None = None
    language: Name | None = None  # an ISO-639-1 hint ("en"); none: detected
    timeout_s: Seconds = Field(default=60.0, gt=0, le=600)
    max_mib: float = Field(default=25.0, gt=0, le=1024, allow_inf_nan=False)

    def config(self) -> Any:
        """The ingress side's ``TranscriptionConfig``, or None when off."""
        if not self.enabled:
            return None
        from threadspindle.ingress.transcribe import TranscriptionConfig

        return TranscriptionConfig(
            base_url=self.base_url,
            model=self.model,
            api_key=self.api_key,
            language=self.language,
            timeout_s=self.timeout_s,
            max_bytes=int(self.max_mib * 1024 * 1024),
        )


class McpSettings(_Section):
    enabled: bool = True
    port: Count = Field(default=0, ge=0, le=65535)  # 0: any free port; a fixed one must be free
    token: SecretStr | None = None  # generated at start-up when not set
    keep_on_shutdown: bool = False
    max_processes_per_thread: Count = Field(default=10, ge=1, le=1000)
    # MCP sessions a thread's agent may hold open; past it, its least recently used idle one
    # ends (effects/mcp_manager/session_quota.py)
    max_sessions_per_thread: Count = Field(default=16, ge=1, le=1000)
    ring_buffer_lines: Count = Field(default=5000, ge=100, le=1_000_000)
    # Connections the server holds at once (every agent can reach it); past it a new one is
    # closed at once (effects/connection_cap.py). An agent's client holds one to three.
    max_connections: Count = Field(default=4096, ge=16, le=65_536)

    _token_shape = field_validator("token")(_mcp_token)


class ClusterSettings(_Section):
    """``[cluster]``: how ``spindle runner``, ``spindle gateway`` and ``spindle log export
    --nats`` sign in to NATS. The servers hold every thread's log and inbox, and agents share
    the machines' network: set a password (``SPINDLE_CLUSTER__PASSWORD``, or here) and the
    same one in the servers' ``authorization`` block (docs/scale-out.md)."""

    user: Name = "spindle"
    password: SecretStr | None = None
    # NATS servers' files on this machine (their stores hold every thread's log, their
    # configs the password): hidden from agents like the data dir. ``spindle cluster dev``
    # sets it for its runners (``SPINDLE_CLUSTER__SERVER_DIR``).
    server_dir: PathText | None = None


def _data_dir(value: str) -> str:
    path = Path(os.path.expanduser(value))
    if path.exists() and not path.is_dir():
        raise ValueError(f"{value!r} exists and is not a directory")
    return value


def _database(value: str | None) -> str | None:
    if value is not None and Path(os.path.expanduser(value)).is_dir():
        raise ValueError(f"{value!r} is a directory: expected the database file's path")
    return value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="SPINDLE_",
        env_nested_delimiter="__",
        extra="forbid",
    )

    data_dir: Annotated[PathText, AfterValidator(_data_dir)] = Field(
        default_factory=lambda: platformdirs.user_data_dir("spindle")
    )
    # default: <data_dir>/spindle.db
    database: Annotated[PathText | None, AfterValidator(_database)] = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    discord_token: SecretStr | None = None  # SPINDLE_DISCORD_TOKEN, the usual way
    discord: DiscordSettings = DiscordSettings()
    telegram_token: SecretStr | None = None  # SPINDLE_TELEGRAM_TOKEN, the usual way
    telegram: TelegramSettings = TelegramSettings()
    slack_bot_token: SecretStr | None = None  # SPINDLE_SLACK_BOT_TOKEN, the usual way
    slack_app_token: SecretStr | None = None  # SPINDLE_SLACK_APP_TOKEN
    slack: SlackSettings = SlackSettings()
    web: WebSettings = WebSettings()
    whatsapp_token: SecretStr | None = None  # SPINDLE_WHATSAPP_TOKEN, the usual way
    whatsapp_app_secret: SecretStr | None = None  # SPINDLE_WHATSAPP_APP_SECRET
    whatsapp_verify_token: SecretStr | None = None  # SPINDLE_WHATSAPP_VERIFY_TOKEN
    whatsapp: WhatsAppSettings = WhatsAppSettings()
    runtime: RuntimeSettings = RuntimeSettings()
    agents: dict[str, AgentSettings] = {}
    mcp: McpSettings = McpSettings()
    workspaces: WorkspaceSettings = WorkspaceSettings()
    transcription: TranscriptionSettings = TranscriptionSettings()
    cluster: ClusterSettings = ClusterSettings()

    _sources: ClassVar[_Sources] = _Sources()
    _config_file: Path | None = None  # the file these settings were read from, if any

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        plan = cls._sources
        sources: list[PydanticBaseSettingsSource] = [init_settings]
        if plan.env:
            sources.append(env_settings)
        if plan.toml is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=plan.toml))
        return tuple(sources)

    _token_shape = field_validator("discord_token")(_discord_token)
    _telegram_token_shape = field_validator("telegram_token")(_telegram_token)
    _slack_bot_token_shape = field_validator("slack_bot_token")(_slack_bot_token)
    _slack_app_token_shape = field_validator("slack_app_token")(_slack_app_token)

    @field_validator("agents")
    @classmethod
    def _agent_names(cls, v: dict[str, AgentSettings]) -> dict[str, AgentSettings]:
        check_agents(tuple(v))
        for name, agent in v.items():
            if agent.command and name != "command":
                raise ValueError(f"only [agents.command] takes `command`, not [agents.{name}]")
        return v

    @model_validator(mode="after")
    def _together(self) -> Settings:
        """Checks of keys together, once every source is in (a key of the file alone may be
        completed by the environment)."""
        if not type(self)._sources.env:
            return self
        if self.runtime.default_agent == "command":
            command = self.agents.get("command")
            if command is None or not (command.binary or command.command):
                raise ValueError(
                    'agents.command.binary: needed when runtime.default_agent is "command": '
                    "set the command line to run (or `command`, as a list)"
                )
        return self

    # derived values ----------------------------------------------------------------------
    @property
    def data_path(self) -> Path:
        return Path(os.path.expanduser(self.data_dir))

    @property
    def database_path(self) -> Path:
        if self.database:
            return Path(os.path.expanduser(self.database))
        return self.data_path / "spindle.db"

    @property
    def log_path(self) -> Path:
        return self.data_path / "spindle.log.jsonl"

    def token(self) -> str | None:
        """The Discord bot token (env ``SPINDLE_DISCORD_TOKEN`` or ``[discord] token``)."""
        for secret in (self.discord_token, self.discord.token):
            if secret is not None and secret.get_secret_value():
                return secret.get_secret_value()
        return None

    def telegram_bot_token(self) -> str | None:
        """The Telegram bot token (env ``SPINDLE_TELEGRAM_TOKEN`` or ``[telegram] token``)."""
        for secret in (self.telegram_token, self.telegram.token):
            if secret is not None and secret.get_secret_value():
                return secret.get_secret_value()
        return None

    def slack_tokens(self) -> tuple[str | None, str | None]:
        """The Slack bot and app tokens (env ``SPINDLE_SLACK_BOT_TOKEN`` and
        ``SPINDLE_SLACK_APP_TOKEN``, or ``[slack] bot_token`` / ``app_token``)."""

        def first(*secrets: SecretStr | None) -> str | None:
            for secret in secrets:
                if secret is not None and secret.get_secret_value():
                    return secret.get_secret_value()
            return None

        return (
            first(self.slack_bot_token, self.slack.bot_token),
            first(self.slack_app_token, self.slack.app_token),
        )

    def whatsapp_secrets(self) -> dict[str, str]:
        """The WhatsApp ``token``, ``app_secret`` and ``verify_token`` (env
        ``SPINDLE_WHATSAPP_*`` first, then ``[whatsapp]``); "" for one not set."""
        section = self.whatsapp
        pairs = {
            "token": (self.whatsapp_token, section.token),
            "app_secret": (self.whatsapp_app_secret, section.app_secret),
            "verify_token": (self.whatsapp_verify_token, section.verify_token),
        }
        return {
            name: next((s.get_secret_value() for s in found if s and s.get_secret_value()), "")
            for name, found in pairs.items()
        }

    def whatsapp_configured(self) -> bool:
        """A WhatsApp access token is set: ``spindle run`` serves WhatsApp."""
        return bool(self.whatsapp_secrets()["token"])

    def nats_credentials(self) -> dict[str, str | None]:
        """``open_jetstream``'s ``user`` and ``password`` (the password None when unset)."""
        secret = self.cluster.password
        password = secret.get_secret_value() if secret is not None else None
        return {"user": self.cluster.user, "password": password or None}

    def agent(self, name: str) -> AgentSettings:
        return self.agents.get(name, AgentSettings())

    def workspace_sandbox(self) -> Sandbox | None:
        """Where `!` commands and the workspace's git run: the agents' sandbox when any
        agent runs in one. Git runs what a repository configures (hooks, filters), and a
        sandboxed agent can configure its repository: outside the sandbox that would be
        the agent's way out (effects/git_workspace.py)."""
        for agent in ("shell", *self.agents):
            sandbox = self.sandbox_for(agent)
            if sandbox is not None:
                return sandbox
        return None

    def sandbox_for(self, agent: str) -> Sandbox | None:
        """The sandbox agent ``agent`` runs in, or None. It hides Spindle's data dir, the
        database and the config file, NATS servers' files (``[cluster] server_dir``), and
        every allowed root but the thread's workdir."""
        mode = self.agent(agent).sandbox or self.runtime.agent_sandbox
        if mode == "none":
            return None
        db = str(self.database_path)
        hidden = [str(self.data_path), db, db + "-wal", db + "-shm", db + ".lock"]
        for config in (self._config_file, default_config_path()):
            if config is not None:
                hidden.append(str(config))
        if self.cluster.server_dir:
            hidden.append(os.path.expanduser(self.cluster.server_dir))
        return Sandbox(
            binary=os.path.expanduser(self.runtime.agent_sandbox_binary),
            hidden=tuple(hidden),
            roots=tuple(self.runtime.allowed_roots),
        )


def _build(sources: _Sources, overrides: dict[str, Any]) -> Settings:
    Settings._sources = sources
    try:
        return Settings(**overrides)
    finally:
        Settings._sources = _Sources()


def load_settings(path: Path | None = None, **overrides: Any) -> Settings:
    """Read and validate the configuration; a missing default file is fine, a missing
    explicit one is an error. Raises ``ConfigError`` naming every wrong key (and the
    environment variable that set it, if one did)."""
    explicit = path is not None
    path = path or default_config_path()
    toml: Path | None = path if explicit or path.exists() else None
    if toml is not None:
        _read_toml(toml)  # missing, unreadable, not TOML: said plainly
        try:  # the file on its own: a wrong value in it is refused even if overridden
            _build(_Sources(toml=toml, env=False), {})
        except ValidationError as exc:
            raise ConfigError(_describe(exc.errors(), f"config file {toml}", False)) from None
    problems = [
        problem
        for name, value in sorted(os.environ.items())
        if name.upper().startswith("SPINDLE_")
        and (problem := _env_json_problem(Settings, name.upper(), value)) is not None
    ]
    if problems:
        raise ConfigError("Invalid configuration (environment):\n  " + "\n  ".join(problems))
    try:
        settings = _build(_Sources(toml=toml, env=True), overrides)
    except ValidationError as exc:
        source = f"config file {toml} and environment" if toml else "environment"
        raise ConfigError(_describe(exc.errors(), source, True)) from None
    except SettingsError as exc:  # a source that could not be read at all
        raise ConfigError(f"Invalid configuration: {exc}") from None
    settings._config_file = toml
    return settings
