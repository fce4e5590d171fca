"""The Claude Code adapter: one long-lived ``claude -p`` stream-json process per thread.

The launch spec and the wire format of what we write are in ``launch.py`` (the MCP config
goes in a file of the thread's own ``PrivateDir``, removed when the adapter is done), the
reading in ``parser.py``, the past sessions in ``sessions.py``, steering a running turn in
``steering.py``, the answers to permission prompts and questions in ``approvals.py``.
Requests and answers go through the shared ``RpcPeer`` in Claude Code's control framing.

Protocol (CLI 2.1.197, ``docs/agents.md``): the host sends an ``initialize`` control request,
then one ``{"type":"user",...}`` line per prompt; the CLI answers each with ``system/init``
... ``result``. Interrupt is the in-band ``control_request`` ``interrupt``: the process stays
alive and the turn ends with an aborted ``result``. Permission prompts arrive as
``control_request`` ``can_use_tool`` and are answered with a ``control_response``
(allow + original input, or deny); ``AskUserQuestion`` arrives the same way and its answer
goes back as ``updatedInput.answers``. Any other control request is refused at once so the
CLI never waits on us. After a new session's first completed turn the adapter asks the CLI
for the session's title (``titles.py``: ``generate_session_title``), a ``TitleChanged``.

Invariants: one prompt is in the CLI at a time (it would merge prompts written while busy
into one turn), so every event is stamped with the run the CLI is working on; a turn that is
open when the process ends gets exactly one ``TurnAborted`` (exit code, stderr tail);
``stop`` leaves no process of the tree alive (psutil-confirmed by ``ManagedProcess.stop``).

``per_turn=True`` falls back to one process per prompt (``--resume`` the last session),
same wire format, the process closed after its ``result`` (``per_turn.py``).

A session the CLI does not have (``/claude resume <unknown id>``: it exits 1 at start with
"No conversation found with session ID ...") is not an error that a restart could mend: the
adapter starts the same process again without ``--resume`` (a new session), never tries that
id again, and tells the thread once with an ``AgentError`` stamped with the first prompt's
run (an event stamped with no run is dropped by the core as stale).
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import signal
import time
from collections.abc import Awaitable
from typing import Any

import trio

from threadspindle.agents.base.adapter import AgentAdapter, AgentStartError
from threadspindle.agents.base.jsonrpc import METHOD_NOT_FOUND, RpcClosed, RpcPeer
from threadspindle.agents.base.launch import PrivateDir, prompt_text
from threadspindle.agents.base.options import AgentOptions
from threadspindle.agents.base.parsing import AgentStatistics
from threadspindle.agents.base.process import spawn_agent
from threadspindle.agents.claude.approvals import ApprovalsMixin
from threadspindle.agents.claude.launch import (
    CONTROL,
    DEFAULT_BINARY,
    launch_spec,
    mcp_config,
    prompt_message,
)
from threadspindle.agents.claude.parser import (
    ClaudeStreamParser,
    is_unknown_session,
)
from threadspindle.agents.claude.per_turn import PerTurnMixin
from threadspindle.agents.claude.steering import SteeringMixin
from threadspindle.agents.claude.titles import SessionTitling, ask_session_title
from threadspindle.effects.process import ManagedProcess
from threadspindle.runtime.core.agent_events import (
    AgentError,
    AgentEvent,
    SessionStarted,
    TextDelta,
    TitleChanged,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent
from threadspindle.runtime.core.model import AgentCapabilities
from threadspindle.runtime.live.ports import EmitEvent, StampedEvent

__all__ = ["ClaudeAdapter"]

RESULT_GRACE_S = 2.0  # after an exit, how long stdout may still drain
INTERRUPT_GRACE_S = 10.0  # in-band interrupt unanswered for this long: SIGINT
UNKNOWN_SESSION_NOTICE = (
    "Could not resume Claude Code session {} (not found); started a new session."
)
NOT_ACCEPTING = "the Claude Code process is not accepting input"


class ClaudeAdapter(PerTurnMixin, SteeringMixin, ApprovalsMixin, AgentAdapter):
    """Claude Code for one thread (see the module docstring)."""

    name = "claude"

    def __init__(self, options: AgentOptions) -> None:
        super().__init__(options)
        self.parser = ClaudeStreamParser()
        self.session_id: str | None = None
        self.run_id: str | None = None  # the run of the last event emitted
        # The run whose prompt the CLI is working on. Only one prompt is written at a time:
        # the CLI merges prompts written while it is busy into one turn (one `result` for
        # several runs), so later ones are held here until the current turn's `result`.
        self.current_run: str | None = None
        self.held: collections.deque[PromptAgent] = collections.deque()
        self.stopped_clean: bool | None = None  # set by stop(): psutil saw no process left
        self.processes_started = 0
        self.first_event_latency_s: float | None = None  # last prompt -> first event
        self.interrupt_grace_s = INTERRUPT_GRACE_S
        self.interrupt_escalations = 0  # in-band interrupts that needed SIGINT
        self._proc_nursery: trio.Nursery | None = None
        self._proc: ManagedProcess | None = None
        self._emit: EmitEvent | None = None
        self._start: StartAgent | None = None
        self._model: str | None = None
        self._prompt_sent_at: float | None = None
        self._peer: RpcPeer | None = None  # the control protocol of the current process
        self._turn_done = trio.Event()
        self._stopping = False
        self._private: PrivateDir | None = None  # the MCP config lives here
        self._mcp_config: str | None = None
        self._queued_runs: set[str] = set()  # per-turn prompts waiting for their process
        self._prompts_in: trio.MemorySendChannel[PromptAgent] | None = None
        self._prompts_out: trio.MemoryReceiveChannel[PromptAgent] | None = None
        self.unknown_sessions: set[str] = set()  # ids the CLI could not resume: not retried
        self._notice: str | None = None  # told the thread with the next prompt's run
        self._startup_error = ""  # the error of a `result` that came before any prompt
        # Steering (long-lived only): user lines written mid-turn, in order, as (steer id or
        # None for a prompt, text) until the CLI replays them (--replay-user-messages).
        self._unreplayed: collections.deque[tuple[str | None, str]] = collections.deque()
        self._steers_open: dict[str, str] = {}  # steer id -> run, written and not replayed
        self._refused_steers: set[str] = set()  # refused while the CLI still holds them
        self._interrupt_next_turn = False  # the CLI runs held steers after an interrupt
        self._discarding = False  # ... in a turn whose words are dropped (steering.py)
        self._carried: TurnCompleted | None = None  # a turn end the steers' turn continues
        # /compact is a prompt of Claude Code's own ("/compact"), in either mode.
        self.capabilities = AgentCapabilities(steer=not options.per_turn, compact=True, fork=True)
        # A new session (long-lived) is titled once, from its first prompts (enough text for
        # the CLI to title), after a completed turn; a resumed one has its title already.
        self._titling = SessionTitling(asked=options.per_turn)
        self._fork_of: str | None = None  # forked at the next spawn (--fork-session)
        self._command_runs: set[str] = set()  # runs that are a CLI command (/compact)
        self._command_output = ""  # what the CLI's command printed (local-command-stdout)

    # lifecycle -----------------------------------------------------------------------------
    async def serve(
        self,
        start: StartAgent,
        emit: EmitEvent,
        task_status: Any = trio.TASK_STATUS_IGNORED,
    ) -> None:
        self._emit = emit
        self._start = start
        self.session_id = start.session_id
        self._fork_of = start.session_id if start.fork else None
        self._model = start.model or self.options.model
        try:
            if self.options.per_turn:
                await self._serve_per_turn(start, task_status)
            else:
                await self._serve_long_lived(start, task_status)
        finally:
            with trio.CancelScope(shield=True):
                if self._proc is not None and self._proc.returncode is None:
                    self.stopped_clean = await self._proc.stop(grace=self.options.stop_grace_s)
            self._remove_mcp_config()

    async def _serve_long_lived(self, start: StartAgent, task_status: Any) -> None:
        self._titling.asked = self._titling.asked or bool(start.session_id)
        if self.session_id in self.unknown_sessions:
            self.session_id = None
        while True:
            session = self.session_id
            proc = await self._spawn(start.workdir, session)
            async with trio.open_nursery() as nursery:
                _, reader_done, not_ready = await self._attach(nursery, proc)
                if not_ready is None:
                    task_status.started()
                    await self._wait_exit(proc, reader_done)
                nursery.cancel_scope.cancel()
            if not_ready is None:
                return
            if not self._forget_unknown_session(session, not_ready):
                raise AgentStartError(not_ready)
            # The CLI has no such session: the same start again, in a new session. At most
            # once, since there is no session id left to forget.
            with trio.CancelScope(shield=True):
                await proc.stop(grace=self.options.stop_grace_s)

    def _forget_unknown_session(self, session: str | None, not_ready: str) -> bool:
        """True when the start failed because the CLI has no session ``session``: that id
        is not tried again, and the thread is told with the next prompt."""
        if not session or not is_unknown_session(f"{not_ready}\n{self._startup_error}"):
            return False
        self.unknown_sessions.add(session)
        if self.session_id == session:
            self.session_id = None
        self._notice = UNKNOWN_SESSION_NOTICE.format(session)
        return True

    async def _spawn(
        self,
        workdir: str,
        session_id: str | None,
        *,
        model: str | None = None,
        system_instruction: str | None = None,
    ) -> ManagedProcess:
        assert self._start is not None
        binary = self.options.binary or DEFAULT_BINARY
        if shutil.which(binary) is None:
            raise AgentStartError(f"Claude Code not found: {binary!r} is not an executable")
        if not os.path.isdir(workdir):
            raise AgentStartError(f"working directory {workdir!r} does not exist")
        spec = launch_spec(
            self.options,
            workdir=workdir,
            session_id=session_id,
            model=model or self._start.model,
            system_instruction=system_instruction or self._start.system_instruction,
            mcp_config_path=(mcp_path := self._write_mcp_config()),
            fork=session_id is not None and session_id == self._fork_of,
        )
        self._mcp_config = mcp_path
        proc = await spawn_agent(spec)
        self._proc = proc
        self._peer = RpcPeer(proc.write_line, CONTROL, name="Claude Code")
        self.processes_started += 1
        self._startup_error = ""
        # A new process knows nothing of the last one's steers (its exit ended their run).
        self._unreplayed.clear()
        self._steers_open.clear()
        self._refused_steers.clear()
        self._interrupt_next_turn = False
        self._discarding = False
        self._carried = None
        self.parser.process_started()
        self._turn_done = trio.Event()
        return proc

    async def _attach(
        self, nursery: trio.Nursery, proc: ManagedProcess
    ) -> tuple[RpcPeer, trio.Event, str | None]:
        """Read the new process's output in ``nursery`` (which holds it) and send
        ``initialize``: its peer, the event set once its stdout is read to the end, and why
        it never got ready (None when it is ready)."""
        self._proc_nursery = nursery
        nursery.start_soon(proc.pump_stderr)
        reader_done = trio.Event()
        peer = self._live_peer()
        nursery.start_soon(self._read_stdout, proc, peer, reader_done)
        return peer, reader_done, await self._initialize(proc, peer)

    async def _initialize(self, proc: ManagedProcess, peer: RpcPeer) -> str | None:
        """Send ``initialize`` and wait for its ack: the CLI is then ready for prompts.
        Returns why it is not ready (None when it is)."""
        acked = False

        async def closed_at_exit() -> None:
            # An exit closes stdout, and the reader the peer; unless a grandchild holds it.
            await proc.wait()
            peer.close(f"Claude Code exited with code {proc.returncode}")

        with trio.move_on_after(self.options.start_timeout_s):
            async with trio.open_nursery() as race:
                race.start_soon(closed_at_exit)
                try:
                    await peer.call("initialize")
                    acked = True
                except RpcClosed:
                    pass  # stdin closed, or the process exited: it is not ready
                race.cancel_scope.cancel()
        if acked:
            return None
        with trio.move_on_after(1.0):
            await proc.wait()  # a dying CLI: let its exit code and stderr arrive
        await trio.sleep(0.1)
        tail = "\n".join(proc.stderr_tail)
        state = (
            f"exited with code {proc.returncode}"
            if proc.returncode is not None
            else f"did not answer within {self.options.start_timeout_s:.0f} s"
        )
        return f"Claude Code {state} before it was ready: {tail}".strip()

    async def _wait_exit(self, proc: ManagedProcess, reader_done: trio.Event) -> None:
        """Wait for the process, let stdout drain, close an open turn as aborted."""
        code = await proc.wait()
        # A grandchild may still hold stdout open: do not wait on it for ever.
        with trio.move_on_after(RESULT_GRACE_S):
            await reader_done.wait()
        await trio.sleep(0.05)  # the last stderr lines
        reason = "interrupted" if self._stopping else "the agent process exited mid-turn"
        tail = "\n".join(proc.stderr_tail)[-2000:]
        open_runs = [self.current_run] if self.current_run else []
        open_runs += [p.run_id for p in self.held]
        self.current_run = None
        self.held.clear()
        for run_id in open_runs:  # each open turn ends exactly once, in order
            await self._emit_event(
                TurnAborted(reason=reason, exit_code=code, stderr_tail=tail), run_id
            )
        self._turn_done.set()

    # the stdout reader ---------------------------------------------------------------------
    async def _read_stdout(self, proc: ManagedProcess, peer: RpcPeer, done: trio.Event) -> None:
        try:
            async for line in proc.stdout_lines():
                parsed = self.parser.feed(line)
                if '"isReplay"' in line:
                    await self._replayed(line)
                events = parsed.events
                if self.current_run in self._command_runs:
                    events = self._command_events(line, parsed.turn_ended, events)
                continues = parsed.turn_ended and bool(self._steers_open)
                if continues:
                    events = await self._continue_turn(events)
                elif self._discarding:
                    events = self._discard_continuation(events, parsed.turn_ended)
                elif self._carried is not None and parsed.turn_ended:
                    events = [self._merge_carried(e) for e in events]
                for event in events:
                    await self._emit_event(event)
                if parsed.response is not None:
                    peer.resolve(parsed.response)
                try:
                    if self._interrupt_next_turn and any(
                        isinstance(e, SessionStarted) for e in events
                    ):
                        # The steers' own turn after an interrupt: it is interrupted too.
                        self._interrupt_next_turn = False
                        await self._control(peer.send_request("interrupt"))
                    if parsed.refuse is not None:
                        await peer.respond_error(
                            parsed.refuse.id, METHOD_NOT_FOUND, "not supported by Spindle"
                        )
                    if parsed.turn_ended and not continues:
                        self._maybe_ask_title(peer, events)
                        self.current_run = None
                        self._unreplayed.clear()
                        self._refused_steers.clear()
                        await self._write_next(peer)
                except (RpcClosed, AgentStartError):
                    pass  # stdin is gone: the process is exiting, and _wait_exit reports it
        finally:
            peer.close("Claude Code closed its output")
            done.set()

    def _maybe_ask_title(self, peer: RpcPeer, events: list[AgentEvent]) -> None:
        description = self._titling.due(events)
        if description is not None and self._proc_nursery is not None:
            self._proc_nursery.start_soon(self._ask_title, peer, description)

    async def _ask_title(self, peer: RpcPeer, description: str) -> None:
        title = await ask_session_title(peer, description)
        if title is not None and self._emit is not None:
            # The conversation's, not a run's (that turn is over): stamped with no run.
            await self._emit(StampedEvent(None, self.session_id, TitleChanged(title=title)))

    @property
    def turn_open(self) -> bool:
        return self.current_run is not None or bool(self.held)

    async def _emit_event(self, event: AgentEvent, run_id: str | None = None) -> None:
        """Emit, stamped with ``run_id`` or else the run of the turn the CLI is on."""
        if isinstance(event, SessionStarted):
            self.session_id = event.session_id
            if event.session_id != self._fork_of:
                self._fork_of = None  # the fork has its own session: resume that from now
        if self._prompt_sent_at is not None:
            self.first_event_latency_s = time.monotonic() - self._prompt_sent_at
            self._prompt_sent_at = None
        if run_id is None:
            run_id = self.current_run
            if run_id is None and isinstance(event, TurnCompleted) and event.error:
                self._startup_error = event.error  # e.g. a failed --resume, before any prompt
        if run_id is not None:
            self.run_id = run_id  # a stray line after the turn still belongs to it
        if self.run_id is None:
            # Before any prompt (e.g. the `result` of a failed --resume at start-up): no run
            # to give it to; serve's AgentStartError carries the message.
            self.parser.stats.skip(f"before_first_prompt/{event.type}")
            return
        assert self._emit is not None
        await self._emit(StampedEvent(self.run_id, self.session_id, event))

    # commands from the runtime -------------------------------------------------------------
    async def prompt(self, prompt: PromptAgent) -> None:
        if self.options.per_turn:
            if self._prompts_in is None:
                raise AgentStartError("Claude Code adapter is not serving")
            # Its process starts when the previous one is gone: that one's exit must not be
            # taken for this turn's.
            self._queued_runs.add(prompt.run_id)
            await self._prompts_in.send(prompt)
            return
        self._live_process()
        peer = self._live_peer()
        self.held.append(prompt)
        if self.current_run is None:
            await self._write_next(peer)

    async def _write_next(self, peer: RpcPeer) -> None:
        """Give the CLI the next held prompt (the CLI is idle); set ``_turn_done`` if none."""
        if not self.held:
            self._turn_done.set()
            return
        prompt = self.held.popleft()
        if prompt.model and prompt.model != self._model:
            # Switch models in place between turns (the ack is not awaited).
            await self._control(peer.send_request("set_model", {"model": prompt.model}))
            self._model = prompt.model
        await self._send_prompt(peer, prompt)

    async def _send_prompt(self, peer: RpcPeer, prompt: PromptAgent) -> None:
        if self._notice is not None:
            # Learnt before any run existed (a session that could not be resumed): told
            # with this run, since the core drops an event of no run as stale.
            notice, self._notice = self._notice, None
            await self._emit_event(AgentError(message=notice), prompt.run_id)
        self.current_run = prompt.run_id
        if prompt.command == "compact":
            self._command_runs.add(prompt.run_id)
        else:
            self._titling.prompted(prompt.text)
        self._turn_done = trio.Event()
        self._prompt_sent_at = time.monotonic()
        text = prompt_text(prompt.text, prompt.attachments)
        if not self.options.per_turn:
            self._unreplayed.append((None, text))  # its replay is not a steer's
        await self._control(peer.send(prompt_message(text, prompt.attachments)))

    def _command_events(
        self, line: str, turn_ended: bool, events: list[AgentEvent]
    ) -> list[AgentEvent]:
        """A command's turn (``/compact``) streams no answer: what the CLI printed
        ("Compacted", "Not enough messages to compact.") is shown as its text instead."""
        if "<local-command-stdout>" in line:
            found = re.search(r"<local-command-stdout>(.*?)</local-command-stdout>", line, re.S)
            if found:
                self._command_output = found.group(1).strip()
        if not turn_ended:
            return events
        self._command_runs.discard(self.current_run or "")
        output, self._command_output = self._command_output, ""
        try:
            result = json.loads(line).get("result")
        except (ValueError, AttributeError):
            result = None
        text = (result if isinstance(result, str) else "").strip() or output
        if text and any(isinstance(e, TurnCompleted) and not e.is_error for e in events):
            return [TextDelta(text=text), *events]
        return events

    async def interrupt(self, run_id: str) -> None:
        if run_id in self._queued_runs:
            self._queued_runs.discard(run_id)  # per-turn: never start that process
            return
        for held in self.held:
            if held.run_id == run_id:  # the CLI never saw it: just drop it
                self.held.remove(held)
                await self._emit_event(TurnAborted(reason="interrupted"), run_id)
                return
        if run_id != self.current_run:
            return  # a stale interrupt: that turn is already over
        proc, peer = self._proc, self._peer
        if proc is None or peer is None or proc.returncode is not None:
            return
        await self._control(peer.send_request("interrupt"))
        if self._proc_nursery is not None:
            self._proc_nursery.start_soon(self._escalate_interrupt, proc, run_id)

    async def _escalate_interrupt(self, proc: ManagedProcess, run_id: str) -> None:
        """A CLI that ignores the in-band interrupt gets SIGINT: Claude Code then ends the
        turn with its `result` and exits 0 (the listener starts it again, resuming)."""
        with trio.move_on_after(self.interrupt_grace_s):
            while self.current_run == run_id and proc.returncode is None:
                await trio.sleep(0.05)
            return
        self.interrupt_escalations += 1
        proc.signal(signal.SIGINT)

    async def stop(self) -> None:
        self._stopping = True
        if self._prompts_in is not None:
            await self._prompts_in.aclose()
        proc = self._proc
        if proc is None:
            self.stopped_clean = True
            return
        if proc.returncode is None:
            for held in list(self.held):
                await self.interrupt(held.run_id)
            if self.current_run is not None:
                await self.interrupt(self.current_run)
                with trio.move_on_after(min(2.0, self.options.stop_grace_s)):
                    await self._turn_done.wait()
            try:
                await proc.close_stdin()  # the CLI's own clean exit
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
            with trio.move_on_after(self.options.stop_grace_s):
                await proc.wait()
        self.stopped_clean = await proc.stop(grace=self.options.stop_grace_s)

    def statistics(self) -> AgentStatistics:
        return self.parser.stats.snapshot()

    # plumbing ------------------------------------------------------------------------------
    def _live_process(self) -> ManagedProcess:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            raise AgentStartError("the Claude Code process is not running")
        return proc

    def _live_peer(self) -> RpcPeer:
        if self._peer is None:
            raise AgentStartError("the Claude Code process is not running")
        return self._peer

    async def _control(self, sending: Awaitable[object]) -> None:
        """Await a write of the control protocol; a process that no longer reads is
        ``AgentStartError`` (its exit is reported by serve, not here)."""
        try:
            await sending
        except RpcClosed as exc:
            raise AgentStartError(NOT_ACCEPTING) from exc

    def _write_mcp_config(self) -> str | None:
        if not self.options.mcp_servers:
            return None
        if self._private is None:
            self._private = PrivateDir("spindle-claude-mcp-")
        return self._private.write("mcp.json", json.dumps(mcp_config(self.options)))

    def _remove_mcp_config(self) -> None:
        if self._private is not None:
            self._private.remove()
            self._private = None

    @property
    def private_dir(self) -> str | None:
        """The thread's private directory (its MCP config), while it exists."""
        return self._private.path if self._private is not None else None
