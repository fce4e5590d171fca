"""The opencode adapter's pure parts: environment, private config, launch specs, prompt
bodies, and the conversation list read from opencode's SQLite database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from threadspindle.agents import adapter_class
from threadspindle.agents.base import AgentOptions, McpServer
from threadspindle.agents.opencode import OpencodeAdapter, list_conversations
from threadspindle.agents.opencode.launch import (
    McpRegistration,
    launch_env,
    mcp_registrations,
    private_config,
    prompt_body,
    run_argv,
    run_spec,
    serve_spec,
    session_rules,
)
from threadspindle.runtime.core.effect_types import PromptAgent
from threadspindle.runtime.core.model import Attachment


def test_registry_finds_the_adapter() -> None:
    assert adapter_class("opencode") is OpencodeAdapter
    assert OpencodeAdapter.name == "opencode"


def test_env_private_home_defaults_and_overrides() -> None:
    options = AgentOptions(home="/tmp/h", env=(("OPENCODE_DISABLE_SHARE", "0"), ("FAKE_KEY", "k")))
    env = launch_env(options, {"PATH": "/bin", "OPENCODE_SERVER_PASSWORD": "leak"})
    assert env["HOME"] == "/tmp/h"
    assert env["XDG_CONFIG_HOME"] == "/tmp/h/.config"
    assert env["XDG_DATA_HOME"] == "/tmp/h/.local/share"
    assert env["OPENCODE_DISABLE_AUTOUPDATE"] == "1"
    assert env["OPENCODE_DISABLE_SHARE"] == "0"  # options.env wins over the defaults
    assert env["FAKE_KEY"] == "k" and env["PATH"] == "/bin"
    assert "OPENCODE_SERVER_PASSWORD" not in env  # the server gets its own, never ours


def test_env_without_home_keeps_the_users() -> None:
    env = launch_env(AgentOptions(), {"HOME": "/home/me"})
    assert env["HOME"] == "/home/me" and "XDG_CONFIG_HOME" not in env


def test_private_config_holds_only_mcp_servers() -> None:
    assert private_config(AgentOptions()) == {}
    options = AgentOptions(
        mcp_servers=(
            McpServer(name="pm", url="http://127.0.0.1:9/mcp", bearer_token="t0k"),
            McpServer(name="open", url="http://127.0.0.1:8/mcp"),
        )
    )
    config = private_config(options)
    assert config["mcp"] == {
        "pm": {
            "type": "remote",
            "url": "http://127.0.0.1:9/mcp",
            "enabled": True,
            "headers": {"Authorization": "Bearer t0k"},
        },
        "open": {"type": "remote", "url": "http://127.0.0.1:8/mcp", "enabled": True},
    }


def test_serve_spec_is_loopback_and_a_stable_pool_key() -> None:
    options = AgentOptions(binary="/x/opencode", extra_args=("--log-level", "WARN"))
    spec = serve_spec(options, "/work", {"PATH": "/bin"})
    assert spec.launch.argv == (
        "/x/opencode",
        "serve",
        "--hostname",
        "127.0.0.1",
        "--port",
        "0",
        "--log-level",
        "WARN",
    )
    assert spec.launch.cwd == "/work" and spec.config == ""
    assert spec.key == serve_spec(options, "/work", {"PATH": "/bin"}).key
    assert spec.key != serve_spec(options, "/other", {"PATH": "/bin"}).key

    # Threads with different MCP tokens never share a server (an agent reaches its server's
    # whole API); with the same ones (or none) they do, and no token is in the spec.
    def tenant(token: str) -> AgentOptions:
        server = McpServer(name="pm", url="http://127.0.0.1:9/mcp", bearer_token=token)
        return options.model_copy(update={"mcp_servers": (server,)})

    a = serve_spec(tenant("tokA"), "/work", {"PATH": "/bin"})
    assert a.key != spec.key and a.key != serve_spec(tenant("tokB"), "/work", {"PATH": "/bin"}).key
    assert a.key == serve_spec(tenant("tokA"), "/work", {"PATH": "/bin"}).key
    assert "tokA" not in repr(a) and a.tenant == (mcp_registrations(tenant("tokA"))[0].name,)


def test_mcp_registrations_are_per_token_and_sessions_see_only_theirs() -> None:
    def regs(token: str | None) -> list[McpRegistration]:
        server = McpServer(name="process-manager", url="http://127.0.0.1:9/mcp", bearer_token=token)
        return mcp_registrations(AgentOptions(mcp_servers=(server,)))

    (a,), (b,), (a_again,) = regs("tokA"), regs("tokB"), regs("tokA")
    assert a.name != b.name and a.name == a_again.name
    assert a.name.startswith("process-manager-") and a.base == "process-manager"
    assert a.config == {
        "type": "remote",
        "url": "http://127.0.0.1:9/mcp",
        "enabled": True,
        "headers": {"Authorization": "Bearer tokA"},
    }
    assert "headers" not in regs(None)[0].config
    assert session_rules(None, [a]) == [
        {"permission": "process-manager-*", "pattern": "*", "action": "deny"},
        {"permission": f"{a.name}_*", "pattern": "*", "action": "allow"},
    ]
    asking = session_rules("ask", [])
    assert {r["permission"] for r in asking} == {"bash", "edit", "webfetch", "external_directory"}
    assert all(r["action"] == "ask" for r in asking)
    assert session_rules(None, []) == []


def test_run_argv_resumes_and_keeps_a_dash_prompt_safe() -> None:
    argv = run_argv(AgentOptions(), "-rf everything", "ses_1", "fake/m")
    assert argv == [
        "opencode",
        "run",
        "--format",
        "json",
        "-s",
        "ses_1",
        "-m",
        "fake/m",
        "--",
        "-rf everything",
    ]
    env = {"PATH": "/bin", "OPENCODE_CONFIG": "/tmp/p/opencode.json"}
    spec = run_spec(AgentOptions(), "hi", workdir="/w", session_id=None, model=None, env=env)
    assert spec.expose == ("/tmp/p/opencode.json",)  # the sandbox shows it the private config
    assert (spec.cwd, spec.env) == ("/w", env) and spec.argv[-2:] == ("--", "hi")
    assert run_argv(AgentOptions(binary="oc"), "hi", None, None) == [
        "oc",
        "run",
        "--format",
        "json",
        "--",
        "hi",
    ]


def test_prompt_body_model_system_and_attachments() -> None:
    prompt = PromptAgent(
        run_id="r1",
        text="look",
        agent="opencode",
        workdir="/w",
        model="anthropic/claude-x",
        system_instruction="be brief",
        attachments=(
            Attachment(name="a.txt", inline_text="AAA"),
            Attachment(name="b.png", path="/w/b.png"),
        ),
    )
    body = prompt_body(prompt)
    assert body["model"] == {"providerID": "anthropic", "modelID": "claude-x"}
    assert body["system"] == "be brief"
    text = body["parts"][0]["text"]
    assert text.startswith("look") and "AAA" in text and "/w/b.png" in text
    plain = prompt_body(PromptAgent(run_id="r", text="x", agent="opencode", workdir="/w"))
    assert plain == {"parts": [{"type": "text", "text": "x"}]}
    # A model without a provider cannot be named to opencode; the default applies.
    assert "model" not in prompt_body(prompt.model_copy(update={"model": "bare"}))


def _db(home: Path) -> sqlite3.Connection:
    data = home / ".local" / "share" / "opencode"
    data.mkdir(parents=True)
    db = sqlite3.connect(data / "opencode.db")
    db.execute(
        "CREATE TABLE session (id text PRIMARY KEY, parent_id text, directory text NOT NULL,"
        " title text NOT NULL, time_created integer NOT NULL, time_updated integer NOT NULL)"
    )
    return db


def test_list_conversations_newest_first_roots_only(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    db = _db(tmp_path / "home")
    rows = [
        ("ses_old", None, str(work), "Old one", 1_000, 2_000),
        ("ses_new", None, str(work), "New one", 3_000, 9_000),
        ("ses_child", "ses_new", str(work), "A subtask", 3_000, 9_500),
        ("ses_else", None, "/elsewhere", "Other project", 3_000, 9_900),
    ]
    db.executemany("INSERT INTO session VALUES (?,?,?,?,?,?)", rows)
    db.commit()
    db.close()
    found = list_conversations(str(work), home=str(tmp_path / "home"))
    assert [(c.session_id, c.title, c.updated_at) for c in found] == [
        ("ses_new", "New one", 9.0),
        ("ses_old", "Old one", 2.0),
    ]
    assert found[0].title == "New one"


@pytest.mark.parametrize("content", [None, b"not a database at all"])
def test_list_conversations_best_effort(tmp_path: Path, content: bytes | None) -> None:
    if content is not None:
        data = tmp_path / ".local" / "share" / "opencode"
        data.mkdir(parents=True)
        (data / "opencode.db").write_bytes(content)
    assert list_conversations(str(tmp_path), home=str(tmp_path)) == []
