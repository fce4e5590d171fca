"""Every configuration value that would fail later is refused up front (issue 19.8): the real
``spindle doctor`` and ``spindle run`` exit 2 with one message naming the key (and the
environment variable, when one set it), never a traceback.

Each row is a config file and/or environment, the key the message must name and what it must
say. The rows sweep every section: types, ranges, paths, tokens, URLs, ids, texts handed to
processes, JSON in environment variables."""

from __future__ import annotations

import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cli_harness import lines, make_place, spindle

# (id, config file text, extra environment, key named, what the message says)
BAD = [
    ("mcp token short", '[mcp]\ntoken = "short"', {}, "mcp.token", "at least 16 characters"),
    (
        "mcp token spaces",
        '[mcp]\ntoken = "a token with spaces in it"',
        {},
        "mcp.token",
        "without spaces",
    ),
    ("data_dir a number", "data_dir = 5", {}, "data_dir", "valid string"),
    ("data_dir relative (env)", "", {"SPINDLE_DATA_DIR": "5"}, "data_dir", "absolute path"),
    (
        "data_dir a file",
        'data_dir = "{config}"',
        {"SPINDLE_DATA_DIR": ""},
        "data_dir",
        "not a directory",
    ),
    ("database a directory", 'database = "{work}"', {}, "database", "is a directory"),
    ("database relative", 'database = "spindle.db"', {}, "database", "absolute path"),
    (
        "allowed_roots bad JSON (env)",
        "",
        {"SPINDLE_RUNTIME__ALLOWED_ROOTS": "[bad"},
        "SPINDLE_RUNTIME__ALLOWED_ROOTS",
        "not valid JSON",
    ),
    (
        "agent env bad JSON (env)",
        "",
        {"SPINDLE_AGENTS__CLAUDE__ENV": "{x"},
        "SPINDLE_AGENTS__CLAUDE__ENV",
        "not valid JSON",
    ),
    (
        "allowed_roots relative",
        '[runtime]\nallowed_roots = ["code"]',
        {},
        "runtime.allowed_roots.0",
        "absolute path",
    ),
    (
        "allowed_roots empty",
        "[runtime]\nallowed_roots = []",
        {},
        "runtime.allowed_roots",
        "at least one",
    ),
    (
        "queue_limit zero",
        "[runtime]\nqueue_limit = 0",
        {},
        "runtime.queue_limit",
        "greater than or equal to 1",
    ),
    (
        "queue_limit a bool",
        "[runtime]\nqueue_limit = true",
        {},
        "runtime.queue_limit",
        "not true/false",
    ),
    (
        "queue_limit (env)",
        "",
        {"SPINDLE_RUNTIME__QUEUE_LIMIT": "many"},
        "runtime.queue_limit",
        "(from $SPINDLE_RUNTIME__QUEUE_LIMIT)",
    ),
    (
        "edit interval nan",
        "[runtime]\nedit_interval_s = nan",
        {},
        "runtime.edit_interval_s",
        "finite",
    ),
    (
        "idle timeout inf",
        "[runtime]\nturn_idle_timeout_s = inf",
        {},
        "runtime.turn_idle_timeout_s",
        "finite",
    ),
    (
        "grace negative",
        "[runtime]\ninterrupt_grace_s = -1",
        {},
        "runtime.interrupt_grace_s",
        "greater than 0",
    ),
    (
        "default agent typo",
        '[runtime]\ndefault_agent = "cluade"',
        {},
        "runtime.default_agent",
        "expected one of",
    ),
    (
        "command agent without a command",
        '[runtime]\ndefault_agent = "command"',
        {},
        "agents.command.binary",
        "needed when runtime.default_agent",
    ),
    (
        "discord token shape",
        '[discord]\ntoken = "short"',
        {},
        "discord.token",
        "three dot-separated",
    ),
    (
        "discord token shape (env)",
        "",
        {"SPINDLE_DISCORD_TOKEN": "a-client-secret"},
        "discord_token",
        "(from $SPINDLE_DISCORD_TOKEN)",
    ),
    ("guild id zero", "[discord]\nguild_ids = [0]", {}, "discord.guild_ids.0", "greater than 0"),
    (
        "user id text",
        '[discord]\nallowed_user_ids = ["me"]',
        {},
        "discord.allowed_user_ids.0",
        "integer",
    ),
    (
        "role id bool",
        "[discord]\nallowed_role_ids = [true]",
        {},
        "discord.allowed_role_ids.0",
        "true/false",
    ),
    (
        "application id negative",
        "[discord]\napplication_id = -5",
        {},
        "discord.application_id",
        "greater than 0",
    ),
    (
        "rest url",
        '[discord]\nrest_base_url = "ftp://x"',
        {},
        "discord.rest_base_url",
        "https or http URL",
    ),
    (
        "gateway url",
        '[discord]\ngateway_url = "gateway.discord.gg"',
        {},
        "discord.gateway_url",
        "wss or ws URL",
    ),
    (
        "project channel id",
        '[discord.project_channels.general]\nworkdir = "~"',
        {},
        "discord.project_channels",
        "'general' is not a channel id",
    ),
    (
        "project channel workdir",
        '[discord.project_channels."123"]\nworkdir = ""',
        {},
        "discord.project_channels.123.workdir",
        "must not be empty",
    ),
    (
        "extra arg NUL",
        '[agents.claude]\nextra_args = ["a\\u0000b"]',
        {},
        "agents.claude.extra_args.0",
        "NUL",
    ),
    (
        "env name",
        '[agents.claude]\nenv = { "A=B" = "x" }',
        {},
        "agents.claude.env",
        "not an environment variable name",
    ),
    (
        "agent home relative",
        '[agents.codex]\nhome = "homes/codex"',
        {},
        "agents.codex.home",
        "absolute path",
    ),
    (
        "agent binary empty",
        '[agents.gemini]\nbinary = ""',
        {},
        "agents.gemini.binary",
        "must not be empty",
    ),
    (
        "command elsewhere",
        '[agents.claude]\ncommand = ["x"]',
        {},
        "agents",
        "only [agents.command]",
    ),
    (
        "command and binary",
        '[agents.command]\ncommand = ["x"]\nbinary = "y"',
        {},
        "agents.command",
        "not both",
    ),
    (
        "command empty",
        "[agents.command]\ncommand = []",
        {},
        "agents.command",
        "`command`: the program to run",
    ),
    (
        "binary unsplittable",
        '[agents.command]\nbinary = "python3 \\"unterminated"',
        {},
        "agents.command",
        "`binary` is no command line: No closing quotation",
    ),
    ("unknown agent", "[agents.cluade]", {}, "agents", "unknown agent 'cluade'"),
    ("mcp port", "[mcp]\nport = 70000", {}, "mcp.port", "less than or equal to 65535"),
    (
        "ring buffer",
        "[mcp]\nring_buffer_lines = 10",
        {},
        "mcp.ring_buffer_lines",
        "greater than or equal to 100",
    ),
    (
        "max processes",
        "[mcp]\nmax_processes_per_thread = 0",
        {},
        "mcp.max_processes_per_thread",
        "greater than",
    ),
    ("log level", 'log_level = "loud"', {}, "log_level", "'debug', 'info', 'warning' or 'error'"),
    ("unknown key", "colour = 1", {}, "colour", "unknown key"),
    ("not TOML", "[runtime\nqueue_limit = 1", {}, "is not valid TOML", "line 1"),
]


def _case(tmp_path: Path, text: str, env: dict[str, str]) -> tuple[dict[str, Path], dict[str, str]]:
    place = make_place(tmp_path)

    def fill(value: str) -> str:
        return value.replace("{config}", str(place["config"])).replace("{work}", str(place["work"]))

    place["config"].write_text(fill(text) + "\n")
    return place, {k: fill(v) for k, v in env.items()}


@pytest.mark.parametrize(
    ("text", "env", "key", "says"), [row[1:] for row in BAD], ids=[row[0] for row in BAD]
)
def test_a_bad_value_stops_run_and_doctor_naming_its_key(
    tmp_path: Path, text: str, env: dict[str, str], key: str, says: str
) -> None:
    place, env = _case(tmp_path, text, env)
    if env.get("SPINDLE_DATA_DIR") == "":
        del env["SPINDLE_DATA_DIR"]
        place["data"] = place["config"]  # data_dir from the file alone
    with ThreadPoolExecutor(2) as pool:
        doctor, run = pool.map(
            lambda args: spindle(place, *args, stdin="/quit\n", env=env),
            [("doctor",), ("run", "--no-mcp", "--agent", "echo")],
        )
    for out in (doctor, run):
        assert out.returncode == 2, out.stdout + out.stderr
        assert key in out.stderr and says in out.stderr, out.stderr
        assert "Traceback" not in out.stderr and out.stdout == ""
    assert not place["data"].is_dir() or not any(place["data"].iterdir())  # nothing started


def test_agent_command_without_a_command_line_stops_run(tmp_path: Path) -> None:
    # Refused up front, as `default_agent = "command"` is, not at each prompt with retries.
    place, env = _case(tmp_path, "", {})
    out = spindle(place, "run", "--no-mcp", "--agent", "command", stdin="hi\n/quit\n", env=env)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "--agent command: set the command line to run first" in out.stderr
    assert not place["data"].is_dir() or not any(place["data"].iterdir())  # nothing started


def test_a_wrong_value_in_the_file_is_refused_even_when_the_environment_overrides_it(
    tmp_path: Path,
) -> None:
    place, env = _case(tmp_path, "data_dir = 5", {})
    out = spindle(place, "doctor", env=env)  # SPINDLE_DATA_DIR is set by the harness
    assert out.returncode == 2
    assert f"Invalid configuration (config file {place['config']}):" in out.stderr
    assert "data_dir: Input should be a valid string" in out.stderr


def test_every_key_with_a_good_value_passes(tmp_path: Path) -> None:
    place = make_place(tmp_path)
    data = tmp_path / "elsewhere"
    place["config"].write_text(
        f"""
data_dir = "{data}"
database = "{data / "spindle.db"}"
log_level = "debug"

[runtime]
queue_limit = 20
edit_interval_s = 1
interrupt_grace_s = 5.5
turn_idle_timeout_s = 900
idle_actor_timeout_s = 7200
allowed_roots = ["~", "{place["work"]}"]
default_agent = "command"

[discord]
application_id = 123456789012345678
guild_ids = [1]
allowed_user_ids = [2, 3]
allowed_role_ids = [4]
rest_base_url = "http://127.0.0.1:9/api/v10"
gateway_url = "ws://127.0.0.1:9/"

[discord.project_channels."123456789012345678"]
agent = "codex"
workdir = "~/code"

[agents.claude]
binary = "/usr/local/bin/claude"
model = "claude-sonnet-4-5"
extra_args = ["--verbose"]
env = {{ ANTHROPIC_BASE_URL = "http://127.0.0.1:9" }}
system_instruction = "Keep answers short."
per_turn = true
home = "~/.spindle-claude"

[agents.command]
command = ["python3", "-c", "print('hi from a command agent')"]

[mcp]
enabled = true
port = 0
token = "a-long-enough-operator-token"
keep_on_shutdown = false
max_processes_per_thread = 5
ring_buffer_lines = 1000

[cluster]
user = "spindle"
password = "a-password-for-the-nats-servers"
"""
    )
    env = {"SPINDLE_RUNTIME__ALLOWED_ROOTS": f'["~", "{place["work"]}"]'}
    doctor = spindle(place, "doctor", env=env)
    assert doctor.returncode in (0, 3) and "Invalid configuration" not in doctor.stderr
    run = spindle(
        place, "run", "--no-mcp", stdin=lines("hello", "/wait", "/quit"), env=env, timeout=90
    )
    assert run.returncode == 0, run.stderr
    assert "hi from a command agent" in run.stdout  # `command` is what the agent runs
    assert (data / "spindle.db").exists()


def test_a_log_schema_version_that_is_not_a_number_is_exit_4_naming_the_file(
    tmp_path: Path,
) -> None:
    place = make_place(tmp_path)
    first = spindle(place, "run", "--no-mcp", "--agent", "echo", stdin="/quit\n")
    assert first.returncode == 0, first.stderr
    db = place["data"] / "spindle.db"
    conn = sqlite3.connect(db)
    conn.execute("UPDATE meta SET value='abc' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    named = f"{db} has schema version 'abc'"
    for args in (("run", "--no-mcp", "--agent", "echo"), ("status",), ("log", "export", "x")):
        out = spindle(place, *args, stdin="/quit\n")
        assert out.returncode == 4, (args, out.stderr)
        assert named in out.stderr and "Traceback" not in out.stderr
    doctor = spindle(place, "doctor")
    assert doctor.returncode == 3 and named in doctor.stdout


def test_the_nats_password_comes_from_the_environment_before_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[cluster]``: how runners and gateways sign in to NATS; the environment wins, as
    for every secret, and an empty password counts as none."""
    from threadspindle.app.config import load_settings

    config = tmp_path / "c.toml"
    config.write_text('[cluster]\nuser = "node"\npassword = "from-the-file"\n')
    monkeypatch.delenv("SPINDLE_CLUSTER__PASSWORD", raising=False)
    assert load_settings(config).nats_credentials() == {
        "user": "node",
        "password": "from-the-file",
    }
    monkeypatch.setenv("SPINDLE_CLUSTER__PASSWORD", "from-the-environment")
    assert load_settings(config).nats_credentials()["password"] == "from-the-environment"
    assert "from-the-environment" not in repr(load_settings(config))
    config.write_text("")
    monkeypatch.setenv("SPINDLE_CLUSTER__PASSWORD", "")
    assert load_settings(config).nats_credentials() == {"user": "spindle", "password": None}


def test_nats_servers_files_are_hidden_from_sandboxed_agents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[cluster] server_dir`` (``spindle cluster dev`` sets it for its runners through the
    environment): a NATS store on the runner's machine holds every thread's log and its
    configs the password, so a sandboxed agent finds it emptied like the data dir."""
    from threadspindle.app.config import load_settings

    config = tmp_path / "c.toml"
    config.write_text('[runtime]\nagent_sandbox = "bwrap"\n')
    monkeypatch.delenv("SPINDLE_CLUSTER__SERVER_DIR", raising=False)
    without = load_settings(config).sandbox_for("claude")
    assert without is not None and str(tmp_path / "nats") not in without.hidden
    monkeypatch.setenv("SPINDLE_CLUSTER__SERVER_DIR", str(tmp_path / "nats"))
    settings = load_settings(config)
    hidden = settings.sandbox_for("claude")
    assert hidden is not None and str(tmp_path / "nats") in hidden.hidden
    assert str(settings.data_path) in hidden.hidden


def test_a_misspelt_spindle_variable_is_named_with_the_one_it_is_like(tmp_path: Path) -> None:
    """Nothing reads ``SPINDLE_DISCRD_TOKEN``: the bot ran in console mode without a word
    (a wrong key inside a section was refused, a wrong setting's name passed). Every
    command now warns, naming the variable it is like; other ``SPINDLE_`` variables (a
    command agent's ``SPINDLE_RUN_ID``) and the right ones say nothing."""
    from threadspindle.app.config import Settings
    from threadspindle.app.config_loading import misspelt_env

    environ = {
        "SPINDLE_DISCRD_TOKEN": "x",
        "SPINDLE_RUNTIMES__QUEUE_LIMIT": "5",
        "SPINDLE_RUN_ID": "r1",
        "SPINDLE_DISCORD_TOKEN": "y",
        "SPINDLE_RUNTIME__QUEUE_LIMIT": "5",
        "DISCRD_TOKEN": "z",
    }
    assert misspelt_env(Settings, environ) == [
        "$SPINDLE_DISCRD_TOKEN is not a setting and is ignored: "
        "did you mean $SPINDLE_DISCORD_TOKEN?",
        "$SPINDLE_RUNTIMES__QUEUE_LIMIT is not a setting and is ignored: "
        "did you mean $SPINDLE_RUNTIME__QUEUE_LIMIT?",
    ]
    place = make_place(tmp_path)
    out = spindle(place, "status", env={"SPINDLE_TELEGRAM_TOKN": "t", "SPINDLE_RUN_ID": "r"})
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines() == [
        "Warning: $SPINDLE_TELEGRAM_TOKN is not a setting and is ignored: "
        "did you mean $SPINDLE_TELEGRAM_TOKEN?"
    ]
