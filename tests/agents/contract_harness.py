"""What the adapter contract (``test_adapter_contract.py``) drives its adapters with.

- ``rig``: one adapter kind made ready to run offline: its fake model server started on
  127.0.0.1, ``AgentOptions`` with a private HOME (``testkit/genuine_clis.py``), and what a
  plain turn answers. The adapter itself is always made the runtime's way,
  ``adapter_class(name)(options)``.
- ``Driven``: one adapter served in a nursery through the runtime's agent port only
  (``serve``/``prompt``/``interrupt``/``answer_*``/``stop``), with every stamped event it
  emitted, in order, and whether ``serve`` has returned.
- ``ProcessWatch``: every process the adapter started, found with psutil from outside (the
  guards ``spawn_agent`` puts between Spindle and each CLI, their sessions, everything
  below them), so the contract never asks an adapter for its internals.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import trio

from threadspindle.agents import adapter_class
from threadspindle.agents.base import AgentOptions
from threadspindle.runtime.core.agent_events import (
    AgentEvent,
    TextDelta,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent
from threadspindle.runtime.live.ports import AgentPort, StampedEvent
from threadspindle.testkit import command_agent
from threadspindle.testkit.fake_model.anthropic import FakeAnthropic
from threadspindle.testkit.fake_model.base import FakeModelServer, RecordedRequest
from threadspindle.testkit.fake_model.gemini import FakeGeminiServer
from threadspindle.testkit.fake_model.openai_chat import HELLO, OpenAIChatFake
from threadspindle.testkit.fake_model.openai_responses import OpenAIResponsesFake
from threadspindle.testkit.genuine_clis import (
    claude_options,
    codex_options,
    gemini_options,
    opencode_options,
)

__all__ = ["Driven", "ProcessWatch", "Rig", "rig", "serving"]

TURN_TIMEOUT_S = 60.0  # generous: a loaded 2-core machine; every wait is on an event
START_TIMEOUT_S = 120.0  # opencode's first start takes 8 s at load 6, Gemini's ~5 s
SLOW_CHUNKS = 40
SLOW_DELAY_S = 0.25  # a slow stream lasts 10 s: interrupts and kills land mid-stream


@dataclass
class Rig:
    """One adapter kind set up to run offline."""

    agent: str
    options: AgentOptions
    workdir: Path
    # The fake model's HTTP server (its request log shows what the model was sent); None for
    # the echo demo, which has no model.
    model: FakeModelServer | None
    answer: Callable[[str], str]  # the text a plain (no tool, not slow) turn answers
    binary: str = ""  # what the guard runs (in its command line), for the process watch

    def model_requests(self) -> list[RecordedRequest]:
        return list(self.model.requests) if self.model is not None else []


def _fake_model_answer(prompt: str) -> str:
    return HELLO  # every fake model's plain answer ("Hello from fake model.")


def _echo_answer(prompt: str) -> str:
    return " ".join(prompt.split())  # the echo demo says the prompt back, word by word


@contextmanager
def rig(agent: str, tmp_path: Path) -> Iterator[Rig]:
    """``agent`` set up in ``tmp_path`` (a private HOME, a workdir), its fake model started
    for the duration. Permissions are configured the way a user would, so that a harmless
    ``pwd`` runs unasked and ``touch`` asks (the contract's tool and permission steps)."""
    home = tmp_path / "home"
    workdir = tmp_path / "work"
    home.mkdir()
    workdir.mkdir()
    fake: FakeAnthropic | FakeGeminiServer | OpenAIResponsesFake | OpenAIChatFake | None
    if agent == "claude":
        fake = FakeAnthropic(slow_chunks=SLOW_CHUNKS, slow_delay=SLOW_DELAY_S)
        fake.start()
        # Claude Code's default permission mode asks before a command that changes files.
        options = claude_options(fake.base_url, home)
        http: FakeModelServer | None = fake
    elif agent == "codex":
        fake = OpenAIResponsesFake(slow_chunks=SLOW_CHUNKS, slow_delay=SLOW_DELAY_S)
        fake.start()
        # codex's default policy (on-request): the model asks when it wants a command run
        # outside the sandbox, which the fake does for "TOUCHTEST ask". ("untrusted", which
        # asks before any unknown command, cannot be chosen through the options: codex
        # 0.169 refuses `-c approval_policy="untrusted"` at start-up.)
        options = codex_options(fake.base_url, home)
        http = fake.server
    elif agent == "gemini":
        fake = FakeGeminiServer(slow_chunks=SLOW_CHUNKS, slow_delay=SLOW_DELAY_S)
        fake.start()
        # Gemini's default approval mode asks before a command that is not read-only.
        options = gemini_options(fake.base_url, home)
        http = fake
    elif agent == "opencode":
        fake = OpenAIChatFake(slow_chunks=SLOW_CHUNKS, slow_delay=SLOW_DELAY_S)
        fake.start()
        # The user's opencode config decides (the adapter made by name asks for nothing).
        bash_rules = {"*": "allow", "touch *": "ask"}
        options = opencode_options(fake.base_url, home, bash=bash_rules)
        http = fake.server
    elif agent == "command":
        fake = OpenAIChatFake(slow_chunks=SLOW_CHUNKS, slow_delay=SLOW_DELAY_S)
        fake.start()
        script = Path(command_agent.__file__)
        options = AgentOptions(
            binary=f"{sys.executable} -I {script}",
            env=(("COMMAND_AGENT_BASE_URL", fake.base_url),),
            home=str(home),
            stop_grace_s=2.0,
        )
        http = fake.server
    elif agent == "echo":
        fake, http, options = None, None, AgentOptions(home=str(home))
    else:
        raise AssertionError(f"no rig for agent {agent!r}")
    answer = _echo_answer if agent == "echo" else _fake_model_answer
    try:
        yield Rig(agent, options, workdir, http, answer, binary=options.binary or "")
    finally:
        if fake is not None:
            fake.stop()


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class ProcessWatch:
    """The processes an adapter started, seen from outside with psutil.

    Every CLI runs under a guard (``effects/process_guard.py``), a child of this process and
    the leader of a session of its own; the CLI is the guard's child. ``look()`` records the
    guards started since the watch began whose command line runs ``binary`` (``psutil``
    objects: a recycled pid is never mistaken for one of them), every process below them,
    and their sessions. ``left()`` is what of all that still runs, also any process in one
    of those sessions that escaped the tree."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self._me = psutil.Process()
        self._before = {(p.pid, p.create_time()) for p in self._me.children(recursive=True)}
        self.seen: dict[tuple[int, float], psutil.Process] = {}
        self.sessions: set[int] = set()

    def guards(self) -> list[psutil.Process]:
        """The live guards of this adapter's CLI."""
        found = []
        for proc in self._me.children():
            try:
                if (proc.pid, proc.create_time()) in self._before or not _alive(proc):
                    continue
                cmdline = proc.cmdline()
            except psutil.Error:
                continue
            if any("process_guard" in part for part in cmdline) and self.binary in " ".join(
                cmdline
            ):
                found.append(proc)
        return found

    def look(self) -> list[psutil.Process]:
        """Record what runs now; the CLIs (the guards' own children) running now."""
        clis = []
        for guard in self.guards():
            try:
                below = guard.children(recursive=True)
                self.sessions.add(os.getsid(guard.pid))
                clis += [c for c in guard.children() if _alive(c)]
            except (psutil.Error, ProcessLookupError):
                continue
            for proc in [guard, *below]:
                try:
                    self.seen[(proc.pid, proc.create_time())] = proc
                except psutil.Error:
                    pass
        return clis

    def identity(self) -> set[tuple[int, float]]:
        """Which CLI processes run now (pid and start time)."""
        return {(p.pid, p.create_time()) for p in self.look()}

    def left(self) -> list[str]:
        """Every recorded process still running, and any process of a recorded session."""
        alive = {p.pid: p for p in self.seen.values() if _alive(p)}
        for proc in psutil.process_iter():
            try:
                if os.getsid(proc.pid) in self.sessions and _alive(proc):
                    alive[proc.pid] = proc
            except (psutil.Error, ProcessLookupError, PermissionError):
                continue
        described = []
        for pid, proc in sorted(alive.items()):
            try:
                described.append(f"{pid} {' '.join(proc.cmdline())[:120]}")
            except psutil.Error:
                continue
        return described


@dataclass
class Driven:
    """One adapter, served through the agent port, and what it emitted."""

    rig: Rig
    adapter: AgentPort
    watch: ProcessWatch
    events: list[StampedEvent] = field(default_factory=list)
    served: trio.Event = field(default_factory=trio.Event)  # serve() returned
    serve_error: BaseException | None = None
    stopped: bool = False
    session_id: str | None = None  # the conversation's session, as the core would keep it
    _changed: trio.Event = field(default_factory=trio.Event)

    async def emit(self, stamped: StampedEvent) -> None:
        self.events.append(stamped)
        # The core keeps the session a completed turn names, and resumes it later.
        if isinstance(stamped.event, TurnCompleted) and stamped.event.session_id:
            self.session_id = stamped.event.session_id
        self._changed.set()

    async def wait_for(
        self, what: str, match: Callable[[StampedEvent], bool], timeout: float = TURN_TIMEOUT_S
    ) -> StampedEvent:
        """The first event ``match`` accepts, waiting for it (never polling a clock)."""
        with trio.move_on_after(timeout):
            while True:
                for stamped in self.events:
                    if match(stamped):
                        return stamped
                self._changed = trio.Event()
                await self._changed.wait()
        raise AssertionError(f"{self.rig.agent}: no {what} within {timeout:g} s; got {self.log()}")

    def log(self) -> str:
        return "\n  " + "\n  ".join(
            f"{s.run_id} {s.session_id} {s.event!r}"[:300] for s in self.events[-30:]
        )

    def of_run(self, run_id: str) -> list[AgentEvent]:
        return [s.event for s in self.events if s.run_id == run_id]

    def text_of(self, run_id: str) -> str:
        return "".join(e.text for e in self.of_run(run_id) if isinstance(e, TextDelta))

    def deltas(self, run_id: str) -> int:
        return sum(isinstance(e, TextDelta) for e in self.of_run(run_id))

    async def prompt(self, run_id: str, text: str) -> None:
        """A turn, as the core asks for it (``PromptAgent`` with the conversation's session)."""
        await self.adapter.prompt(
            PromptAgent(
                run_id=run_id,
                text=text,
                agent=self.rig.agent,
                workdir=str(self.rig.workdir),
                session_id=self.session_id,
            )
        )

    async def end_of(self, run_id: str, timeout: float = TURN_TIMEOUT_S) -> StampedEvent:
        return await self.wait_for(
            f"end of run {run_id}",
            lambda s: s.run_id == run_id and isinstance(s.event, TurnCompleted | TurnAborted),
            timeout,
        )

    async def turn(self, run_id: str, text: str) -> StampedEvent:
        """Prompt and wait for that turn's end (completed or aborted)."""
        await self.prompt(run_id, text)
        end = await self.end_of(run_id)
        self.watch.look()
        return end

    async def wait_served(self, what: str, timeout: float = 30.0) -> None:
        with trio.move_on_after(timeout):
            await self.served.wait()
        assert self.served.is_set(), f"{self.rig.agent}: serve() did not return {what}"
        assert self.serve_error is None, f"{self.rig.agent}: serve() raised {self.serve_error!r}"


@asynccontextmanager
async def serving(
    rig: Rig, watch: ProcessWatch, session_id: str | None = None
) -> AsyncIterator[Driven]:
    """A new adapter made by name, started (resuming ``session_id``) as the runtime starts
    one; on the way out it is stopped if the script did not, and ``serve`` must return."""
    adapter = adapter_class(rig.agent)(rig.options)
    driven = Driven(rig, adapter, watch, session_id=session_id)
    start = StartAgent(agent=rig.agent, workdir=str(rig.workdir), session_id=session_id)

    async def serve(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await adapter.serve(start, driven.emit, task_status)
        except Exception as exc:  # reported by the script, which expects a clean return
            driven.serve_error = exc
            raise
        finally:
            driven.served.set()

    async with trio.open_nursery() as nursery:
        with trio.fail_after(START_TIMEOUT_S):
            await nursery.start(serve)
        watch.look()
        try:
            yield driven
        finally:
            with trio.CancelScope(shield=True):
                if not driven.stopped and not driven.served.is_set():
                    with trio.move_on_after(30):
                        await adapter.stop()
                with trio.move_on_after(30):
                    await driven.served.wait()
                if not driven.served.is_set():
                    nursery.cancel_scope.cancel()  # reported by the script's own check
