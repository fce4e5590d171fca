"""The registry: lazy actors, disposal that leaves nothing behind (tasks, timers, agent
processes, open prompts), directory/channel-scoped disposal, the idle sweeper, ticks only
while busy, statistics, and threads sharing one agent server."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest
import trio
from runtime_harness import Chat, running, until

from threadspindle.agents.base import AgentOptions
from threadspindle.agents.claude import ClaudeAdapter
from threadspindle.runtime.core.effect_types import StartAgent
from threadspindle.runtime.core.model import Phase
from threadspindle.runtime.live.listener import Backoff
from threadspindle.testkit.fake_agent import FakeAgentServer, fake_claude_binary


def all_tasks() -> list[trio.lowlevel.Task]:
    found = []

    def walk(task: trio.lowlevel.Task) -> None:
        found.append(task)
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    walk(trio.lowlevel.current_root_task())
    return found


async def test_actors_are_created_lazily_and_reused(tmp_path: Path, autojump_clock) -> None:
    async with running(tmp_path) as rt:
        assert rt.actors() == [] and rt.get("t1") is None
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        actor = rt.get("t1")
        assert actor is not None and rt.get_or_create("t1") is actor
        await chat.say("hello")
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        stats = rt.statistics("t1")
        assert stats.actor_running and stats.listener_running and stats.mailbox_length == 0
        assert stats.log_seq == rt.log.last_seq("t1") > 0
        assert stats.counters.completed == 1 and stats.phase is Phase.IDLE


async def test_dispose_leaves_no_task_timer_or_prompt_behind(
    tmp_path: Path, autojump_clock
) -> None:
    async with running(tmp_path) as rt:
        baseline = len(all_tasks())
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await chat.say("PERMISSION please")
        await until(lambda: bool(rt.snapshot("t1").blockers))
        prompt_key = rt.snapshot("t1").blockers[0].key
        assert len(all_tasks()) > baseline + 3  # actor, reactor, ticker, listener, agent
        assert rt.agents.serving == 1
        assert await rt.dispose("t1")
        await trio.testing.wait_all_tasks_blocked()
        assert len(all_tasks()) == baseline
        assert rt.get("t1") is None and rt.agents.serving == 0
        assert rt.chat.outputs[prompt_key].dismissed  # the button is closed
        state = rt.snapshot("t1")
        assert state.run is None and not state.blockers  # the core saw the agent go
        # Mock time passes: no timer of the thread fires any more.
        committed = rt.log.last_seq("t1")
        await trio.sleep(3600)
        assert rt.log.last_seq("t1") == committed
        # The thread lives on in the store: a new message makes a fresh actor.
        await chat.say("hello again")
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        assert rt.get("t1") is not None
    assert not await rt.dispose("nope")


async def test_a_message_during_disposal_goes_to_a_fresh_actor(
    tmp_path: Path, autojump_clock
) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        await until(lambda: rt.agents.serving == 1)
        old = rt.get("t1")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(rt.dispose, "t1")
            while "t1" not in rt._disposing:  # let the disposal begin
                await trio.sleep(0)
            assert old.closing and not old.done.is_set()  # ... but not end
            nursery.start_soon(chat.say, "hello during disposal")
        await until(lambda: rt.snapshot("t1").counters.completed == 1)
        fresh = rt.get("t1")
        assert fresh is not None and fresh is not old and not old.running
        assert rt.agents.serve_calls == 2  # the old agent stopped, a new one started


async def test_dispose_for_directory_is_scoped_by_directory_and_channel(
    tmp_path: Path, autojump_clock
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "sub").mkdir(parents=True)
    b.mkdir()
    async with running(tmp_path) as rt:
        chats = {
            "t-a1": Chat(rt, "t-a1", str(a)),
            "t-a2": Chat(rt, "t-a2", str(a / "sub")),
            "t-a3": Chat(rt, "t-a3", str(a)),
            "t-b": Chat(rt, "t-b", str(b)),
        }
        for thread_id, chat in chats.items():
            rt.get_or_create(thread_id, channel_id="c2" if thread_id == "t-a3" else "c1")
            await chat.start()
        await until(lambda: rt.agents.serving == 4)
        assert sorted(await rt.dispose_for_directory(str(a), channel="c1")) == ["t-a1", "t-a2"]
        assert sorted(rt.actors()) == ["t-a3", "t-b"]
        assert await rt.dispose_for_directory(str(a)) == ["t-a3"]
        await rt.dispose_all()
        assert rt.actors() == [] and rt.agents.serving == 0


async def test_the_idle_sweeper_disposes_idle_threads_only(tmp_path: Path, autojump_clock) -> None:
    async with running(tmp_path, idle_timeout_s=300, sweep_interval_s=60) as rt:
        idle, busy = Chat(rt, "idle", str(tmp_path)), Chat(rt, "busy", str(tmp_path))
        await idle.start()
        await busy.start()
        await busy.say("PERMISSION keeps me busy")
        await until(lambda: bool(rt.snapshot("busy").blockers))
        await trio.sleep(400)
        assert rt.get("idle") is None and rt.get("busy") is not None
        assert rt.agents.serving == 1


async def test_ticks_come_only_while_a_run_is_active(tmp_path: Path, autojump_clock) -> None:
    async with running(tmp_path) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start()
        actor = rt.get("t1")
        await trio.sleep(100)
        assert actor.skipped_ticks == 0  # idle: no timer at all
        await chat.say("SILENT agent")  # says nothing: only the core's idle timeout ends it
        await until(lambda: rt.snapshot("t1").run is None, timeout=2000)
        policy = rt.snapshot("t1").policy
        assert any("No output from the agent" in t for t in rt.chat.texts("t1", "notice"))
        # About one tick a second until the timeout; the no-op ones are not logged.
        assert policy.turn_idle_timeout_s - 5 <= actor.skipped_ticks <= policy.turn_idle_timeout_s
        ticks_logged = [e for e in rt.log.read("t1") if e.action.kind == "tick"]
        assert 1 <= len(ticks_logged) <= 3
        skipped = actor.skipped_ticks
        await trio.sleep(100)
        assert actor.skipped_ticks == skipped


async def test_threads_share_one_agent_server_connection(tmp_path: Path, autojump_clock) -> None:
    server = FakeAgentServer()
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        async with running(tmp_path, adapter_factory=server.adapter) as rt:
            chats = [Chat(rt, f"t{n}", str(tmp_path)) for n in (1, 2)]
            for chat in chats:
                await chat.start("shared")
            for chat in chats:
                await chat.say(f"hello from {chat.thread_id}")
            await until(
                lambda: all(rt.snapshot(c.thread_id).counters.completed == 1 for c in chats)
            )
            sessions = {rt.snapshot(c.thread_id).conversation.session_id for c in chats}
            assert len(sessions) == 2 and None not in sessions  # one session per thread
            for chat in chats:  # each thread got its own session's output only
                assert rt.chat.texts(chat.thread_id, "text") == ["Hello from fake agent."]
            assert server.connections == 1
            assert server.router.statistics().routed == 2 * 4  # session, 2 deltas, end
            assert server.router.statistics().unrouted == 0
        assert server.router.statistics().subscribers == 0  # disposal released both sessions
        nursery.cancel_scope.cancel()


@pytest.mark.timeout(60)
async def test_the_real_claude_adapter_on_a_fake_process_then_disposal_kills_it(
    tmp_path: Path,
) -> None:
    binary = fake_claude_binary(str(tmp_path), delay_s=0.05)
    me = psutil.Process(os.getpid())

    def live_children() -> set[int]:
        """This process's live descendants, minus any another test left behind."""
        alive = set()
        for p in me.children(recursive=True):
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    alive.add(p.pid)
            except psutil.NoSuchProcess:
                pass
        return alive - before

    before: set[int] = set()
    before = live_children()

    def claude(start: StartAgent, thread_id: str) -> ClaudeAdapter:
        return ClaudeAdapter(AgentOptions(binary=binary, start_timeout_s=20, stop_grace_s=2))

    async with running(tmp_path, adapter_factory=claude) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start("claude")
        await chat.say("hello")
        await until(lambda: rt.snapshot("t1").counters.completed == 1, timeout=30, step=0.02)
        assert "Hello from fake agent." in "".join(rt.chat.texts("t1", "text"))
        session = rt.snapshot("t1").conversation.session_id
        assert session
        agent_tree = live_children()
        assert len(agent_tree) >= 1  # the fake claude process (and its shell, if any)
        # Abort a slow stream in-band: the process stays, the next prompt runs normally.
        await chat.say("SLOW please")
        await until(lambda: "chunk2" in "".join(rt.chat.texts("t1", "text")), 30, 0.02)
        await chat.abort()
        await until(lambda: rt.snapshot("t1").run is None, timeout=30, step=0.02)
        await chat.say("and now?")
        await until(lambda: rt.snapshot("t1").counters.completed == 2, timeout=30, step=0.02)
        assert rt.statistics("t1").listener_starts == 1
        assert live_children() == agent_tree  # the same process served every turn
        await rt.dispose("t1")
        assert live_children() == set()  # disposal left no process of the tree


@pytest.mark.timeout(60)
async def test_a_crashed_agent_process_is_respawned_resuming_its_session(tmp_path: Path) -> None:
    binary = fake_claude_binary(str(tmp_path), delay_s=0.02)

    def claude(start: StartAgent, thread_id: str) -> ClaudeAdapter:
        return ClaudeAdapter(AgentOptions(binary=binary, start_timeout_s=20, stop_grace_s=2))

    async with running(tmp_path, adapter_factory=claude) as rt:
        chat = Chat(rt, "t1", str(tmp_path))
        await chat.start("claude")
        await chat.say("hello")
        await until(lambda: rt.snapshot("t1").counters.completed == 1, timeout=30, step=0.02)
        session = rt.snapshot("t1").conversation.session_id
        await chat.say("CRASH now")  # the process exits with code 3 mid-turn
        await until(lambda: rt.snapshot("t1").counters.listener_starts == 2, 30, 0.02)
        assert rt.snapshot("t1").counters.failed == 1
        await chat.say("are you back?")
        await until(lambda: rt.snapshot("t1").counters.completed == 2, timeout=30, step=0.02)
        assert rt.snapshot("t1").conversation.session_id == session  # resumed, not new
        assert rt.statistics("t1").listener_starts == 2


def test_backoff_doubles_to_its_cap_resets_when_healthy_and_limits_starts() -> None:
    backoff = Backoff()
    now, delays = 0.0, []
    for _ in range(8):  # an agent that dies at once, every time
        backoff.record_start(now)
        delay = backoff.delay(now, uptime_s=0.1)
        delays.append(delay)
        now += delay
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0]
    assert all(d <= 60.0 for d in delays) and max(delays) >= 30.0
    starts = []
    now = 0.0
    backoff = Backoff(initial_s=0.1, max_s=0.1)  # tiny delays: only the window cap holds
    for _ in range(12):
        backoff.record_start(now)
        starts.append(now)
        now += backoff.delay(now, uptime_s=0.0)
    assert all(b - a >= 60.0 - 1e-9 for a, b in zip(starts, starts[5:], strict=False))
    backoff.record_start(now)
    assert backoff.delay(now + 120, uptime_s=120.0) == backoff.initial_s  # healthy: reset


async def test_cancelling_the_user_of_the_runtime_still_parks_threads_in_order(
    tmp_path, autojump_clock
):
    """Ctrl-C cancels the code around the runtime: its own tasks must still park every
    thread (the run stopped with a notice, the queue kept) before they are cancelled."""
    from threadspindle.runtime.core.model import Policy
    from threadspindle.runtime.live.log import EventLog
    from threadspindle.runtime.live.registry import open_runtime
    from threadspindle.testkit.fake_agent import FakeAgentWorld, Step
    from threadspindle.testkit.fake_chat import RenderWorld
    from threadspindle.testkit.thread_script import ThreadScript

    world = FakeAgentWorld(script=lambda text: [Step("sleep", seconds=1e6)])
    chat = RenderWorld()
    log = EventLog(tmp_path / "log.sqlite3").open()
    s = ThreadScript("t1")
    with trio.CancelScope() as outside:
        async with open_runtime(
            log=log,
            renderer_factory=chat.renderer,
            adapter_factory=world.factory,
            policy=Policy(allowed_roots=("/",)),
        ) as rt:
            await rt.post(s.start("fake", "/tmp", "/tmp"))
            await rt.post(s.user("long job"))
            await rt.post(s.queue("next"))
            await rt.wait_quiet()
            await trio.sleep(1)
            outside.cancel()
            await trio.sleep_forever()
    state = rt.snapshot("t1")
    log.close()
    assert state.parked and state.run is None
    assert [q.text for q in state.queue] == ["next"]
    notices = [e.text for t, _, e in chat.effects if getattr(e, "kind", "") == "notice"]
    assert any("Spindle stopped this run" in n for n in notices)
    assert world.live() == []


async def test_enrich_and_on_dispose_hooks(tmp_path, autojump_clock):
    from threadspindle.runtime.core.actions import StatusRequested
    from threadspindle.runtime.core.effect_types import ReplyToCommand
    from threadspindle.runtime.core.model import Policy
    from threadspindle.runtime.live.log import EventLog
    from threadspindle.runtime.live.registry import open_runtime
    from threadspindle.testkit.fake_agent import FakeAgentWorld
    from threadspindle.testkit.fake_chat import RenderWorld
    from threadspindle.testkit.thread_script import ThreadScript

    disposed: list[str] = []

    async def on_dispose(thread_id: str) -> None:
        disposed.append(thread_id)

    def enrich(action):
        if isinstance(action, StatusRequested):
            return action.replace(processes=("web: running",))
        return action

    chat = RenderWorld()
    log = EventLog(tmp_path / "log.sqlite3").open()
    async with open_runtime(
        log=log,
        renderer_factory=chat.renderer,
        adapter_factory=FakeAgentWorld().factory,
        policy=Policy(allowed_roots=("/",)),
        enrich=enrich,
        on_dispose=on_dispose,
    ) as rt:
        for name in ("a", "b"):
            await rt.post(ThreadScript(name).status())
        await rt.wait_quiet()
        await rt.dispose("a")
    log.close()
    replies = [e.text for t, _, e in chat.effects if isinstance(e, ReplyToCommand)]
    assert all(r.endswith("Processes:\n  web: running") for r in replies) and len(replies) == 2
    assert disposed == ["a"]  # disposal while running; not the shutdown of "b"
