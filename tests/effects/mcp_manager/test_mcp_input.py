"""What an agent passes to start_process, through the official MCP client over HTTP
(issue 19.4): a name is matched whole (no trailing newline slips through ``$``), and a
NUL in the command, an argument or the cwd is refused by name instead of a generic error."""

from __future__ import annotations

from mcp_kit import TOKEN, Scripts, call, call_error, open_client

from threadspindle.effects.mcp_manager import ProcessManager

THREAD = {"X-Spindle-Thread": "thread-input"}


async def test_names_are_matched_whole(manager: ProcessManager, scripts: Scripts) -> None:
    work = str(scripts.work)
    async with open_client(manager.url, TOKEN, THREAD) as client:
        for bad in ("web\n", "web\r\n", "\nweb", "web\0", "a" * 65, "", "-web", "wéb"):
            text = await call_error(client, "start_process", name=bad, command="true", cwd=work)
            assert "invalid process name" in text, bad
        listed = await call(client, "list_processes")
        assert listed["processes"] == []


async def test_a_nul_is_refused_by_name(manager: ProcessManager, scripts: Scripts) -> None:
    work = str(scripts.work)
    async with open_client(manager.url, TOKEN, THREAD) as client:
        text = await call_error(client, "start_process", name="a", command="true", cwd=work + "\0")
        assert "cwd contains a NUL character" in text
        text = await call_error(client, "start_process", name="a", command="tr\0ue", cwd=work)
        assert "command contains a NUL character" in text
        text = await call_error(
            client, "start_process", name="a", command="true", args=["ok", "b\0d"], cwd=work
        )
        assert "args[1] contains a NUL character" in text
        # The server goes on as before.
        started = await call(client, "start_process", **scripts.start_args("fine", "print(1)"))
        assert started["status"] in ("running", "stopped")
