"""Spindle's configuration: one TOML file plus environment variables, validated by pydantic.

Where values come from, strongest first: environment variables (``SPINDLE_...``, nested keys
joined by ``__``, e.g. ``SPINDLE_RUNTIME__QUEUE_LIMIT=20``), then the TOML file
(``--config PATH``, else ``$SPINDLE_CONFIG``, else ``<user config dir>/spindle/config.toml``),
then the defaults here. Secrets (the Discord token, the MCP bearer token) are ``SecretStr``:
they never appear in a repr, a log line or ``spindle status``.

A wrong value is a ``ConfigError`` naming the key and the expected form, raised before
anything starts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from effects.sandbox import Sandbox
from ingress.agents import known_agents, unknown_agent_message
from ingress.agents.base import AgentOptions
from runtime.model import Policy

__all__ = [
    "AGENT_NAMES",
    "ConfigError",
    "Settings",
    "default_config_path",
    "load_settings",
]

AGENT_NAMES = ("claude", "codex", "gemini", "opencode")


class ConfigError(Exception):
    """The configuration is wrong; the message names the key and the expected form."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProjectChannel(_Section):
    """A Discord channel where a plain message starts a thread with this agent and workdir."""

    agent: str = "claude"
    workdir: str

    @field_validator("agent")
    @classmethod
    def _known_agent(cls, v: str) -> str:
        if v not in known_agents():
            raise ValueError(unknown_agent_message(v))
        return v


class DiscordSettings(_Section):
    token: SecretStr | None = None
    application_id: int | None = None
    guild_ids: list[int] = []
    allowed_user_ids: list[int] = []
    allowed_role_ids: list[int] = []
    # For a REST rate-limit proxy such as nirn-proxy, and for the tests' fake Discord.
    rest_base_url: str = "https://discord.com/api/v10"
    gateway_url: str = "wss://gateway.discord.gg/"
    project_channels: dict[str, ProjectChannel] = {}
    # An attachment larger than this refuses its message with a reply (streamed to disk,
    # never held in memory, so the cap is about disk use and download time).
    attachment_max_mib: float = Field(25.0, gt=0, le=1024)

    @field_validator("token")
    @classmethod
    def _token_shape(cls, v: SecretStr | None) -> SecretStr | None:
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


class RuntimeSettings(_Section):
    queue_limit: int = Field(50, ge=1, le=10_000)
    edit_interval_s: float = Field(0.5, ge=0.05, le=60)
    interrupt_grace_s: float = Field(10.0, gt=0, le=600)
    turn_idle_timeout_s: float = Field(600.0, gt=0)
    idle_actor_timeout_s: float = Field(3600.0, gt=0)
    allowed_roots: list[str] = ["~"]
    default_agent: str = "auto"  # "auto": the first genuine CLI found, else echo
    # "bwrap": every agent CLI (and the processes it starts through the process manager)
    # runs under bubblewrap; docs/security.md says what that protects.
    agent_sandbox: Literal["none", "bwrap"] = "none"
    agent_sandbox_binary: str = "bwrap"  # a path, or a name on PATH

    @field_validator("allowed_roots")
    @classmethod
    def _roots(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError('expected at least one directory (e.g. ["~/code"])')
        return v

    @field_validator("default_agent")
    @classmethod
    def _agent(cls, v: str) -> str:
        known = ("auto", "echo", "command", *AGENT_NAMES)
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
        )


class AgentSettings(_Section):
    binary: str | None = None
    model: str | None = None
    extra_args: list[str] = []
    env: dict[str, str] = {}
    system_instruction: str | None = None
    per_turn: bool = False
    home: str | None = None
    max_retries: int = Field(2, ge=0, le=10)  # model API retries before a turn fails
    command: list[str] = []  # only for the generic "command" agent
    sandbox: Literal["none", "bwrap"] | None = None  # None: runtime.agent_sandbox

    def options(self) -> AgentOptions:
        return AgentOptions(
            binary=self.binary,
            extra_args=tuple(self.extra_args),
            env=tuple(sorted(self.env.items())),
            home=os.path.expanduser(self.home) if self.home else None,
            model=self.model,
            system_instruction=self.system_instruction,
            per_turn=self.per_turn,
            max_retries=self.max_retries,
        )


class McpSettings(_Section):
    enabled: bool = True
    port: int = Field(0, ge=0, le=65535)  # 0: any free port; a fixed one must be free
    token: SecretStr | None = None  # generated at start-up when not set
    keep_on_shutdown: bool = False
    max_processes_per_thread: int = Field(10, ge=1)
    ring_buffer_lines: int = Field(5000, ge=100)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="SPINDLE_",
        env_nested_delimiter="__",
        extra="forbid",
    )

    data_dir: str = Field(default_factory=lambda: platformdirs.user_data_dir("spindle"))
    database: str | None = None  # default: <data_dir>/spindle.db
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    discord_token: SecretStr | None = None  # SPINDLE_DISCORD_TOKEN, the usual way
    discord: DiscordSettings = DiscordSettings()
    runtime: RuntimeSettings = RuntimeSettings()
    agents: dict[str, AgentSettings] = {}
    mcp: McpSettings = McpSettings()

    _toml_path: Path | None = None
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
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if cls._toml_path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=cls._toml_path))
        return tuple(sources)

    @field_validator("agents")
    @classmethod
    def _agent_names(cls, v: dict[str, AgentSettings]) -> dict[str, AgentSettings]:
        for name in v:
            if name not in known_agents():
                raise ValueError(unknown_agent_message(name))
        return v

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

    def agent(self, name: str) -> AgentSettings:
        return self.agents.get(name, AgentSettings())

    def sandbox_for(self, agent: str) -> Sandbox | None:
        """The sandbox agent ``agent`` runs in, or None. It hides Spindle's data dir, the
        database and the config file, and every allowed root but the thread's workdir."""
        mode = self.agent(agent).sandbox or self.runtime.agent_sandbox
        if mode == "none":
            return None
        db = str(self.database_path)
        hidden = [str(self.data_path), db, db + "-wal", db + "-shm", db + ".lock"]
        for config in (self._config_file, default_config_path()):
            if config is not None:
                hidden.append(str(config))
        return Sandbox(
            binary=os.path.expanduser(self.runtime.agent_sandbox_binary),
            hidden=tuple(hidden),
            roots=tuple(self.runtime.allowed_roots),
        )


def looks_like_discord_token(token: str) -> bool:
    parts = token.split(".")
    return len(parts) == 3 and all(parts) and len(parts[0]) >= 16


def default_config_path() -> Path:
    env = os.environ.get("SPINDLE_CONFIG")
    if env:
        return Path(os.path.expanduser(env))
    return Path(platformdirs.user_config_dir("spindle")) / "config.toml"


def _describe(errors: list[dict[str, Any]], source: str) -> str:
    lines = [f"Invalid configuration ({source}):"]
    for err in errors:
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key (check its spelling and section)"
        lines.append(f"  {key}: {msg}")
    return "\n".join(lines)


def load_settings(path: Path | None = None, **overrides: Any) -> Settings:
    """Read and validate the configuration; a missing default file is fine, a missing
    explicit one is an error."""
    explicit = path is not None
    path = path or default_config_path()
    if not path.exists():
        if explicit:
            raise ConfigError(
                f"Config file {path} does not exist (create one with `spindle init`)."
            )
        path = None  # type: ignore[assignment]
    Settings._toml_path = path
    try:
        settings = Settings(**overrides)
        settings._config_file = path
        return settings
    except ValidationError as exc:
        raise ConfigError(_describe(exc.errors(), str(path or "environment"))) from None
    except ValueError as exc:  # a TOML syntax error
        raise ConfigError(f"Config file {path} is not valid TOML: {exc}") from None
    finally:
        Settings._toml_path = None
