"""agents/base/session_router.py: one shared connection's messages fanned out by session
(the opencode server's event bus; the testkit's shared fake server)."""

from __future__ import annotations

import trio

from threadspindle.agents.base.session_router import RouterStatistics, SessionRouter


def drained(receive: trio.MemoryReceiveChannel[str]) -> list[str]:
    out = []
    while True:
        try:
            out.append(receive.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            return out


async def test_messages_go_to_their_sessions_subscribers_only() -> None:
    router: SessionRouter[str] = SessionRouter(buffer=2)
    a, b = router.subscribe("sA"), router.subscribe("sB")
    also_a = router.subscribe("sA")  # two threads resuming one session both hear it
    assert router.route("sA", "a1") and router.route("sB", "b1")
    assert not router.route("sC", "c1")  # nobody listens: unrouted
    assert not router.route(None, "x")  # no session: unrouted
    assert drained(a.receive) == ["a1"] and drained(also_a.receive) == ["a1"]
    assert drained(b.receive) == ["b1"]
    for n in range(3):  # b's buffer holds 2: the third is dropped for b alone
        router.route("sB", f"b{n + 2}")
    assert drained(b.receive) == ["b2", "b3"]
    router.broadcast(lambda sid: f"resync {sid}")
    assert drained(a.receive) == ["resync sA"] and drained(b.receive) == ["resync sB"]
    router.unsubscribe(also_a)
    assert router.statistics() == RouterStatistics(routed=5, unrouted=2, dropped=1, subscribers=2)
    router.close()  # the connection is gone: every subscriber's channel ends, once
    assert drained(a.receive) == [] and drained(b.receive) == []
    with trio.fail_after(1):
        assert [m async for m in a.receive] == []
    late = router.subscribe("sA")  # after the end: closed from the start
    assert [m async for m in late.receive] == []
    assert router.statistics().subscribers == 0
