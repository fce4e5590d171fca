"""The opencode adapter: one session on a shared ``opencode serve`` per thread.

Long-lived mode (default): the thread takes a reference on the directory's server
(``server.py``: one ``opencode serve`` per project directory, password-protected,
loopback only), creates a session (``POST /session``) or reuses the resume id (sessions live
in opencode's database, so a new server continues an old session as is), subscribes to that
session's events on the shared ``/event`` bus, and turns them into agent events with
``OpencodeEventParser``. A prompt is ``POST /session/{id}/prompt_async`` (204 at once);
the turn ends at ``session.idle``. A steer is another ``prompt_async`` while the session is
busy: opencode stores it as a user message and its running loop takes it at the next step
(``steering.py`` tells when), still one busy period with one ``session.idle``. Interrupt is
``POST /session/{id}/abort`` (in-band: the server and session stay usable); permission
answers go to ``POST /permission/{id}/reply`` (``once``/``reject``), question answers to
``/question/{id}/reply`` or ``/reject``.

Per-turn fall-back (``options.per_turn``, ``run_turns.py``): ``opencode run --format json
[-s <session>]`` per prompt, parsed by ``OpencodeRunParser``; interrupt is a signal (no
in-band way), and the CLI auto-rejects permission requests in this mode.

MCP servers (``session_setup.py``, with the session's opening, resuming and forking): in
long-lived mode each thread registers its own on the shared server (``POST /mcp``, named
``<name>-<tag of url+token>``) and its session's permission ruleset denies every other
thread's registration of that name, so threads with different bearer tokens share one
server and each sees (and calls, with its token) only its own tools. In per-turn mode they
go into a private config file (0600, private temp dir, removed after the last turn) named
by ``OPENCODE_CONFIG``, which opencode merges over the user's config. No user file is
touched, no token is on a command line.

Guards against hangs: opencode retries a failing model call by itself (5 times, 2 s doubling,
about a minute of silence when the model server is down); after ``max_model_retries``
``session.status retry`` events the adapter aborts the turn and it ends with a clear error.
An abort that produces no ``session.idle`` within ``interrupt_grace_s`` ends the turn with
``TurnAborted`` from here. A server that dies ends the open turn with ``TurnAborted``
(exit code, stderr tail).

Invariants: every event is stamped with the run id of the last ``prompt`` and the session id;
at most one turn-ending event per turn; ``stop`` returns once this thread's reference is gone
(and, for the last thread of the directory, once psutil confirms no process is left).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from threadspindle.agents.base.adapter import AgentAdapter, AgentStartError
from threadspindle.agents.base.launch import prompt_text
from threadspindle.agents.base.options import AgentOptions, ConversationInfo
from threadspindle.agents.base.parsing import AgentStatistics, ParserStats
from threadspindle.agents.opencode.launch import (
    model_ref,
    prompt_body,
    serve_spec,
)
from threadspindle.agents.opencode.parser import OpencodeEventParser
from threadspindle.agents.opencode.run_turns import RunTurnsMixin
from threadspindle.agents.opencode.server import (
    RESYNC,
    OpencodeServer,
    ServerStartError,
    acquire_server,
    release_server,
)
from threadspindle.agents.opencode.session_setup import SessionSetupMixin
from threadspindle.agents.opencode.sessions import conversations_from
from threadspindle.agents.opencode.steering import SteerTracker
from threadspindle.effects.process import ManagedProcess
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

__all__ = ["OpencodeAdapter"]

logger = logging.getLogger(__name__)


class OpencodeAdapter(SessionSetupMixin, RunTurnsMixin, AgentAdapter):
    """One thread's opencode session (see the module docstring).

    ``permission="ask"`` creates sessions whose ruleset asks the thread before bash, edit,
    webfetch and outside-directory access; ``None`` leaves it to the user's opencode config.
    """

    name = "opencode"

    def __init__(
        self,
        options: AgentOptions,
        *,
        permission: str | None = None,
        max_model_retries: int | None = None,  # None: options.max_retries
        interrupt_grace_s: float = 5.0,
    ) -> None:
        super().__init__(options)
        self.permission = permission
        self.max_model_retries = (
            options.max_retries if max_model_retries is None else max_model_retries
        )
        self.interrupt_grace_s = interrupt_grace_s
        self._stats = ParserStats()
        self._server: OpencodeServer | None = None
        self._session_id: str | None = None
        self._workdir: str | None = None
        self._run_id: str | None = None
        self._last_model: str | None = None  # "provider/model" of the last turn
        # Long-lived only: /compact is opencode's session summarize; a steer is a prompt on
        # the busy session, which opencode's running loop takes at its next step; /undo and
        # /redo are the session's revert / unrevert.
        long_lived = not options.per_turn
        self.capabilities = AgentCapabilities(
            steer=long_lived,
            compact=long_lived,
            fork=long_lived,
            rollback=long_lived,
            restore=long_lived,
            shell=long_lived,  # POST /session/{id}/shell
        )
        self._steers = SteerTracker()
        self._prompt_model: str | None = None  # the model the open turn was asked with
        self._emit: EmitEvent | None = None
        self._parser: OpencodeEventParser | None = None
        self._nursery: trio.Nursery | None = None
        self._serve_scope: trio.CancelScope | None = None
        self._serve_done = trio.Event()
        self._serving = False
        self._aborting_run: str | None = None
        self._turn_proc: ManagedProcess | None = None
        self._turn_done: trio.Event | None = None
        self._turn_env: dict[str, str] = {}
        self._mcp_names: list[str] = []
        self._problems: list[str] = []  # start-up problems told once the thread is ready

    # serve ------------------------------------------------------------------------------
    async def serve(self, start: StartAgent, emit: EmitEvent, task_status: Any) -> None:
        self._emit = emit
        self._workdir = start.workdir
        self._serve_done = trio.Event()
        self._serving = True
        try:
            with trio.CancelScope() as scope:
                self._serve_scope = scope
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    if self.options.per_turn:
                        await self._serve_per_turn(start, task_status)
                    else:
                        await self._serve_long_lived(start, task_status)
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The nursery wraps a start failure; callers want the error itself.
            if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
                raise group.exceptions[0] from group
            raise
        finally:
            self._serving = False
            self._nursery = None
            self._serve_done.set()

    async def _serve_long_lived(self, start: StartAgent, task_status: Any) -> None:
        spec = serve_spec(self.options, start.workdir)
        try:
            server = await acquire_server(
                spec, start_timeout=self.options.start_timeout_s, grace=self.options.stop_grace_s
            )
        except ServerStartError as exc:
            raise AgentStartError(str(exc)) from exc
        self._server = server
        session_id: str | None = None
        subscription = None
        try:
            self._problems = await self._register_mcp(server)
            session_id = await self._open_session(server, start.session_id, fork=start.fork)
            self._session_id = session_id
            subscription = server.subscribe(session_id)
            self._parser = OpencodeEventParser(session_id, self._stats)
            task_status.started()
            await self._emit_event(SessionStarted(session_id=session_id, model=start.model))
            for problem in self._problems:
                await self._emit_event(AgentError(message=problem))
            if start.session_id and start.session_id != session_id and not start.fork:
                await self._emit_event(
                    AgentError(
                        message=f"Could not resume opencode session {start.session_id} "
                        "(not found); started a new session."
                    )
                )
            async with subscription.receive as events:
                async for event in events:
                    await self._handle(event)
            # The channel closed: the server process is gone.
            if self._parser.turn_open:
                reason = f"opencode server exited ({server.exit_code})"
                self._parser.turn_state = "idle"
                await self._emit_event(
                    TurnAborted(
                        reason=reason,
                        exit_code=server.exit_code,
                        stderr_tail=server.stderr_tail(),
                    )
                )
        finally:
            with trio.CancelScope(shield=True):
                if subscription is not None:
                    server.unsubscribe(subscription)
                self._server = None
                await self._unregister_mcp(server)
                await release_server(server)

    async def _handle(self, event: dict[str, Any]) -> None:
        assert self._parser is not None
        if event.get("type") == RESYNC:
            if self._parser.turn_open and self._nursery is not None:
                self._nursery.start_soon(self._check_missed_end, self._run_id)
            return
        parser = self._parser
        for steer_id in self._steers.feed(event):
            await self._emit_event(SteerTaken(steer_id=steer_id))
        for agent_event in parser.feed_event(event).events:
            if isinstance(agent_event, AgentError) and agent_event.retryable:
                if parser.retries > self.max_model_retries:
                    continue  # one retry too many: the turn is stopped just below
                agent_event = agent_event.model_copy(update={"max_retries": self.max_model_retries})
            await self._emit_event(agent_event)
        if (
            parser.turn_open
            and parser.retries > self.max_model_retries
            and self._aborting_run != self._run_id
        ):
            # opencode would keep retrying for about a minute in silence: give up now.
            self._aborting_run = self._run_id
            failure = f"the model request failed {parser.retries} times: " + (
                parser.last_retry_message or "no answer"
            )
            await self._emit_event(AgentError(message=f"{failure}; turn stopped"))
            parser.fail_turn(failure)
            await self._abort(self._run_id)

    async def _check_missed_end(self, run_id: str | None) -> None:
        """After the event stream reconnected: if the session is idle although our turn is
        open, its ``session.idle`` was lost; end the turn rather than wait forever."""
        server, parser = self._server, self._parser
        if server is None or parser is None or self._session_id is None:
            return
        try:
            response = await server.request("GET", "/session/status", timeout=10.0)
            statuses = response.json() if response.status_code == 200 else None
        except Exception:  # noqa: BLE001 - the stream is back; the next check may work
            return
        if not isinstance(statuses, dict):
            return
        status = statuses.get(self._session_id)
        busy = isinstance(status, dict) and status.get("type") in ("busy", "retry")
        if not busy and self._run_id == run_id and parser.turn_open:
            reason = "the event stream was interrupted and the turn's end was missed"
            for event in parser.end_turn_aborted(reason):
                await self._emit_event(event)

    async def _emit_event(self, event: AgentEvent) -> None:
        if isinstance(event, TurnCompleted) and event.model:
            self._last_model = event.model  # what /compact summarises with, unless set
        if self._emit is not None:
            await self._emit(StampedEvent(self._run_id, self._session_id, event))

    # commands ---------------------------------------------------------------------------
    async def prompt(self, prompt: PromptAgent) -> None:
        if not self._serving or self._nursery is None:
            raise AgentStartError("opencode adapter: prompt before serve() is ready")
        if self.options.per_turn:
            if self._turn_done is not None and not self._turn_done.is_set():
                # One turn at a time: the previous one ends before this one starts.
                if self._run_id is not None:
                    await self.interrupt(self._run_id)
                await self._turn_done.wait()
            self._run_id = prompt.run_id
            self._aborting_run = None
            self._turn_done = trio.Event()
            self._nursery.start_soon(self._run_turn, prompt, self._turn_done)
            return
        server, parser = self._server, self._parser
        if server is None or parser is None or self._session_id is None:
            raise AgentStartError("opencode adapter: no live session")
        if parser.turn_open and self._run_id is not None:
            # One turn at a time: a prompt sent while opencode is busy would be queued by it
            # and the old turn's idle would end the new one. The open turn ends first.
            await self.interrupt(self._run_id)
            with trio.move_on_after(self.interrupt_grace_s + 1.0):
                while parser.turn_open:
                    await trio.sleep(0.01)
        self._run_id = prompt.run_id
        self._aborting_run = None
        self._steers.end_turn()  # an older turn's steers were requeued by the core
        self._prompt_model = prompt.model or self.options.model
        parser.begin_turn()
        if not prompt.system_instruction and self.options.system_instruction:
            prompt = prompt.model_copy(
                update={"system_instruction": self.options.system_instruction}
            )
        body = prompt_body(prompt, self.options.model)
        path = f"/session/{self._session_id}/prompt_async"
        if prompt.command == "compact":
            # opencode's own compaction (a summary message), on the session's last model.
            model = model_ref(prompt.model or self.options.model or self._last_model)
            path = f"/session/{self._session_id}/summarize"
            body = dict(model) if model is not None else {}
        try:
            response = await server.request("POST", path, json_body=body)
            failure = None if response.status_code in (200, 204) else response.text[:500]
        except Exception as exc:  # noqa: BLE001 - any transport failure ends the turn
            failure = repr(exc)
        if failure is not None:
            await self._emit_event(AgentError(message=f"opencode refused the prompt: {failure}"))
            for event in parser.end_turn_aborted(f"prompt failed: {failure}"):
                await self._emit_event(event)

    async def steer(self, steer: SteerAgent) -> None:
        """``prompt_async`` on the busy session: opencode's loop takes the message at its
        next step (``SteerTaken`` once a step answers it). A steer the loop has not taken when
        the session goes idle gets no answer: the core requeues it (the model then sees the
        text twice, stored and resent). A steer racing the turn's end by milliseconds can
        start a busy period of its own, which the next prompt interrupts."""
        if self.options.per_turn:
            await super().steer(steer)
            return
        server, parser = self._server, self._parser
        if (
            server is None
            or parser is None
            or self._session_id is None
            or not parser.turn_open
            or steer.run_id != self._run_id
            or self._aborting_run == self._run_id
        ):
            await self._refuse_steer(steer, "no turn")
            return
        text = prompt_text(steer.text, steer.attachments)
        body: dict[str, Any] = {"parts": [{"type": "text", "text": text}]}
        model = model_ref(self._prompt_model)
        if model is not None:
            body["model"] = model
        self._steers.sent(steer.steer_id, text)
        path = f"/session/{self._session_id}/prompt_async"
        try:
            response = await server.request("POST", path, json_body=body)
            failure = None if response.status_code in (200, 204) else response.text[:300]
        except Exception as exc:  # noqa: BLE001 - any transport failure refuses the steer
            failure = repr(exc)
        if failure is not None:
            self._steers.withdraw(steer.steer_id)
            await self._refuse_steer(steer, f"opencode refused it: {failure}")

    async def _refuse_steer(self, steer: SteerAgent, reason: str) -> None:
        if self._emit is not None:
            refused = SteerRefused(steer_id=steer.steer_id, reason=reason)
            await self._emit(StampedEvent(steer.run_id, self._session_id, refused))

    async def interrupt(self, run_id: str) -> None:
        if run_id != self._run_id:
            return
        if self.options.per_turn:
            if self._turn_done is None or self._turn_done.is_set():
                return
            self._aborting_run = run_id  # seen by _run_turn if it is still spawning
            proc = self._turn_proc
            if proc is not None and proc.returncode is None:
                await proc.stop(grace=self.options.stop_grace_s)
            return
        if self._parser is None or not self._parser.turn_open:
            return
        self._aborting_run = run_id
        await self._abort(run_id)

    async def _abort(self, run_id: str | None) -> None:
        server = self._server
        if server is None or self._session_id is None:
            return
        try:
            await server.request("POST", f"/session/{self._session_id}/abort", timeout=10.0)
        except Exception as exc:  # noqa: BLE001 - the watchdog below still ends the turn
            await self._emit_event(AgentError(message=f"opencode abort failed: {exc!r}"))
        if self._nursery is not None:
            self._nursery.start_soon(self._abort_watchdog, run_id)

    async def _abort_watchdog(self, run_id: str | None) -> None:
        await trio.sleep(self.interrupt_grace_s)
        parser = self._parser
        if parser is not None and self._run_id == run_id and parser.turn_open:
            for event in parser.end_turn_aborted("interrupted (opencode did not confirm)"):
                await self._emit_event(event)

    async def rollback(self, rollback: RollbackAgent) -> None:
        """The session's revert point, moved: ``POST /session/{id}/revert {messageID}`` hides
        that user message and every later one (opencode deletes them at the next prompt, so
        the model never sees them again), ``POST /session/{id}/unrevert`` shows them all
        again. /undo hides the ``turns`` newest visible turns; /redo shows the first hidden
        one, keeping the ``turns`` after it hidden. opencode also puts back the files it
        snapshotted: Spindle's git restore runs after it and has the last word."""
        if self.options.per_turn:
            await super().rollback(rollback)
        server, session = self._require_server(), self._session_id
        if session is None:
            raise AgentStartError("opencode adapter: no live session")
        users, point = await self._user_messages(server, session)
        hidden_from = users.index(point) if point in users else len(users)
        visible, hidden = users[:hidden_from], users[hidden_from:]
        if rollback.op == "undo":
            if not 1 <= rollback.turns <= len(visible):
                raise RuntimeError(f"opencode has {len(visible)} turns, not {rollback.turns}")
            path, body = "revert", {"messageID": visible[-rollback.turns]}
        elif not hidden or rollback.turns >= len(hidden):
            raise RuntimeError(f"opencode has {len(hidden)} hidden turns to bring back")
        elif rollback.turns == 0:
            path, body = "unrevert", {}
        else:
            path, body = "revert", {"messageID": hidden[-rollback.turns]}
        response = await server.request("POST", f"/session/{session}/{path}", json_body=body)
        if response.status_code != 200:
            raise RuntimeError(
                f"opencode refused {path}: {response.status_code} {response.text[:200]}"
            )

    async def shell(self, command: str, output: Callable[[str], None]) -> int | None:
        """``POST /session/{id}/shell {agent, command}``: opencode runs the command with its
        bash tool as a message of the session (the model sees it), answering once it is done
        with the output (not streamed) and no exit code. Cancelled: the session's abort."""
        if self.options.per_turn:
            return await super().shell(command, output)
        server, session = self._require_server(), self._session_id
        if session is None:
            raise AgentStartError("opencode adapter: no live session")
        body = {"agent": "build", "command": command}
        try:
            response = await server.request(
                "POST", f"/session/{session}/shell", json_body=body, timeout=24 * 3600.0
            )
        except trio.Cancelled:
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await server.request("POST", f"/session/{session}/abort", timeout=10.0)
            raise
        if response.status_code != 200:
            raise RuntimeError(f"opencode refused: {response.status_code} {response.text[:200]}")
        answer = response.json()
        parts = answer.get("parts") if isinstance(answer, dict) else None
        for part in parts if isinstance(parts, list) else []:
            state = part.get("state") if isinstance(part, dict) else None
            if isinstance(state, dict) and isinstance(state.get("output"), str):
                output(state["output"])
        return None

    @staticmethod
    async def _user_messages(server: OpencodeServer, session: str) -> tuple[list[str], str | None]:
        """The session's user message ids (oldest first) and its revert point, if any."""
        messages = await server.request("GET", f"/session/{session}/message")
        info = await server.request("GET", f"/session/{session}")
        if messages.status_code != 200 or info.status_code != 200:
            raise RuntimeError(f"opencode: session {session} unreadable ({messages.status_code})")
        users: list[str] = []
        for message in messages.json() if isinstance(messages.json(), list) else []:
            head = message.get("info") if isinstance(message, dict) else None
            if isinstance(head, dict) and head.get("role") == "user":
                users.append(str(head.get("id")))
        revert = info.json().get("revert") if isinstance(info.json(), dict) else None
        point = revert.get("messageID") if isinstance(revert, dict) else None
        return users, point if isinstance(point, str) else None

    @property
    def stderr_tail(self) -> str:
        return self._server.stderr_tail() if self._server is not None else ""

    async def answer_permission(self, request_id: str, allow: bool) -> None:
        server = self._require_server()
        reply = "once" if allow else "reject"
        response = await server.request(
            "POST", f"/permission/{request_id}/reply", json_body={"reply": reply}
        )
        self._check_answer(response, request_id)

    async def answer_question(self, request_id: str, answer: str | None) -> None:
        server = self._require_server()
        if answer is None:
            response = await server.request("POST", f"/question/{request_id}/reject")
        else:
            response = await server.request(
                "POST", f"/question/{request_id}/reply", json_body={"answers": [[answer]]}
            )
        self._check_answer(response, request_id)

    def _check_answer(self, response: Any, request_id: str) -> None:
        if response.status_code == 404:
            # Already resolved (the turn ended, or another client answered): nothing waits.
            logger.info("opencode: request %s is no longer pending", request_id)
            return
        if response.status_code >= 400:
            raise RuntimeError(
                f"opencode refused the answer to {request_id}: "
                f"{response.status_code} {response.text[:200]}"
            )

    def _require_server(self) -> OpencodeServer:
        if self._server is None:
            raise AgentStartError("opencode adapter: no live server")
        return self._server

    async def stop(self) -> None:
        if not self._serving:
            return
        if self._run_id is not None:
            with trio.move_on_after(self.options.stop_grace_s):
                await self.interrupt(self._run_id)
                # Let the abort land (session idle) before this thread leaves the server.
                while self._parser is not None and self._parser.turn_open:
                    await trio.sleep(0.02)
        if self._serve_scope is not None:
            self._serve_scope.cancel()
        with trio.move_on_after(self.options.stop_grace_s * 3 + 5):
            await self._serve_done.wait()

    def statistics(self) -> AgentStatistics:
        return self._stats.snapshot()

    @property
    def server(self) -> OpencodeServer | None:
        """The shared server this thread uses (None when not serving)."""
        return self._server

    @property
    def session_id(self) -> str | None:
        return self._session_id

    async def list_conversations_live(self, limit: int = 20) -> list[ConversationInfo]:
        """Sessions of this thread's directory from the running server (newest first)."""
        if self._server is None or self._workdir is None:
            return []
        try:
            response = await self._server.request(
                "GET", "/session", params={"directory": self._workdir, "limit": str(limit)}
            )
            sessions = response.json() if response.status_code == 200 else []
        except Exception:  # noqa: BLE001 - best effort
            return []
        return conversations_from(sessions if isinstance(sessions, list) else [])
