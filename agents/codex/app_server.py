"""The codex app-server's process and connection for one thread: ``codex app-server``
spawned, the JSON-RPC handshake (``initialize``/``initialized``, then ``thread/start``, or
``thread/resume``/``thread/fork`` of the stored session), and the reader of its output.

``AppServerMixin`` is that part of ``CodexAdapter`` (``adapter.py``, which keeps the state
and the turns). The reader stamps every event with the run of the codex turn it belongs to
(``turn/started`` -> the run of the ``prompt`` that started it), hands answers to the
``RpcPeer`` (a ``turn/steer``'s to the adapter, in stream order), refuses the requests
nobody in a thread can answer, and ends a turn still open when the process exits with
``TurnAborted`` (exit code, stderr tail).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from threadspindle.agents.base.adapter import AgentAdapter, AgentStartError
from threadspindle.agents.base.jsonrpc import (
    METHOD_NOT_FOUND,
    RpcClosed,
    RpcError,
    RpcId,
    RpcPeer,
    RpcResponse,
)
from threadspindle.agents.base.parsing import ParsedLine
from threadspindle.agents.base.process import spawn_agent
from threadspindle.agents.codex.launch import ensure_codex_home, launch_spec
from threadspindle.agents.codex.parser import AppServerParser
from threadspindle.agents.codex.shell_turn import ShellTurn
from threadspindle.effects.process import ManagedProcess
from threadspindle.effects.process_tree import ProcessTree
from threadspindle.runtime.core.agent_events import (
    AgentError,
    AgentEvent,
    SessionStarted,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import StartAgent

__all__ = ["CLIENT_INFO", "RPC_TIMEOUT_S", "AppServerMixin"]

CLIENT_INFO = {"name": "spindle", "title": "Spindle", "version": "0.1.0"}
RPC_TIMEOUT_S = 30.0  # the handshake's requests


class AppServerMixin(AgentAdapter):
    """The app-server half of ``CodexAdapter``: its start and its reader. What it uses of
    the adapter is declared here and kept by the adapter (``__init__``)."""

    approval_policy: str
    sandbox: str
    _proc: ManagedProcess | None
    _tree: ProcessTree
    _rpc: RpcPeer | None
    _parser: AppServerParser
    _thread_id: str | None
    _model: str | None
    _ready: trio.Event
    _gone: trio.Event
    _run_id: str | None
    _tasks: trio.Nursery | None
    _turn_runs: dict[str, str]
    _ended_turns: set[str]
    _active_turn: str | None
    _turn_pending: bool
    _turn_idle: trio.Event
    _stopping: bool
    _steers: dict[RpcId, tuple[str, str]]
    _shell: ShellTurn | None

    if TYPE_CHECKING:  # implemented by CodexAdapter (codex/adapter.py)

        async def _send(self, run_id: str | None, event: AgentEvent) -> None: ...

        def _stderr_tail(self, proc: ManagedProcess | None) -> str: ...

        async def _steer_answered(self, steer: tuple[str, str], response: RpcResponse) -> None: ...

    async def _serve_app_server(self, start: StartAgent, task_status: Any) -> None:
        """Ready (``task_status.started()``) once the thread is started or resumed; a start
        that fails raises ``AgentStartError`` instead (the listener reports it)."""
        spec = launch_spec(self.options, workdir=start.workdir, per_turn=False)
        try:
            ensure_codex_home(self.options)
            proc = await spawn_agent(spec)
        except OSError as exc:
            self._gone.set()
            raise AgentStartError(f"cannot start codex ({spec.argv[0]}): {exc}") from exc
        self._proc = proc
        self._tree.sample(proc.pid)
        self._parser = AppServerParser(request_prefix=f"codex-{proc.pid}")
        self._parser.model = self._model
        rpc = RpcPeer(proc.write_line, name="codex")
        self._rpc = rpc
        failure: Exception | None = None
        try:
            async with trio.open_nursery() as nursery:
                self._tasks = nursery
                nursery.start_soon(proc.pump_stderr)
                nursery.start_soon(self._read_app_server, proc, rpc)
                try:
                    with trio.fail_after(self.options.start_timeout_s):
                        await self._handshake(rpc, start)
                except (RpcError, RpcClosed, trio.TooSlowError) as exc:
                    # Stop it; the readers then end and the nursery closes without a group.
                    failure = exc
                    await proc.stop(grace=self.options.stop_grace_s)
                else:
                    self._tree.sample(proc.pid)
                    self._ready.set()
                    task_status.started()
            if failure is not None:
                tail = self._stderr_tail(proc)
                message = f"codex app-server did not start: {failure!r}"
                raise AgentStartError(message + (f"\n{tail}" if tail else "")) from failure
        finally:
            self._tasks = None
            self._ready.set()  # wake prompt() callers; they see the process is gone
            self._gone.set()
            rpc.close("codex exited")
            with trio.CancelScope(shield=True):
                await proc.stop(grace=self.options.stop_grace_s)
                await self._tree.terminate(grace=self.options.stop_grace_s)

    async def _handshake(self, rpc: RpcPeer, start: StartAgent) -> None:
        await rpc.request(
            "initialize",
            {"clientInfo": CLIENT_INFO, "capabilities": {"experimentalApi": False}},
            timeout=RPC_TIMEOUT_S,
        )
        await rpc.notify("initialized")
        common: dict[str, Any] = {
            "cwd": start.workdir,
            "approvalPolicy": self.approval_policy,
            "sandbox": self.sandbox,
        }
        if self._model:
            common["model"] = self._model
        instruction = start.system_instruction or self.options.system_instruction
        if instruction:
            common["developerInstructions"] = instruction
        result: Any = None
        if start.session_id:
            # A fork (/fork, /btw) is a new thread continuing a copy of the stored one.
            method, verb = ("thread/fork", "fork") if start.fork else ("thread/resume", "resume")
            try:
                result = await rpc.request(
                    method,
                    {"threadId": start.session_id, "excludeTurns": True, **common},
                    timeout=RPC_TIMEOUT_S,
                )
            except RpcError as exc:
                # The stored session is gone (another HOME, deleted): say so, start afresh.
                await self._send(
                    self._run_id,
                    AgentError(
                        message=f"could not {verb} codex session {start.session_id}: {exc.message}"
                    ),
                )
        if result is None:
            result = await rpc.request("thread/start", common, timeout=RPC_TIMEOUT_S)
        thread = result.get("thread") if isinstance(result, dict) else None
        thread_id = thread.get("id") if isinstance(thread, dict) else None
        if not isinstance(thread_id, str):
            raise RpcClosed(f"thread/start gave no thread id: {result!r}")
        self._thread_id = thread_id
        model = result.get("model")
        if isinstance(model, str):
            self._model = model
            self._parser.model = model
        await self._send(self._run_id, SessionStarted(session_id=thread_id, model=self._model))

    async def _read_app_server(self, proc: ManagedProcess, rpc: RpcPeer) -> None:
        async for line in proc.stdout_lines():
            shell = self._shell
            if shell is not None and shell.take(line):
                continue  # the `!` command's own turn: told to its caller, not as events
            parsed = self._parser.feed(line)
            await self._handle_parsed(parsed, rpc)
        rpc.close("codex closed its output")
        code = await proc.wait()
        open_turn = self._active_turn is not None or self._turn_pending
        if open_turn:
            run_id = self._turn_runs.get(self._active_turn or "", self._run_id)
            self._active_turn = None
            self._turn_idle.set()
            reason = "stopped" if self._stopping else "codex exited"
            with trio.CancelScope(shield=True):
                await self._send(
                    run_id,
                    TurnAborted(reason=reason, exit_code=code, stderr_tail=self._stderr_tail(proc)),
                )
        self._gone.set()  # after the abort: whoever waits for the end sees the turn's end too

    async def _handle_parsed(self, parsed: ParsedLine, rpc: RpcPeer) -> None:
        if parsed.response is not None:
            steer = self._steers.pop(parsed.response.id, None)
            if steer is not None:
                await self._steer_answered(steer, parsed.response)
            else:
                rpc.resolve(parsed.response)
        turn = parsed.turn_id
        if parsed.turn_started and turn is not None and turn not in self._ended_turns:
            if self._active_turn is None:
                self._active_turn = turn
                self._turn_idle = trio.Event()
            if self._run_id is not None:
                self._turn_runs.setdefault(turn, self._run_id)
        run_id = self._turn_runs.get(turn, self._run_id) if turn else self._run_id
        for event in parsed.events:
            if isinstance(event, TurnCompleted) and event.session_id is None:
                event = event.model_copy(update={"session_id": self._thread_id})
            await self._send(run_id, event)
        if parsed.turn_ended and turn is not None:
            self._ended_turns.add(turn)
            if self._active_turn == turn:
                self._active_turn = None
                self._turn_idle.set()
        request = parsed.refuse
        if request is not None:
            try:
                await rpc.respond_error(
                    request.id, METHOD_NOT_FOUND, f"spindle does not handle {request.method}"
                )
            except RpcClosed:
                pass
