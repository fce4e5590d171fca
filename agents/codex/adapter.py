"""The Codex CLI adapter: ``codex app-server`` (JSON-RPC over stdio) for a thread's whole life,
``codex exec --json`` per turn as the fall-back (``AgentOptions.per_turn``).

Long-lived mode: one process per thread; ``initialize``/``initialized``, then ``thread/start``
(or ``thread/resume`` with the stored session id), one ``turn/start`` per prompt,
``turn/interrupt`` to end a turn in-band (the process stays), approvals answered
``accept``/``decline``. Codex turns are serialised here: a ``turn/start`` sent while a turn
runs would be *injected into* that turn, not queued.

Every event is stamped with the run id of the turn it belongs to (codex turn id -> the run
id of the ``prompt`` that started it) and with the codex thread id as session id. A process
that exits while a turn is open ends that turn with ``TurnAborted`` (exit code, stderr tail).

The app-server's start and the reader of its output are in ``app_server.py``, the per-turn
fall-back in ``exec_turns.py``, a `!` command's turn in ``shell_turn.py``; this module keeps
the state and the turns. The launch spec is in ``launch.py`` (argv, env, ``-c`` overrides),
the wire formats in ``parser.py`` and ``exec_parser.py``, the retry cap in ``retries.py``,
the session listing in ``sessions.py``; requests and answers go through the shared
``RpcPeer``, and every process of the agent's tree is watched by the shared ``ProcessTree``.
The system instruction goes in natively (``developerInstructions`` / ``-c
developer_instructions=...``), the model as a ``thread/start``/``turn/start`` parameter or
``-m``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import trio

from threadspindle.agents.base.adapter import AgentAdapter, AgentStartError
from threadspindle.agents.base.jsonrpc import (
    RpcClosed,
    RpcError,
    RpcId,
    RpcPeer,
    RpcResponse,
)
from threadspindle.agents.base.options import AgentOptions, ConversationInfo
from threadspindle.agents.base.parsing import AgentStatistics, ParserStats
from threadspindle.agents.codex.app_server import RPC_TIMEOUT_S, AppServerMixin
from threadspindle.agents.codex.exec_turns import ExecTurnsMixin
from threadspindle.agents.codex.launch import (
    codex_home,
    config_override,
    turn_input,
)
from threadspindle.agents.codex.parser import AppServerParser
from threadspindle.agents.codex.retries import RetryCap
from threadspindle.agents.codex.sessions import sessions_in
from threadspindle.agents.codex.shell_turn import ShellTurn
from threadspindle.effects.process import ManagedProcess
from threadspindle.effects.process_tree import ProcessTree
from threadspindle.runtime.core.agent_events import (
    AgentError,
    AgentEvent,
    SessionStarted,
    SteerRefused,
    SteerTaken,
    TurnAborted,
    TurnCompleted,
)
from threadspindle.runtime.core.effect_types import (
    PromptAgent,
    RollbackAgent,
    StartAgent,
    SteerAgent,
)
from threadspindle.runtime.core.model import AgentCapabilities
from threadspindle.runtime.live.ports import EmitEvent, StampedEvent

__all__ = ["CodexAdapter"]

TURN_START_TIMEOUT_S = 30.0
INTERRUPT_TIMEOUT_S = 5.0
STDERR_TAIL_LINES = 10
_BACKTRACE_LINE = re.compile(r"^\s*(Stack backtrace:|\d+: <unknown>|at .*:\d+)\s*$")


class CodexAdapter(AppServerMixin, ExecTurnsMixin, AgentAdapter):
    """``codex app-server`` for one thread (``per_turn``: ``codex exec --json`` each turn).

    ``approval_policy`` is codex's own (``untrusted`` asks before any command that is not
    known safe, ``on-request`` lets the model ask, ``never`` never asks); ``sandbox`` is its
    sandbox mode. Unless given here they come from ``-c approval_policy=...`` /
    ``-c sandbox_mode=...`` in ``options.extra_args`` (so a config file can choose), else
    ``on-request`` and ``workspace-write``.
    """

    name = "codex"

    def __init__(
        self,
        options: AgentOptions,
        *,
        approval_policy: str | None = None,
        sandbox: str | None = None,
    ) -> None:
        super().__init__(options)
        self.approval_policy = (
            approval_policy or config_override(options, "approval_policy") or "on-request"
        )
        self.sandbox = sandbox or config_override(options, "sandbox_mode") or "workspace-write"
        self._emit: EmitEvent | None = None
        self._proc: ManagedProcess | None = None
        self._tree = ProcessTree()  # every process of the agent's tree ever seen
        self._rpc: RpcPeer | None = None
        self._parser = AppServerParser()
        self._exec_stats = ParserStats()
        self._thread_id: str | None = None
        self._model: str | None = None
        self._ready = trio.Event()
        self._gone = trio.Event()  # the process (or, per turn, the adapter) ended
        self._run_id: str | None = None
        self._retry_cap = RetryCap(options.max_retries)
        self._tasks: trio.Nursery | None = None  # where an interrupt of our own runs
        self._turn_runs: dict[str, str] = {}
        self._ended_turns: set[str] = set()
        self._active_turn: str | None = None
        self._turn_pending = False  # a turn/start is in flight
        self._turn_idle = trio.Event()
        self._turn_idle.set()
        self._turn_lock = trio.Lock()
        self._stopping = False
        self._announced = False
        self._before_runs: list[AgentEvent] = []
        # per-turn mode
        self._start: StartAgent | None = None
        self._turn_nursery: trio.Nursery | None = None
        self._exec_proc: ManagedProcess | None = None
        self._exec_interrupted = False
        self._exec_run_id: str | None = None  # the run whose codex exec runs now
        self._exec_waiting: set[str] = set()  # prompted runs waiting for the previous turn
        self._exec_cancelled: set[str] = set()  # ... of which interrupted before they ran
        # turn/steer requests on their way: rpc id -> (steer id, run id). Their answers are
        # taken by the reader, in stream order, so a SteerTaken always precedes its turn's end.
        self._steers: dict[RpcId, tuple[str, str]] = {}
        # app-server steers natively (turn/steer); codex exec per turn cannot.
        # thread/revert drops turns for good: rollback, no restore.
        long_lived = not options.per_turn
        self.capabilities = AgentCapabilities(
            steer=long_lived,
            compact=long_lived,
            fork=long_lived,
            rollback=long_lived,
            shell=long_lived,  # thread/shellCommand
        )
        self._shell: ShellTurn | None = None  # a `!` command's turn (thread/shellCommand)

    # -- shared --------------------------------------------------------------------------
    @property
    def session_id(self) -> str | None:
        return self._thread_id

    @property
    def pid(self) -> int | None:
        proc = self._proc or self._exec_proc
        return proc.pid if proc is not None else None

    def statistics(self) -> AgentStatistics:
        stats = self._exec_stats if self.options.per_turn else self._parser.stats
        return stats.snapshot()

    def conversations(self, workdir: str | None = None, limit: int = 25) -> list[ConversationInfo]:
        return sessions_in(codex_home(self.options), workdir, limit)

    async def _send(self, run_id: str | None, event: AgentEvent) -> None:
        if run_id is None and isinstance(event, AgentError) and len(self._before_runs) < 20:
            # No run yet: the core would drop it as stale. It is told with the first prompt.
            self._before_runs.append(event)
            return
        if run_id is not None:
            decision = self._retry_cap.on_event(
                run_id, event, session_id=self._thread_id, model=self._model
            )
            nursery = self._turn_nursery if self.options.per_turn else self._tasks
            if decision.interrupt and nursery is not None:
                nursery.start_soon(self.interrupt, run_id)  # not here: the reader is waiting
            if decision.event is None:
                return
            event = decision.event
        if self._emit is not None:
            await self._emit(StampedEvent(run_id, self._thread_id, event))

    async def _announce(self, run_id: str) -> None:
        """Tell the first run what was learnt before any run existed: the session id (so
        the core stores it even if that turn never completes) and start-up warnings."""
        if self._announced:
            return
        self._announced = True
        if self._thread_id is not None:
            await self._send(run_id, SessionStarted(session_id=self._thread_id, model=self._model))
        early, self._before_runs = self._before_runs, []
        for event in early:
            await self._send(run_id, event)

    def _stderr_tail(self, proc: ManagedProcess | None) -> str:
        if proc is None:
            return ""
        # Rust's "Stack backtrace: / 0: <unknown>" lines would push the real error out.
        lines = [ln for ln in proc.stderr_tail if not _BACKTRACE_LINE.match(ln)]
        return "\n".join(lines[-STDERR_TAIL_LINES:])

    async def serve(
        self,
        start: StartAgent,
        emit: EmitEvent,
        task_status: Any = trio.TASK_STATUS_IGNORED,
    ) -> None:
        if self._stopping:
            raise AgentStartError("stopped before it started")
        self._emit = emit
        self._start = start
        self._thread_id = start.session_id
        self._model = start.model or self.options.model
        self._parser.model = self._model
        if self.options.per_turn:
            await self._serve_per_turn(task_status)
        else:
            await self._serve_app_server(start, task_status)

    async def stop(self) -> None:
        self._stopping = True
        if self.options.per_turn:
            if self._exec_proc is not None:
                self._tree.sample(self._exec_proc.pid)
                self._exec_interrupted = True
                await self._exec_proc.stop(grace=self.options.stop_grace_s)
            await self._tree.terminate(grace=self.options.stop_grace_s)
            self._gone.set()
            return
        proc = self._proc
        if proc is None:
            self._gone.set()
            return
        self._tree.sample(proc.pid)
        with trio.CancelScope(shield=True):
            if self._active_turn is not None and self._rpc is not None and not self._rpc.closed:
                with trio.move_on_after(1.0):
                    await self._interrupt_turn(self._active_turn)
            # Codex exits 0 when its stdin closes: the gentle way out.
            with trio.move_on_after(self.options.stop_grace_s / 2):
                try:
                    await proc.close_stdin()
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
                await proc.wait()
            await proc.stop(grace=self.options.stop_grace_s)
            with trio.move_on_after(self.options.stop_grace_s + 3):
                await self._gone.wait()
            await self._tree.terminate(grace=self.options.stop_grace_s)

    async def prompt(self, prompt: PromptAgent) -> None:
        if self.options.per_turn:
            await self._prompt_per_turn(prompt)
            return
        with trio.move_on_after(self.options.start_timeout_s):
            await self._ready.wait()
        rpc = self._rpc
        if rpc is None or rpc.closed or self._thread_id is None or self._gone.is_set():
            await self._send(
                prompt.run_id,
                TurnAborted(
                    reason="codex is not running", stderr_tail=self._stderr_tail(self._proc)
                ),
            )
            return
        async with self._turn_lock:
            # A turn/start during a running turn would be injected into it: wait it out.
            with trio.move_on_after(INTERRUPT_TIMEOUT_S):
                await self._turn_idle.wait()
            if self._active_turn is not None:
                await self._interrupt_turn(self._active_turn)
                with trio.move_on_after(INTERRUPT_TIMEOUT_S):
                    await self._turn_idle.wait()
            self._run_id = prompt.run_id
            await self._announce(prompt.run_id)
            if prompt.command == "compact":
                await self._compact(rpc, prompt)
                return
            params: dict[str, Any] = {
                "threadId": self._thread_id,
                "input": turn_input(prompt.text, prompt.attachments),
            }
            if prompt.model and prompt.model != self._model:
                params["model"] = prompt.model
                self._model = prompt.model
                self._parser.model = prompt.model
            self._turn_pending = True
            try:
                result = await rpc.request("turn/start", params, timeout=TURN_START_TIMEOUT_S)
            except (RpcError, RpcClosed, trio.TooSlowError) as exc:
                self._turn_pending = False
                if not isinstance(exc, RpcClosed):  # a closed process reports its own abort
                    await self._send(
                        prompt.run_id,
                        TurnCompleted(
                            session_id=self._thread_id,
                            model=self._model,
                            is_error=True,
                            error=f"codex refused the turn: {exc}",
                        ),
                    )
                return
            self._turn_pending = False
            turn = result.get("turn") if isinstance(result, dict) else None
            turn_id = turn.get("id") if isinstance(turn, dict) else None
            self._tree.sample(self._proc.pid if self._proc else None)
            if isinstance(turn_id, str):
                self._turn_runs[turn_id] = prompt.run_id
                if turn_id not in self._ended_turns and self._active_turn is None:
                    self._active_turn = turn_id
                    self._turn_idle = trio.Event()

    async def _compact(self, rpc: RpcPeer, prompt: PromptAgent) -> None:
        """``thread/compact/start``: codex compacts the thread in a turn of its own (its
        ``turn/started`` ... ``turn/completed`` are stamped with this run, as a prompt's)."""
        self._turn_pending = True
        try:
            await rpc.request(
                "thread/compact/start", {"threadId": self._thread_id}, timeout=TURN_START_TIMEOUT_S
            )
        except (RpcError, RpcClosed, trio.TooSlowError) as exc:
            self._turn_pending = False
            if not isinstance(exc, RpcClosed):
                await self._send(
                    prompt.run_id,
                    TurnCompleted(
                        session_id=self._thread_id,
                        model=self._model,
                        is_error=True,
                        error=f"codex refused to compact: {exc}",
                    ),
                )
            return
        # The turn's id arrives with its turn/started (the response has none).
        with trio.move_on_after(TURN_START_TIMEOUT_S):
            while self._active_turn is None and not self._gone.is_set():
                if prompt.run_id in self._turn_runs.values():
                    break
                await trio.sleep(0.01)
        self._turn_pending = False
        self._tree.sample(self._proc.pid if self._proc else None)
        if prompt.run_id not in self._turn_runs.values() and not self._gone.is_set():
            # No turn came of it: the run must still end (the process lives on).
            await self._send(
                prompt.run_id,
                TurnCompleted(
                    session_id=self._thread_id,
                    model=self._model,
                    is_error=True,
                    error="codex started no compaction turn",
                ),
            )

    async def _interrupt_turn(self, turn_id: str) -> None:
        rpc = self._rpc
        if rpc is None or rpc.closed or self._thread_id is None:
            return
        try:
            await rpc.request(
                "turn/interrupt",
                {"threadId": self._thread_id, "turnId": turn_id},
                timeout=INTERRUPT_TIMEOUT_S,
            )
        except (RpcError, RpcClosed, trio.TooSlowError):
            pass  # the turn may have just ended; the caller's grace timer covers the rest

    async def interrupt(self, run_id: str) -> None:
        if self.options.per_turn:
            await self._interrupt_per_turn(run_id)
            return
        # The turn id may still be on its way (turn/start in flight): give it a moment.
        with trio.move_on_after(INTERRUPT_TIMEOUT_S):
            while self._turn_pending and self._active_turn is None:
                await trio.sleep(0.01)
        turn = self._active_turn
        if turn is None:
            return
        if self._turn_runs.get(turn, run_id) != run_id:
            return  # a stale interrupt for a run that is already over
        await self._interrupt_turn(turn)

    async def steer(self, steer: SteerAgent) -> None:
        """``turn/steer {threadId, input, expectedTurnId}``: codex adds the input to the
        running turn (the model sees it at its next request). Its answer is read in stream
        order (``_handle_parsed``); a turn that is not the run's any more is refused."""
        if self.options.per_turn:
            await super().steer(steer)
        # The turn id may still be on its way (turn/start in flight): give it a moment.
        with trio.move_on_after(INTERRUPT_TIMEOUT_S):
            while self._turn_pending and self._active_turn is None:
                await trio.sleep(0.01)
        turn, rpc = self._active_turn, self._rpc
        if (
            turn is None
            or self._turn_runs.get(turn) != steer.run_id
            or rpc is None
            or rpc.closed
            or self._thread_id is None
        ):
            await self._send(steer.run_id, SteerRefused(steer_id=steer.steer_id, reason="no turn"))
            return
        rpc_id = rpc.new_id()
        self._steers[rpc_id] = (steer.steer_id, steer.run_id)
        params = {
            "threadId": self._thread_id,
            "input": turn_input(steer.text, steer.attachments),
            "expectedTurnId": turn,
        }
        try:
            await rpc.send_request("turn/steer", params, rpc_id=rpc_id)
        except RpcClosed:
            self._steers.pop(rpc_id, None)  # the exit ends the turn; the core requeues it

    async def _steer_answered(self, steer: tuple[str, str], response: RpcResponse) -> None:
        steer_id, run_id = steer
        if response.error is None:
            await self._send(run_id, SteerTaken(steer_id=steer_id))
            return
        reason = response.error.get("message") if isinstance(response.error, dict) else None
        await self._send(run_id, SteerRefused(steer_id=steer_id, reason=str(reason or "refused")))

    async def rollback(self, rollback: RollbackAgent) -> None:
        """/undo: ``thread/revert {threadId, beforeTurnId}`` replaces the thread's history
        with the part before the run's turn (that turn and every later one are dropped; the
        files are not touched: Spindle restores them). The turn is the one this process
        started for the run, else (a restart since) the ``turns``-th newest of
        ``thread/turns/list``. Codex cannot bring a dropped turn back: no /redo."""
        rpc, thread_id = self._rpc, self._thread_id
        if self.options.per_turn or rollback.op != "undo":
            await super().rollback(rollback)
        if rpc is None or rpc.closed or thread_id is None or self._gone.is_set():
            raise AgentStartError("codex is not running")
        async with self._turn_lock:
            turn_id = next((t for t, r in self._turn_runs.items() if r == rollback.run_id), None)
            if turn_id is None:
                listed = await rpc.request(
                    "thread/turns/list",
                    {"threadId": thread_id, "limit": rollback.turns, "sortDirection": "desc"},
                    timeout=RPC_TIMEOUT_S,
                )
                turns = listed.get("data") if isinstance(listed, dict) else None
                if rollback.turns < 1 or not isinstance(turns, list) or len(turns) < rollback.turns:
                    raise RuntimeError(f"codex has no turn {rollback.turns} back: {listed!r:.300}")
                entry = turns[rollback.turns - 1]
                turn_id = entry.get("id") if isinstance(entry, dict) else None
            if not isinstance(turn_id, str):
                raise RuntimeError(f"no codex turn for run {rollback.run_id}")
            await rpc.request(
                "thread/revert",
                {"threadId": thread_id, "beforeTurnId": turn_id},
                timeout=RPC_TIMEOUT_S,
            )
            # That turn and every later one (started after it) are gone from the thread.
            order = list(self._turn_runs)
            if turn_id in order:
                for turn in order[order.index(turn_id) :]:
                    del self._turn_runs[turn]

    async def shell(self, command: str, output: Callable[[str], None]) -> int | None:
        """``thread/shellCommand {threadId, command}``: codex runs the command with its own
        shell as a turn of its own (``source: userShell``), so the model sees it and its
        output in the thread's history. That turn's lines go to ``ShellTurn`` (output
        deltas, the exit code); cancelled, the turn is interrupted (``turn/interrupt``).
        Prompts wait (the turn lock); so does the core's queue."""
        rpc, thread_id = self._rpc, self._thread_id
        if self.options.per_turn:
            return await super().shell(command, output)
        if rpc is None or rpc.closed or thread_id is None or self._gone.is_set():
            raise AgentStartError("codex is not running")
        async with self._turn_lock:
            with trio.move_on_after(INTERRUPT_TIMEOUT_S):
                await self._turn_idle.wait()
            if self._active_turn is not None:
                raise RuntimeError("a codex turn is running")
            shell = self._shell = ShellTurn(output)
            try:
                await rpc.request(
                    "thread/shellCommand",
                    {"threadId": thread_id, "command": command},
                    timeout=RPC_TIMEOUT_S,
                )
                while not shell.done.is_set() and not self._gone.is_set():
                    with trio.move_on_after(0.2):
                        await shell.done.wait()
            finally:
                if not shell.done.is_set() and shell.turn is not None and not self._gone.is_set():
                    with trio.CancelScope(shield=True), trio.move_on_after(INTERRUPT_TIMEOUT_S):
                        await self._interrupt_turn(shell.turn)
                        await shell.done.wait()
                self._shell = None
        if not shell.done.is_set():
            raise RuntimeError("codex exited while the command ran")
        return shell.exit_code

    async def answer_permission(self, request_id: str, allow: bool) -> None:
        pending = self._parser.take_request(request_id)
        if pending is None or self._rpc is None or pending.kind != "permission":
            return
        try:
            await self._rpc.respond(
                pending.rpc_id, AppServerParser.permission_result(pending, allow)
            )
        except RpcClosed:
            pass

    async def answer_question(self, request_id: str, answer: str | None) -> None:
        pending = self._parser.take_request(request_id)
        if pending is None or self._rpc is None:
            return
        if pending.kind == "permission":  # an elicitation answered as a question
            result = AppServerParser.permission_result(pending, answer is not None)
        else:
            result = AppServerParser.question_result(pending, answer)
        try:
            await self._rpc.respond(pending.rpc_id, result)
        except RpcClosed:
            pass
