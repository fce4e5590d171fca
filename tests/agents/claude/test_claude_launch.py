"""The Claude Code adapter's pure parts: launch spec, MCP config, prompt lines, and the
listing of past conversations from a (synthetic) ``~/.claude/projects`` store."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from threadspindle.agents.base import AgentOptions, McpServer
from threadspindle.agents.base.launch import prompt_text
from threadspindle.agents.claude.launch import (
    image_blocks,
    launch_spec,
    mcp_config,
    prompt_line,
)
from threadspindle.agents.claude.sessions import list_conversations, project_slug
from threadspindle.runtime.core.model import Attachment


def test_launch_spec_long_lived_flags_and_options() -> None:
    options = AgentOptions(
        binary="/opt/claude",
        model="opus",
        system_instruction="be brief",
        extra_args=("--add-dir", "/data"),
        home="/tmp/h",
        env=(("ANTHROPIC_BASE_URL", "http://127.0.0.1:9"), ("DISABLE_TELEMETRY", "0")),
    )
    spec = launch_spec(
        options,
        workdir="/w",
        session_id="abc",
        mcp_config_path="/tmp/x/mcp.json",
        base_env={"PATH": "/bin", "CLAUDECODE": "1", "HOME": "/root"},
    )
    assert spec.argv == (
        "/opt/claude",
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
        "--permission-prompt-tool",
        "stdio",
        "--replay-user-messages",
        "--resume",
        "abc",
        "--model",
        "opus",
        "--append-system-prompt",
        "be brief",
        "--mcp-config=/tmp/x/mcp.json",
        "--add-dir",
        "/data",
    )
    assert spec.cwd == "/w"
    assert spec.env["HOME"] == "/tmp/h" and spec.env["PATH"] == "/bin"
    assert "CLAUDECODE" not in spec.env  # not a nested Claude Code session
    assert spec.env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert spec.env["DISABLE_TELEMETRY"] == "0"  # the user's options win
    assert spec.env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9"


def test_launch_spec_minimal_and_start_overrides() -> None:
    spec = launch_spec(AgentOptions(model="opus"), workdir="/w", model="sonnet", base_env={})
    assert spec.argv[0] == "claude"
    assert "--resume" not in spec.argv and "--append-system-prompt" not in spec.argv
    assert spec.argv[spec.argv.index("--model") + 1] == "sonnet"


def test_max_retries_caps_the_cli_retries_through_its_own_variable() -> None:
    inherited = {"CLAUDE_CODE_MAX_RETRIES": "10"}  # a shell's setting does not win
    spec = launch_spec(AgentOptions(max_retries=3), workdir="/w", base_env=inherited)
    assert spec.env["CLAUDE_CODE_MAX_RETRIES"] == "3"
    assert (
        launch_spec(AgentOptions(), workdir="/w", base_env={}).env["CLAUDE_CODE_MAX_RETRIES"] == "2"
    )
    explicit = AgentOptions(max_retries=3, env=(("CLAUDE_CODE_MAX_RETRIES", "0"),))
    assert (
        launch_spec(explicit, workdir="/w", base_env={}).env["CLAUDE_CODE_MAX_RETRIES"] == "0"
    )  # the agent's own env entry is the most specific


def test_mcp_config_carries_the_bearer_token_in_a_header() -> None:
    options = AgentOptions(
        mcp_servers=(
            McpServer(name="pm", url="http://127.0.0.1:7/mcp", bearer_token="t0k"),
            McpServer(name="open", url="http://127.0.0.1:8/mcp"),
        )
    )
    assert mcp_config(options) == {
        "mcpServers": {
            "pm": {
                "type": "http",
                "url": "http://127.0.0.1:7/mcp",
                "headers": {"Authorization": "Bearer t0k"},
            },
            "open": {"type": "http", "url": "http://127.0.0.1:8/mcp"},
        }
    }


def test_prompt_line_and_attachments() -> None:
    text = prompt_text(
        "look",
        (
            Attachment(name="a.txt", inline_text="hi"),
            Attachment(name="b.png", path="/w/b.png"),
            Attachment(name="c", url="https://cdn/c"),
        ),
    )
    assert text == (
        'look\n\n<attachment name="a.txt">\nhi\n</attachment>\n\n'
        "[Attached file: /w/b.png]\n\n[Attached: c https://cdn/c]"
    )
    line = json.loads(prompt_line("héllo"))
    assert line == {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": "héllo"}]},
    }


def _session_file(folder: Path, sid: str, lines: list[object], mtime: float) -> None:
    path = folder / f"{sid}.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    os.utime(path, (mtime, mtime))


def test_list_conversations_newest_first_with_first_prompt(tmp_path: Path) -> None:
    work = tmp_path / "my work.dir"
    work.mkdir()
    folder = tmp_path / "home" / ".claude" / "projects" / project_slug(str(work))
    folder.mkdir(parents=True)
    # The integration test's resume checks the real CLI agrees (its tmp paths have "_").
    assert project_slug("/home/dev/work_claude.v2") == "-home-dev-work-claude-v2"
    reminder = {"type": "text", "text": "<system-reminder>ctx</system-reminder>"}
    _session_file(
        folder,
        "old",
        [
            "not json",
            {"type": "summary"},
            {"type": "user", "isMeta": True, "message": {"content": "meta"}},
            {
                "type": "user",
                "message": {"content": [reminder, {"type": "text", "text": "fix bug\nmore"}]},
            },
        ],
        1000.0,
    )
    _session_file(folder, "new", [{"type": "user", "message": {"content": "add tests"}}], 2000.0)
    _session_file(folder, "empty", ["garbage"], 1500.0)
    found = list_conversations(str(work), str(tmp_path / "home"))
    assert [(c.session_id, c.title, c.updated_at) for c in found] == [
        ("new", "add tests", 2000.0),
        ("empty", "(no prompt)", 1500.0),
        ("old", "fix bug", 1000.0),
    ]
    assert list_conversations(str(tmp_path / "elsewhere"), str(tmp_path / "home")) == []


# A 1x1 transparent PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360000002000005000157a0cf0a0000000049454e44ae426082"
)


def test_saved_images_become_image_blocks(tmp_path: Path) -> None:
    (tmp_path / "dot.png").write_bytes(PNG)
    (tmp_path / "huge.png").write_bytes(b"\0" * (5 * 1024 * 1024 + 1))
    attachments = (
        Attachment(name="dot.png", path=str(tmp_path / "dot.png")),
        Attachment(name="huge.png", path=str(tmp_path / "huge.png")),
        Attachment(name="gone.jpg", path=str(tmp_path / "gone.jpg")),
        Attachment(name="notes.txt", path=str(tmp_path / "dot.png")),
        Attachment(name="remote.png", url="https://cdn/remote.png"),
    )
    blocks = image_blocks(attachments)
    assert len(blocks) == 1 and blocks[0]["source"]["media_type"] == "image/png"
    line = json.loads(prompt_line("see", attachments))
    assert [b["type"] for b in line["message"]["content"]] == ["text", "image"]


def _saved(workdir: Path, name: str) -> Path:
    """Where ingress saves an attachment of ``workdir``."""
    folder = workdir / ".spindle" / "attachments"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


def test_a_saved_image_is_never_read_through_a_symlink(tmp_path: Path) -> None:
    # Spindle reads the image outside the sandbox, from the agent's workdir: while the
    # prompt waits, the agent may swap the file, or .spindle itself, for a symlink to
    # something it may not read (the database, another thread's files).
    secret = tmp_path / "data" / "spindle.db"
    secret.parent.mkdir()
    secret.write_bytes(PNG + b"every thread's conversation")
    work = tmp_path / "work"
    image = _saved(work, "1-0-shot.png")
    image.symlink_to(secret)
    regular = _saved(work, "1-1-dot.png")
    regular.write_bytes(PNG)
    elsewhere = tmp_path / "elsewhere"
    planted = elsewhere / ".spindle" / "attachments" / "2-0-shot.png"
    planted.parent.mkdir(parents=True)
    planted.symlink_to(secret)
    (elsewhere / ".spindle" / "attachments" / "2-1-copy.png").write_bytes(secret.read_bytes())
    other = tmp_path / "other-work"
    other.mkdir()
    (other / ".spindle").symlink_to(elsewhere / ".spindle")
    attachments = (
        Attachment(name="shot.png", path=str(image)),
        Attachment(name="copy.png", path=str(other / ".spindle" / "attachments" / "2-1-copy.png")),
        Attachment(name="dot.png", path=str(regular)),
    )
    blocks = image_blocks(attachments)
    assert [base64.b64decode(b["source"]["data"]) for b in blocks] == [PNG]
    line = prompt_line("see", attachments)
    assert "every thread" not in line
    assert base64.b64encode(secret.read_bytes()).decode() not in line
    # Refused files stay paths in the text the CLI is given.
    assert f"[Attached file: {image}]" in prompt_text("see", attachments)


@pytest.mark.timeout(10)
def test_a_fifo_in_place_of_a_saved_image_does_not_block(tmp_path: Path) -> None:
    fifo = _saved(tmp_path / "work", "1-0-pipe.png")
    os.mkfifo(fifo)  # a plain open() would wait for a writer (the agent) for ever
    assert image_blocks((Attachment(name="pipe.png", path=str(fifo)),)) == []
