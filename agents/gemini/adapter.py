"""The Gemini CLI adapter: one long-lived ``gemini --acp`` process per thread (ACP v1,
JSON-RPC 2.0 over stdio), with ``gemini -p -o stream-json`` per turn as the fall-back.

The launch spec is in ``launch.py``; the CLI runs with a settings home of the thread's own
(``home.py``: its MCP token is in no file another thread's agent can see), removed when
``serve`` ends, whose session store is shared with every other thread. The wire formats are
read by ``parser.py`` (ACP) and ``stream_parser.py`` (``-p``); requests and answers go through
the shared ``RpcPeer``; ``retries.py`` turns the CLI's retry notices into events.

Protocol (CLI 0.61.0, ``docs/agents.md``): ``initialize``, then ``session/new {cwd,
mcpServers}`` or, to resume, ``session/load {sessionId, ...}`` (guarded against the
same-minute bug; a failed load falls back to a new session and says so). One
``session/prompt`` per turn; its *response* ends the turn. Interrupt is the
``session/cancel`` notification: the prompt then answers ``stopReason: cancelled`` and the
process stays usable. Permission requests (``session/request_permission``) are answered
with the option of kind ``allow_once`` or ``reject_once``. Gemini has no question tool over
ACP, so ``answer_question`` has nothing to answer.

Invariants: every event is stamped with the run id of the last ``prompt`` and the session
id; the first event of a turn after (re)connecting is ``SessionStarted``; a turn that is
open when the process ends gets exactly one ``TurnAborted`` (exit code, stderr tail); agent
requests we do not serve get an error response at once, so the CLI never waits on us;
``stop`` leaves no process of the tree alive (psutil-confirmed by ``ManagedProcess.stop``).
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import uuid
from collections.abc import Awaitable
from typing import Any

import trio

from threadspindle.agents.base.adapter import AgentAdapter, AgentStartError
from threadspindle.agents.base.jsonrpc import METHOD_NOT_FOUND, RpcClosed, RpcPeer, RpcResponse
from threadspindle.agents.base.launch import prompt_text
from threadspindle.agents.base.options import AgentOptions
from threadspindle.agents.base.parsing import AgentStatistics, ParserStats
from threadspindle.agents.base.process import spawn_agent
from threadspindle.agents.gemini.home import ThreadHome, avoid_same_minute_collision
from threadspindle.agents.gemini.launch import launch_spec, prompt_fits_argv, stdout_room
from threadspindle.agents.gemini.parser import AcpParser
from threadspindle.agents.gemini.retries import DEBUG_LOG_ENV, DebugLogWatch, retry_event
from threadspindle.agents.gemini.stream_parser import StreamJsonParser
from threadspindle.effects.process import LineReader, ManagedProcess
from threadspindle.runtime.core.agent_events import (
    AgentError,
    AgentEvent,
    SessionStarted,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import PromptAgent, StartAgent
from threadspindle.runtime.live.ports import EmitEvent, StampedEvent

__all__ = ["DEFAULT_MAX_ATTEMPTS", "GeminiAdapter"]

logger = logging.getLogger(__name__)

# The first try and AgentOptions.max_retries retries (5-30 s apart); "fetch failed" (nothing
# listening) is not retried at all (home.py), so a dead server fails in seconds.
DEFAULT_MAX_ATTEMPTS = AgentOptions().max_retries + 1
ACP_PROTOCOL_VERSION = 1
RESUME_FAILED_EXIT = 42  # gemini -p -r <unknown session>; also "no input" (below)
# The CLI waits 500 ms for the first bytes of a piped stdin, then runs with none and exits 42
# saying this. On a loaded machine its event loop can come back after the timer is due and
# fire it before reading the bytes that are there: the prompt was not read, so it is fed
# again to a new process (at most this many times).
NO_INPUT_SAID = "No input provided via stdin"
STDIN_TRIES = 3
NOT_ACCEPTING = "the Gemini CLI is not accepting input"


class GeminiAdapter(AgentAdapter):
    name = "gemini"

    def __init__(
        self,
        options: AgentOptions,
        *,
        max_attempts: int | None = None,
        interrupt_grace_s: float = 5.0,
        load_settle_s: float = 2.0,
    ) -> None:
        super().__init__(options)
        # The CLI's maxAttempts counts the first try: options.max_retries + 1.
        self.max_attempts = options.max_retries + 1 if max_attempts is None else max_attempts
        self.interrupt_grace_s = interrupt_grace_s
        self.load_settle_s = load_settle_s
        servers = tuple(s.name for s in options.mcp_servers)
        self.stats = ParserStats()  # both modes' parsers count here
        self.parser = AcpParser(mcp_servers=servers, stats=self.stats)
        self.run_id: str | None = None
        self.session_id: str | None = None
        self.model: str | None = None
        self.resumed = False  # session/load succeeded
        self.stopped_clean: bool | None = None
        self.exit_code: int | None = None
        self._emit: EmitEvent | None = None
        self._proc: ManagedProcess | None = None
        self._nursery: trio.Nursery | None = None
        self._start: StartAgent | None = None
        self._home: ThreadHome | None = None  # the thread's own GEMINI_CLI_HOME
        self._peer: RpcPeer | None = None
        self._turn_done = trio.Event()
        self._turn_done.set()
        self._turn_started_at = 0.0
        self._announce = True  # SessionStarted goes out with the next turn's first event
        self._notice: str | None = None  # told the user with the next turn (a failed resume)
        self._instruct = False  # prepend the system instruction to the next prompt
        self._commands_listed = trio.Event()
        self._stopping = False
        self._interrupted = False
        # per-turn fall-back
        self._turns_in: trio.MemorySendChannel[PromptAgent] | None = None

    # --- AgentAdapter ----------------------------------------------------------------------
    @property
    def turn_open(self) -> bool:
        return not self._turn_done.is_set()

    async def serve(
        self, start: StartAgent, emit: EmitEvent, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        self._emit = emit
        self._start = start
        self.session_id = start.session_id
        self.model = start.model or self.options.model
        self._home = ThreadHome(self.options, max_attempts=self.max_attempts)
        try:
            if self.options.per_turn:
                await self._serve_per_turn(start, task_status)
            else:
                await self._serve_acp(start, task_status)
        finally:
            self._home.remove()  # its processes are gone: each mode stops its own

    @property
    def settings_home(self) -> str | None:
        """The thread's own ``GEMINI_CLI_HOME`` while the adapter serves."""
        return str(self._home.path) if self._home is not None else None

    async def prompt(self, prompt: PromptAgent) -> None:
        if self.options.per_turn:
            if self._turns_in is None:
                raise AgentStartError("the Gemini adapter is not serving")
            await self._turns_in.send(prompt)
            return
        self._live_process()
        peer = self._live_peer()
        if self.turn_open:
            # One prompt per session at a time: end the old turn before starting the next.
            await self.interrupt(self.run_id or "")
            with trio.move_on_after(self.interrupt_grace_s):
                await self._turn_done.wait()
        if prompt.model and prompt.model != self.model:
            await self._set_model(prompt.model)
        self.run_id = prompt.run_id
        self._interrupted = False
        rpc_id = peer.new_id()  # known before it is sent: its response ends the turn
        self.parser.begin_turn(rpc_id)
        self._turn_done = trio.Event()
        self._turn_started_at = trio.current_time()
        await self._turn_preamble()
        instruction = (
            (prompt.system_instruction or self.options.system_instruction)
            if self._instruct
            else None
        )
        self._instruct = False
        text = prompt_text(prompt.text, prompt.attachments, system_instruction=instruction)
        params = {"sessionId": self.session_id, "prompt": [{"type": "text", "text": text}]}
        await self._send(peer.send_request("session/prompt", params, rpc_id=rpc_id))

    async def interrupt(self, run_id: str) -> None:
        if run_id and run_id != self.run_id:
            return  # a stale interrupt for a turn that already ended
        if self.options.per_turn:
            proc = self._proc
            if proc is not None and proc.returncode is None:
                self._interrupted = True
                proc.signal(signal.SIGINT)  # the CLI exits 0 at once, without a result line
            return
        proc, peer = self._proc, self._peer
        if proc is None or peer is None or proc.returncode is not None or not self.turn_open:
            return
        self._interrupted = True
        await self._send(peer.notify("session/cancel", {"sessionId": self.session_id}))
        # ACP: after a cancel the client answers every pending permission "cancelled"; the
        # CLI would otherwise keep waiting for the answer and never end the turn.
        for request in self.parser.take_all_requests():
            cancelled = {"outcome": {"outcome": "cancelled"}}
            await self._send(peer.respond(request.rpc_id, cancelled))
        if self._nursery is not None:
            self._nursery.start_soon(self._escalate_interrupt, self._turn_done)

    async def answer_permission(self, request_id: str, allow: bool) -> None:
        pending = self.parser.take_request(request_id)
        proc, peer = self._proc, self._peer
        if pending is None or proc is None or peer is None or proc.returncode is not None:
            return
        option = pending.allow_option if allow else pending.reject_option
        outcome = (
            {"outcome": "selected", "optionId": option} if option else {"outcome": "cancelled"}
        )
        await self._send(peer.respond(pending.rpc_id, {"outcome": outcome}))

    async def answer_question(self, request_id: str, answer: str | None) -> None:
        # Gemini CLI 0.61 asks no questions over ACP; nothing is waiting for an answer.
        logger.debug("gemini: no question %s to answer", request_id)

    async def stop(self) -> None:
        self._stopping = True
        if self._turns_in is not None:
            await self._turns_in.aclose()
        proc = self._proc
        if proc is None:
            self.stopped_clean = True
            return
        if proc.returncode is None:
            if self.turn_open and not self.options.per_turn:
                try:
                    await self.interrupt(self.run_id or "")
                except AgentStartError:
                    pass
                with trio.move_on_after(min(2.0, self.options.stop_grace_s)):
                    await self._turn_done.wait()
            try:
                await proc.close_stdin()  # the CLI exits 0 when stdin closes ...
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
            # ... at once, unless an MCP connection keeps it alive: then SIGINT it soon.
            with trio.move_on_after(min(1.0, self.options.stop_grace_s)):
                await proc.wait()
        self.stopped_clean = await proc.stop(grace=self.options.stop_grace_s)

    def statistics(self) -> AgentStatistics:
        return self.stats.snapshot()

    # --- long-lived: gemini --acp ----------------------------------------------------------
    async def _serve_acp(self, start: StartAgent, task_status: Any) -> None:
        assert self._home is not None
        if start.session_id:
            avoid_same_minute_collision(self._home.shared, start.session_id)
        home = str(self._home.path)
        spec = launch_spec(self.options, start.workdir, home, model=self.model)
        # In ACP mode the CLI tells its retries only to its debug log (retries.py).
        watch = None if DEBUG_LOG_ENV in spec.env else DebugLogWatch(home)
        if watch is not None:
            spec = dataclasses.replace(spec, env={**spec.env, DEBUG_LOG_ENV: watch.path})
        try:
            proc = await spawn_agent(spec)
        except OSError as exc:
            if watch is not None:
                watch.close()
            raise AgentStartError(f"cannot start {spec.argv[0]}: {exc}") from exc
        self._proc = proc
        peer = self._peer = RpcPeer(proc.write_line, name="the Gemini CLI")
        reader_done = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._pump_stderr, proc)
                if watch is not None:
                    nursery.start_soon(watch.follow, self._on_cli_log_line)
                nursery.start_soon(self._read_acp, proc, peer, reader_done)
                try:
                    with trio.fail_after(self.options.start_timeout_s):
                        await self._handshake(start)
                except (trio.TooSlowError, AgentStartError) as exc:
                    tail = "\n".join(proc.stderr_tail)
                    raise AgentStartError(f"gemini --acp did not start: {exc}\n{tail}") from exc
                task_status.started()
                await reader_done.wait()
                with trio.move_on_after(5.0):
                    self.exit_code = await proc.wait()
                nursery.cancel_scope.cancel()
        finally:
            self._nursery = None
            if proc.returncode is None:
                with trio.CancelScope(shield=True):
                    self.stopped_clean = await proc.stop(grace=self.options.stop_grace_s)
            if watch is not None:
                watch.close()

    async def _handshake(self, start: StartAgent) -> None:
        capabilities = {"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}
        await self._call(
            "initialize",
            {
                "protocolVersion": ACP_PROTOCOL_VERSION,
                "clientCapabilities": capabilities,
                "clientInfo": {"name": "spindle", "version": "0.1"},
            },
        )
        # MCP servers are in the thread's settings file; nothing to pass in-band.
        base = {"cwd": start.workdir, "mcpServers": []}
        if start.session_id:
            self._commands_listed = trio.Event()
            response = await self._call(
                "session/load", {**base, "sessionId": start.session_id}, raise_error=False
            )
            if response.error is None:
                self.resumed = True
                self.session_id = start.session_id
                # The history is replayed as updates right after the response; let it pass
                # (it ends with the command list) so none of it lands in the first turn.
                with trio.move_on_after(self.load_settle_s):
                    await self._commands_listed.wait()
                self._after_session(response.result)
                return
            detail = _error_detail(response.error)
            self._notice = (
                f"Could not resume Gemini session {start.session_id} ({detail}); "
                "started a new session."
            )
        response = await self._call("session/new", base)
        result = response.result if isinstance(response.result, dict) else {}
        session_id = result.get("sessionId")
        if not isinstance(session_id, str):
            raise AgentStartError(f"session/new returned no sessionId: {result!r}")
        self.session_id = session_id
        self._instruct = bool(start.system_instruction or self.options.system_instruction)
        self._after_session(result)

    def _after_session(self, result: Any) -> None:
        self.parser.session_id = self.session_id
        self._announce = True
        models = result.get("models") if isinstance(result, dict) else None
        if self.model is None and isinstance(models, dict):
            current = models.get("currentModelId")
            self.model = current if isinstance(current, str) else None

    async def _read_acp(self, proc: ManagedProcess, peer: RpcPeer, done: trio.Event) -> None:
        try:
            async for line in proc.stdout_lines():
                read = self.parser.feed(line)
                for event in read.events:
                    await self._emit_event(event)
                if read.response is not None:
                    peer.resolve(read.response)
                if read.turn_ended:
                    self._turn_done.set()
                if read.replay_ended:
                    self._commands_listed.set()
                if read.refuse is not None:
                    try:
                        await peer.respond_error(
                            read.refuse.id, METHOD_NOT_FOUND, "not supported by Spindle"
                        )
                    except RpcClosed:
                        pass  # the process is going away; serve reports its exit
        finally:
            with trio.CancelScope(shield=True):
                await self._process_gone(proc, peer)
                done.set()

    async def _process_gone(self, proc: ManagedProcess, peer: RpcPeer) -> None:
        peer.close(f"the Gemini CLI exited (rc {proc.returncode})")  # wakes every caller
        if self.turn_open:
            with trio.move_on_after(2.0):
                self.exit_code = await proc.wait()
            await self._emit_event(
                TurnAborted(
                    reason="interrupted" if self._interrupted else "the Gemini CLI exited",
                    exit_code=proc.returncode,
                    stderr_tail="\n".join(list(proc.stderr_tail)[-10:]),
                )
            )
            self.parser.end_turn()
            self._turn_done.set()

    async def _escalate_interrupt(self, turn_done: trio.Event) -> None:
        """``session/cancel`` is acknowledged in milliseconds; if the turn still has not
        ended after the grace period, SIGINT the process (its exit then ends the turn)."""
        with trio.move_on_after(self.interrupt_grace_s):
            await turn_done.wait()
            return
        proc = self._proc
        if proc is not None and proc.returncode is None and turn_done is self._turn_done:
            logger.warning("gemini: session/cancel not acknowledged; interrupting the process")
            proc.signal(signal.SIGINT)

    async def _set_model(self, model: str) -> None:
        """Switch the model between turns in place (``session/set_model``)."""
        params = {"sessionId": self.session_id, "modelId": model}
        response = await self._call("session/set_model", params, raise_error=False)
        if response.error is None:
            self.model = model
            self._announce = True  # the next turn's SessionStarted carries the new model
        else:
            self._notice = f"Could not switch to model {model}: {_error_detail(response.error)}"

    # --- per-turn fall-back: gemini -p -o stream-json --------------------------------------
    async def _serve_per_turn(self, start: StartAgent, task_status: Any) -> None:
        send, receive = trio.open_memory_channel[PromptAgent](16)
        self._turns_in = send
        self._instruct = bool(start.system_instruction or self.options.system_instruction)
        task_status.started()
        async with receive:
            async for prompt in receive:
                await self._run_turn(start, prompt)
                if self._stopping:
                    break

    async def _run_turn(self, start: StartAgent, prompt: PromptAgent) -> None:
        self.run_id = prompt.run_id
        self._interrupted = False
        self._turn_done = trio.Event()
        self._turn_started_at = trio.current_time()
        try:
            resuming = self.session_id
            outcome = await self._turn_process(start, prompt)
            for _ in range(STDIN_TRIES - 1):
                if outcome is None or self._interrupted or not _stdin_missed(*outcome):
                    break
                logger.warning("the Gemini CLI did not read the prompt from stdin: again")
                outcome = await self._turn_process(start, prompt)
            if outcome is not None and resuming and _resume_refused(*outcome):
                # ``-r`` of a session the CLI does not have: exit 42 before any output.
                # Start a new session with the same prompt and say so.
                self.session_id = None
                self._notice = f"Could not resume Gemini session {resuming}; started a new session."
                outcome = await self._turn_process(start, prompt)
            if outcome is None:
                return
            parser, proc = outcome
            if not parser.finished:
                reason = "interrupted" if self._interrupted else "the Gemini CLI exited"
                await self._emit_event(
                    TurnAborted(
                        reason=reason + " without a result",
                        exit_code=proc.returncode,
                        stderr_tail="\n".join(list(proc.stderr_tail)[-10:]),
                    )
                )
        finally:
            self._turn_done.set()

    async def _turn_process(
        self, start: StartAgent, prompt: PromptAgent
    ) -> tuple[StreamJsonParser, ManagedProcess] | None:
        """Run one ``gemini -p`` process to its end, emitting its events; None when it
        could not be started (reported as the turn's end)."""
        instruction = (
            (prompt.system_instruction or self.options.system_instruction)
            if self._instruct
            else None
        )
        text = prompt_text(prompt.text, prompt.attachments, system_instruction=instruction)
        new_id = None if self.session_id else str(uuid.uuid4())
        assert self._home is not None
        if self.session_id:
            # ``-r`` starts the session's chat file anew, named by the minute, before it
            # reads the history back: a process that exits in between (no prompt read from
            # stdin, a kill) leaves the history wiped when that name is the old file's.
            avoid_same_minute_collision(self._home.shared, self.session_id)
        spec = launch_spec(
            self.options,
            prompt.workdir or start.workdir,
            str(self._home.path),
            model=prompt.model or self.model,
            per_turn_prompt=text,
            resume=self.session_id,
            new_session_id=new_id,
        )
        parser = StreamJsonParser(
            mcp_servers=tuple(s.name for s in self.options.mcp_servers), stats=self.stats
        )
        on_stdin = not prompt_fits_argv(text)  # too long for the command line
        try:
            proc = await spawn_agent(spec, stdin=on_stdin, stdout_bytes=stdout_room(text))
        except OSError as exc:
            await self._emit_event(TurnAborted(reason=f"cannot start gemini: {exc}"))
            return None
        self._proc = proc
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump_stderr, proc)
                if on_stdin:
                    nursery.start_soon(proc.feed_stdin, text)
                async for line in proc.stdout_lines():
                    for event in parser.feed(line).events:
                        if isinstance(event, SessionStarted):
                            self.session_id = event.session_id
                            self._instruct = False
                        await self._emit_event(event)
                        if isinstance(event, SessionStarted) and self._notice:
                            notice, self._notice = self._notice, None
                            await self._emit_event(AgentError(message=notice, retryable=False))
                with trio.move_on_after(5.0):
                    self.exit_code = await proc.wait()
                nursery.cancel_scope.cancel()
        finally:
            if proc.returncode is None:
                with trio.CancelScope(shield=True):
                    self.stopped_clean = await proc.stop(grace=self.options.stop_grace_s)
        return parser, proc

    # --- plumbing --------------------------------------------------------------------------
    async def _turn_preamble(self) -> None:
        # SessionStarted first: the core drops other events of a session it does not know.
        if self._announce and self.session_id:
            self._announce = False
            await self._emit_event(SessionStarted(session_id=self.session_id, model=self.model))
        if self._notice:
            notice, self._notice = self._notice, None
            await self._emit_event(AgentError(message=notice, retryable=False))

    async def _emit_event(self, event: AgentEvent) -> None:
        if isinstance(event, TurnCompleted) and event.duration_ms is None and self.run_id:
            ms = int((trio.current_time() - self._turn_started_at) * 1000)
            event = event.model_copy(update={"duration_ms": ms})
        if self._emit is not None:
            await self._emit(StampedEvent(self.run_id, self.session_id, event))

    async def _pump_stderr(self, proc: ManagedProcess) -> None:
        """Keep the stderr tail; a retry notice during a turn becomes a retryable error."""
        if proc.proc.stderr is None:
            return
        async for line in LineReader(proc.proc.stderr, max_line=64 * 1024):
            if not line.strip():
                continue
            proc.stderr_tail.append(line)
            await self._on_cli_log_line(line)

    async def _on_cli_log_line(self, line: str) -> None:
        """A line of the CLI's stderr or debug log: a retry notice during a turn becomes a
        retryable error."""
        if self.turn_open:
            retry = retry_event(line, max_retries=self.max_attempts - 1)
            if retry is not None:
                await self._emit_event(retry)

    async def _call(
        self, method: str, params: dict[str, Any], *, raise_error: bool = True
    ) -> RpcResponse:
        """A request to the CLI and its response; ``AgentStartError`` when the CLI exits
        first or (``raise_error``) answers with an error."""
        peer = self._live_peer()
        try:
            response = await peer.call(method, params)
        except RpcClosed as exc:
            code = self._proc.returncode if self._proc is not None else None
            raise AgentStartError(f"{method}: the Gemini CLI exited (rc {code})") from exc
        if response.error is not None and raise_error:
            raise AgentStartError(f"{method} failed: {_error_detail(response.error)}")
        return response

    def _live_peer(self) -> RpcPeer:
        if self._peer is None:
            raise AgentStartError("the Gemini CLI process is not running")
        return self._peer

    def _live_process(self) -> ManagedProcess:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            raise AgentStartError("the Gemini CLI process is not running")
        return proc

    async def _send(self, sending: Awaitable[object]) -> None:
        """Await a write to the CLI; one that no longer reads is ``AgentStartError`` (its
        exit is reported by serve, not here)."""
        try:
            await sending
        except RpcClosed as exc:
            raise AgentStartError(NOT_ACCEPTING) from exc


def _resume_refused(parser: StreamJsonParser, proc: ManagedProcess) -> bool:
    """``gemini -r`` with an unknown session: exit 42, "Error resuming session", no init.
    (Not the same exit for a prompt not read from stdin: the session is fine.)"""
    said = "\n".join(proc.stderr_tail)
    return parser.session_id is None and (
        "Error resuming session" in said
        or (proc.returncode == RESUME_FAILED_EXIT and NO_INPUT_SAID not in said)
    )


def _stdin_missed(parser: StreamJsonParser, proc: ManagedProcess) -> bool:
    """The CLI gave up waiting for the prompt on stdin before reading it (``STDIN_TRIES``)."""
    return parser.session_id is None and NO_INPUT_SAID in "\n".join(proc.stderr_tail)


def _error_detail(error: dict[str, Any]) -> str:
    message = str(error.get("message") or "error")
    data = error.get("data")
    if isinstance(data, dict) and isinstance(data.get("details"), str):
        return f"{message}: {data['details']}"
    return message
