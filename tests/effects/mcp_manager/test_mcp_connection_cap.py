"""Any agent can reach the process manager on 127.0.0.1, and each connection it holds is a
descriptor of Spindle's process: past ``max_connections`` a new one is closed at once, and
once the flood is gone the manager serves agents again (``effects/connection_cap.py``)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import trio
from mcp_kit import TOKEN, call, make_config, open_client

from threadspindle.effects.mcp_manager import serve_process_manager
from threadspindle.testkit.connection_flood import open_flood, until_accepted

CAP = 20


async def test_a_flood_of_connections_is_held_to_the_cap(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    manager = await nursery.start(serve_process_manager, make_config(tmp_path, max_connections=CAP))
    url = urlsplit(manager.url)
    assert url.hostname is not None and url.port is not None
    flood = await open_flood(url.hostname, url.port, CAP * 10)
    assert len(flood.kept) == CAP and flood.closed == CAP * 9
    await flood.aclose()
    # Served again once the manager has let go of the flood's connections.
    await until_accepted(url.hostname, url.port)
    with trio.fail_after(10):
        async with open_client(manager.url, TOKEN, {"X-Spindle-Thread": "t-after"}) as client:
            assert (await call(client, "list_processes"))["processes"] == []
