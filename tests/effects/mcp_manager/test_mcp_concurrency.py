"""Ten MCP clients at once, each with its own HTTP session: starting and stopping their own
processes, and racing to start one shared name (exactly one process may result)."""

from __future__ import annotations

import trio
from mcp_kit import TOKEN, Scripts, alive, call, open_client

from threadspindle.effects.mcp_manager import ProcessManager

LOOP = "import time\nprint('up', flush=True)\nwhile True: time.sleep(1)"
CLIENTS = 10


async def test_ten_clients_start_and_stop_at_once(
    manager: ProcessManager, scripts: Scripts
) -> None:
    args = scripts.start_args("proc", LOOP)
    results: dict[int, tuple[dict, dict, dict]] = {}

    async def one_client(i: int) -> None:
        async with open_client(manager.url, manager.token_for_thread(f"t{i}")) as client:
            started = await call(client, "start_process", **{**args, "name": f"p{i}"})
            with trio.fail_after(15):
                while "up" not in (await call(client, "get_output", name=f"p{i}"))["stdout"]:
                    await trio.sleep(0.05)
            stopped = await call(client, "stop_process", name=f"p{i}")
            listed = await call(client, "list_processes")
            results[i] = (started, stopped, listed)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for i in range(CLIENTS):
                nursery.start_soon(one_client, i)

    assert sorted(results) == list(range(CLIENTS))
    pids = {started["pid"] for started, _, _ in results.values()}
    assert len(pids) == CLIENTS
    for i, (started, stopped, listed) in results.items():
        assert started["thread_id"] == f"t{i}"
        assert stopped["tree_gone"] is True
        assert [p["name"] for p in listed["processes"]] == [f"p{i}"]
        assert listed["processes"][0]["status"] == "stopped"
        assert not alive(started["pid"])
    assert manager.supervisor.statistics().live == 0


async def test_racing_starts_of_one_name_make_one_process(
    manager: ProcessManager, scripts: Scripts
) -> None:
    args = scripts.start_args("shared", LOOP)
    answers: list[dict] = []

    async def one_client() -> None:
        async with open_client(manager.url, TOKEN, {"X-Spindle-Thread": "shared"}) as client:
            answers.append(await call(client, "start_process", **args))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for _ in range(CLIENTS):
                nursery.start_soon(one_client)

    assert len(answers) == CLIENTS
    assert len({a["pid"] for a in answers}) == 1
    assert sum(1 for a in answers if not a["already_running"]) == 1
    assert manager.supervisor.statistics().spawned == 1
