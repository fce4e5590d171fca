"""What an agent passes to start_process, through the official MCP client over HTTP
(issue 19.4): a name is matched whole (no trailing newline slips through ``$``), and a
NUL in the command, an argument or the cwd is refused by name instead of a generic error, and
so is an environment variable the dynamic loader or glibc would act on."""

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


async def test_loader_and_glibc_variables_are_refused_by_name(
    manager: ProcessManager, scripts: Scripts
) -> None:
    # The guard runs outside any sandbox with this environment (see test_mcp_sandbox.py).
    work = str(scripts.work)
    refused = ("LD_PRELOAD", "LD_LIBRARY_PATH", "GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH")
    async with open_client(manager.url, TOKEN, THREAD) as client:
        for name in (*refused, "NLSPATH", "MALLOC_TRACE", "HOSTALIASES"):
            text = await call_error(
                client, "start_process", name="a", command="true", cwd=work, env={name: "/x"}
            )
            assert f"environment variable {name!r} is refused" in text, text
        assert (await call(client, "list_processes"))["processes"] == []
        # Ordinary variables, LDFLAGS too, still reach the process.
        started = await call(
            client,
            "start_process",
            **scripts.start_args("fine", "import os; print(os.environ['LDFLAGS'])"),
            env={"LDFLAGS": "-L/opt/lib", "TMPDIR": "/tmp"},
        )
        assert started["status"] in ("running", "stopped")
