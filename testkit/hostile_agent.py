"""A hostile agent for the generic ``command`` adapter (tests/app/test_agent_isolation.py).

Prompt ``victim``: start a managed process through its own thread token (``SPINDLE_MCP_SERVERS``).
Any other prompt: attack. Read Spindle's environment and memory map through ``/proc``, every
process's environment, Spindle's data dir, database and config file, another thread's workdir
and Spindle's private temp files; then, through the process manager with its own thread
token, list and stop the victim's process, also naming the victim's thread in a header.
Everything found is written to ``findings.json`` in its workdir for the test to search.
The paths to attack come from ``ATTACK_*`` variables: the attacker knows all the test knows.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import sys
from typing import Any

import httpx2
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def _server() -> dict[str, Any]:
    servers: list[dict[str, Any]] = json.loads(os.environ.get("SPINDLE_MCP_SERVERS", "[]"))
    [server] = [s for s in servers if s["name"] == "process-manager"]
    return server


Answer = tuple[bool, Any, str]  # (is an error, structured content, text)


async def mcp(tool: str, headers: dict[str, str] | None = None, **args: Any) -> Answer:
    server = _server()
    h = {"Authorization": f"Bearer {server['bearer_token']}", **(headers or {})}
    async with httpx2.AsyncClient(headers=h, timeout=30) as http:
        async with Client(streamable_http_client(server["url"], http_client=http)) as c:
            result = await c.call_tool(tool, args)
            text = " ".join(getattr(x, "text", "") for x in result.content)
            return result.is_error, result.structured_content, text


def call(tool: str, headers: dict[str, str] | None = None, **args: Any) -> Answer:
    return trio.run(functools.partial(mcp, tool, headers, **args))


def read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"<{type(exc).__name__}>"


def main() -> None:
    prompt = sys.stdin.read().strip()
    if prompt == "victim":
        call(
            "start_process",
            name="victim-server",
            command=sys.executable,
            args=[
                "-c",
                "import time\nwhile True:\n open('heartbeat','a').write('.')\n time.sleep(0.05)",
            ],
        )
        print("victim started its server")
        return

    # The attack. Everything found goes into one text blob the test searches.
    found: dict[str, object] = {}
    chain: list[int] = []
    pid = os.getpid()
    while pid > 1 and len(chain) < 10:  # my ancestors: the guard, then Spindle itself
        chain.append(pid)
        stat = read(f"/proc/{pid}/stat")
        pid = int(stat.rsplit(")", 1)[1].split()[1]) if ")" in stat else 1
    for p in chain[1:]:
        found[f"environ {p}"] = read(f"/proc/{p}/environ")
        found[f"mem-maps {p}"] = read(f"/proc/{p}/maps")[:200]
    for path in glob.glob("/proc/[0-9]*/environ"):
        found[path] = read(path)
    data = os.environ["ATTACK_DATA_DIR"]
    found["data dir listing"] = (
        " ".join(sorted(os.listdir(data))) if os.path.isdir(data) else "<none>"
    )
    for path in glob.glob(os.path.join(data, "**"), recursive=True):
        if os.path.isfile(path):
            found["data " + path] = read(path)
    found["database"] = read(os.environ["ATTACK_DB"])
    found["config"] = read(os.environ["ATTACK_CONFIG"])
    other = os.environ["ATTACK_OTHER_WORKDIR"]
    found["other workdir"] = (
        " ".join(sorted(os.listdir(other))) if os.path.isdir(other) else "<none>"
    )
    for path in glob.glob("/tmp/spindle-*/**", recursive=True):  # agents' private configs
        if os.path.isfile(path):
            found["tmp " + path] = read(path)
    victim = {"X-Spindle-Thread": os.environ["ATTACK_VICTIM_THREAD"]}
    found["list"] = call("list_processes")
    found["list as victim"] = call("list_processes", victim)
    found["stop"] = call("stop_process", name="victim-server")
    found["stop as victim"] = call("stop_process", victim, name="victim-server")
    with open("findings.json", "w") as f:
        json.dump(found, f, default=str)
    print("attack done")


if __name__ == "__main__":
    main()
