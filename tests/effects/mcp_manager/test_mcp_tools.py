"""The five tools through the official MCP client over HTTP: start, idempotent start, output
tail and since_seq, restart, list, and the errors an agent can cause."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio
from mcp_kit import TOKEN, Scripts, alive, call, call_error, open_client, wait_for_output

from threadspindle.effects.mcp_manager import ProcessManager

TICKER = """
import sys, time
print("ready", flush=True)
print("to stderr", file=sys.stderr, flush=True)
n = 0
while True:
    n += 1
    print(f"tick {n}", flush=True)
    time.sleep(0.05)
"""

THREAD = {"X-Spindle-Thread": "thread-1"}


async def test_lists_the_five_tools_with_schemas(manager: ProcessManager) -> None:
    async with open_client(manager.url, TOKEN, THREAD) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {
        "start_process",
        "stop_process",
        "restart_process",
        "list_processes",
        "get_output",
        "schedule_wakeup",  # test_mcp_wakeup.py
    }
    start = tools["start_process"].input_schema
    assert set(start["required"]) == {"name", "command"}
    assert {"args", "cwd", "env"} <= set(start["properties"])
    assert tools["get_output"].output_schema is not None
    assert "last_seq" in tools["get_output"].output_schema["properties"]


async def test_start_is_idempotent_and_output_reads_by_sequence(
    manager: ProcessManager, scripts: Scripts
) -> None:
    async with open_client(manager.url, TOKEN, THREAD) as client:
        first = await call(client, "start_process", **scripts.start_args("ticker", TICKER))
        assert first["status"] == "running"
        assert first["already_running"] is False
        assert first["thread_id"] == "thread-1"
        assert alive(first["pid"])

        again = await call(client, "start_process", **scripts.start_args("ticker", TICKER))
        assert again["already_running"] is True
        assert again["pid"] == first["pid"]

        out = await wait_for_output(client, "ticker", "tick 3")
        assert out["stdout"].startswith("ready\ntick 1\n")
        assert out["stderr"] == "to stderr\n"
        seq = out["last_seq"]
        assert seq > 0

        # Only what is new since last_seq, and nothing of what was already read.
        await trio.sleep(0.3)
        newer = await call(client, "get_output", name="ticker", since_seq=seq)
        assert newer["last_seq"] > seq
        assert "ready" not in newer["stdout"]
        assert newer["stderr"] == ""
        first_new = int(newer["stdout"].split("\n")[0].split()[1])
        last_old = int(out["stdout"].rstrip("\n").split("\n")[-1].split()[1])
        assert first_new == last_old + 1

        # tail cuts to the newest characters and says so.
        short = await call(client, "get_output", name="ticker", tail=8)
        assert len(short["stdout"]) == 8
        assert short["stdout"].endswith("\n")
        assert short["truncated"] is True

        listed = await call(client, "list_processes")
        assert [p["name"] for p in listed["processes"]] == ["ticker"]
        assert listed["processes"][0]["status"] == "running"

        stopped = await call(client, "stop_process", name="ticker")
        assert stopped["tree_gone"] is True
        assert stopped["process"]["status"] == "stopped"
        assert not alive(first["pid"])


async def test_restart_gives_a_new_process_with_the_same_command(
    manager: ProcessManager, scripts: Scripts
) -> None:
    async with open_client(manager.url, TOKEN, THREAD) as client:
        first = await call(client, "start_process", **scripts.start_args("ticker", TICKER))
        old_seq = (await wait_for_output(client, "ticker", "tick 1"))["last_seq"]
        restarted = await call(client, "restart_process", name="ticker")
        assert restarted["status"] == "running"
        assert restarted["pid"] != first["pid"]
        assert restarted["restarts"] == 1
        assert restarted["args"] == first["args"]
        assert not alive(first["pid"])
        out = await wait_for_output(client, "ticker", "tick 1")
        assert out["stdout"].startswith("ready\n")  # a fresh output file
        # Numbering continues: a since_seq from the first incarnation sees the new output.
        assert out["last_seq"] > old_seq
        fresh = await call(client, "get_output", name="ticker", since_seq=old_seq)
        assert fresh["stdout"].startswith("ready\n")
        # A stopped process restarts too.
        await call(client, "stop_process", name="ticker")
        again = await call(client, "restart_process", name="ticker")
        assert again["status"] == "running" and again["restarts"] == 2


async def test_exit_codes_become_stopped_or_failed(
    manager: ProcessManager, scripts: Scripts
) -> None:
    async with open_client(manager.url, TOKEN, THREAD) as client:
        await call(client, "start_process", **scripts.start_args("ok", "print('bye')"))
        await call(
            client,
            "start_process",
            **scripts.start_args("bad", "import sys; print('oops', file=sys.stderr); sys.exit(3)"),
        )
        with trio.fail_after(10):
            while True:
                procs = {p["name"]: p for p in (await call(client, "list_processes"))["processes"]}
                if not any(p["status"] in ("starting", "running") for p in procs.values()):
                    break
                await trio.sleep(0.05)
        assert procs["ok"]["status"] == "stopped" and procs["ok"]["exit_code"] == 0
        assert procs["bad"]["status"] == "failed" and procs["bad"]["exit_code"] == 3
        assert procs["bad"]["stopped_at"] >= procs["bad"]["started_at"]
        out = await call(client, "get_output", name="bad")
        assert out["stderr"] == "oops\n" and out["exit_code"] == 3


async def test_errors_are_tool_errors_and_the_server_keeps_serving(
    manager: ProcessManager, scripts: Scripts, tmp_path: Path
) -> None:
    work = str(scripts.work)
    async with open_client(manager.url, TOKEN, THREAD) as client:
        text = await call_error(client, "stop_process", name="nope")
        assert "no process named 'nope'" in text
        text = await call_error(client, "get_output", name="nope")
        assert "no process named 'nope'" in text
        text = await call_error(
            client, "start_process", name="x", command="definitely-not-a-command-xyz", cwd=work
        )
        assert "command not found" in text
        text = await call_error(client, "start_process", name="x", command="./missing.sh", cwd=work)
        assert "command not found" in text
        text = await call_error(client, "start_process", name="x", command="true", cwd="/")
        assert "outside the allowed roots" in text
        outside = str(tmp_path / "work" / ".." / "..")
        text = await call_error(client, "start_process", name="x", command="true", cwd=outside)
        assert "outside the allowed roots" in text
        text = await call_error(
            client, "start_process", name="x", command="true", cwd=str(tmp_path / "absent")
        )
        assert "does not exist" in text
        text = await call_error(client, "start_process", name="x", command="true")
        assert "cwd is required" in text
        text = await call_error(client, "start_process", name="../x", command="true", cwd=work)
        assert "invalid process name" in text
        text = await call_error(client, "get_output", name="x", tail=-1)
        assert "tail" in text
        text = await call_error(client, "start_process", name="x")  # no command at all
        assert "command" in text
        # After all that the server still works.
        ok = await call(client, "start_process", **scripts.start_args("fine", "print(1)"))
        assert ok["status"] in ("running", "stopped")


async def test_workdir_header_is_the_default_cwd(manager: ProcessManager, scripts: Scripts) -> None:
    headers = {**THREAD, "X-Spindle-Workdir": str(scripts.work)}
    async with open_client(manager.url, TOKEN, headers) as client:
        args = scripts.write("pwd", "import os; print(os.getcwd())")
        started = await call(client, "start_process", name="pwd", command=sys.executable, args=args)
        assert started["cwd"] == str(scripts.work.resolve())
        out = await wait_for_output(client, "pwd", str(scripts.work.resolve()))
        assert out["stdout"].strip() == str(scripts.work.resolve())


async def test_env_is_added_to_the_environment(
    manager: ProcessManager, scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Spindle's own settings and secrets are not handed down; the rest of its env is.
    monkeypatch.setenv("SPINDLE_DISCORD_TOKEN", "secret-bot-token")
    async with open_client(manager.url, TOKEN, THREAD) as client:
        src = (
            "import os; print(os.environ['GREETING'], 'PATH' in os.environ, "
            "any(k.startswith('SPINDLE_') for k in os.environ))"
        )
        await call(
            client, "start_process", **scripts.start_args("env", src, env={"GREETING": "hi"})
        )
        out = await wait_for_output(client, "env", "hi")
        assert out["stdout"] == "hi True False\n"


async def test_max_processes_per_thread(
    nursery: trio.Nursery, tmp_path: Path, scripts: Scripts
) -> None:
    from mcp_kit import make_config

    from threadspindle.effects.mcp_manager import serve_process_manager

    manager = await nursery.start(
        serve_process_manager, make_config(tmp_path, max_processes_per_thread=2)
    )
    async with open_client(manager.url, TOKEN, THREAD) as client:
        await call(client, "start_process", **scripts.start_args("a", TICKER))
        await call(client, "start_process", **scripts.start_args("b", TICKER))
        text = await call_error(client, "start_process", **scripts.start_args("c", TICKER))
        assert "limit is 2" in text
    # Another thread has its own allowance.
    async with open_client(manager.url, TOKEN, {"X-Spindle-Thread": "thread-2"}) as other:
        started = await call(other, "start_process", **scripts.start_args("c", TICKER))
        assert started["status"] == "running"


async def test_a_bound_workdir_is_the_default_and_the_base_of_relative_cwds(
    manager: ProcessManager, scripts: Scripts
) -> None:
    (scripts.work / "sub").mkdir()
    manager.bind_thread("t-bound", str(scripts.work))
    async with open_client(manager.url, manager.token_for_thread("t-bound")) as client:
        args = scripts.write("where", "import os; print(os.getcwd())")
        here = await call(client, "start_process", name="a", command=sys.executable, args=args)
        assert here["cwd"] == str(scripts.work.resolve())
        sub = await call(
            client, "start_process", name="b", command=sys.executable, args=args, cwd="sub"
        )
        assert sub["cwd"] == str((scripts.work / "sub").resolve())
        escape = await call_error(client, "start_process", name="c", command="true", cwd="../../..")
        assert "outside the allowed roots" in escape
    manager.bind_thread("t-bound", None)
    async with open_client(manager.url, manager.token_for_thread("t-bound")) as client:
        text = await call_error(client, "start_process", name="d", command="true")
        assert "cwd is required" in text
