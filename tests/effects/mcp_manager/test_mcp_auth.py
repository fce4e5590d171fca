"""Who may call: 401 without a valid bearer token, thread tokens scoped to their thread, the
operator token seeing everything, and the listener on loopback only."""

from __future__ import annotations

import httpx2
import pytest
import trio
from mcp import MCPError
from mcp_kit import ACCEPT, INIT, TOKEN, Scripts, call, call_error, open_client

from threadspindle.effects.mcp_manager import ProcessManager, ProcessManagerConfig, TokenAuthority


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong-token-wrong-token", f"Basic {TOKEN}", "Bearer", "Bearer spt1.eA.bad"],
)
async def test_requests_without_a_valid_token_get_401(
    manager: ProcessManager, authorization: str | None
) -> None:
    headers = dict(ACCEPT)
    if authorization is not None:
        headers["Authorization"] = authorization
    async with httpx2.AsyncClient() as http:
        response = await http.post(manager.url, json=INIT, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert manager.guard.refused >= 1


async def test_the_sdk_client_without_token_is_refused(manager: ProcessManager) -> None:
    before = manager.guard.refused
    with pytest.raises(BaseException) as caught:  # the SDK wraps it in exception groups
        async with open_client(manager.url, None) as client:
            await client.list_tools()
    errors = _leaves(caught.value)
    assert any(isinstance(e, MCPError) for e in errors), errors
    assert manager.guard.refused > before


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


async def test_a_valid_token_gets_in(manager: ProcessManager) -> None:
    async with httpx2.AsyncClient() as http:
        response = await http.post(
            manager.url, json=INIT, headers={**ACCEPT, "Authorization": f"Bearer {TOKEN}"}
        )
    assert response.status_code == 200


async def test_thread_tokens_see_only_their_own_thread(
    manager: ProcessManager, scripts: Scripts
) -> None:
    src = "import time\nprint('up', flush=True)\nwhile True: time.sleep(1)"
    token_a = manager.token_for_thread("discord:111")
    token_b = manager.token_for_thread("discord:222")
    async with open_client(manager.url, token_a) as a:
        started = await call(a, "start_process", **scripts.start_args("web", src))
        assert started["thread_id"] == "discord:111"
    # Thread B cannot see, read or stop A's process, even when it names A's thread.
    async with open_client(manager.url, token_b, {"X-Spindle-Thread": "discord:111"}) as b:
        assert (await call(b, "list_processes"))["processes"] == []
        assert "no process named 'web'" in await call_error(b, "get_output", name="web")
        assert "no process named 'web'" in await call_error(b, "stop_process", name="web")
    # The operator sees every thread, and acts for one with the header.
    async with open_client(manager.url, TOKEN) as operator:
        every = (await call(operator, "list_processes"))["processes"]
        assert [(p["thread_id"], p["name"]) for p in every] == [("discord:111", "web")]
    async with open_client(manager.url, TOKEN, {"X-Spindle-Thread": "discord:111"}) as op_a:
        stopped = await call(op_a, "stop_process", name="web")
        assert stopped["process"]["status"] == "stopped"


def test_thread_tokens_are_derived_and_verified() -> None:
    authority = TokenAuthority("s" * 32)
    token = authority.thread_token("thread/with.odd chars")
    caller = authority.identify({"authorization": f"Bearer {token}"})
    assert caller is not None and caller.thread_id == "thread/with.odd chars"
    assert not caller.sees_all
    # Same secret, same token (survives a restart); another secret rejects it.
    assert TokenAuthority("s" * 32).thread_token("thread/with.odd chars") == token
    assert TokenAuthority("t" * 32).identify({"authorization": f"Bearer {token}"}) is None
    forged = token.rsplit(".", 1)[0] + "." + authority.thread_token("x").rsplit(".", 1)[1]
    assert authority.identify({"authorization": f"Bearer {forged}"}) is None


def test_only_loopback_addresses_are_accepted() -> None:
    with pytest.raises(ValueError, match="loopback"):
        ProcessManagerConfig(host="0.0.0.0")
    assert ProcessManagerConfig(host="::1").host == "::1"


async def test_without_a_configured_token_one_is_made_and_kept(tmp_path) -> None:
    import stat

    from mcp_kit import make_config

    from threadspindle.effects.mcp_manager import serve_process_manager

    config = make_config(tmp_path, token=None)
    tokens = []
    for _ in range(2):  # two runs of Spindle: the same secret, so thread tokens stay valid
        async with trio.open_nursery() as nursery:
            manager = await nursery.start(serve_process_manager, config)
            tokens.append(manager.operator_token)
            async with open_client(manager.url, manager.token_for_thread("t")) as client:
                assert (await call(client, "list_processes"))["processes"] == []
            nursery.cancel_scope.cancel()
    path = tmp_path / "data" / "mcp-token"
    assert tokens[0] == tokens[1] == path.read_text().strip()
    assert len(tokens[0]) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
