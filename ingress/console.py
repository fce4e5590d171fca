"""The console chat: a terminal stands in for Discord, named threads stand in for its threads.

Each line typed is ingress, exactly as a Discord message or slash command would be: plain
lines are prompts (a line ending in `` queue`` is queued without interrupting), and the
commands of docs/commands.md work the same way (``/claude start .``, ``/queue``, ``/abort``,
``/status`` ...). Console-only commands manage the named threads (``/thread new NAME``,
``/thread switch NAME``, ``/threads``), answer prompts that Discord shows as buttons
(``/allow``, ``/deny``, ``/answer``, ``/remove`` for a queued prompt's "Remove from queue"),
and help scripts (``/wait`` blocks until the current
thread is idle with an empty queue, or waits for an answer; ``/quit``).

It decides nothing: every line becomes an action posted to the runtime, and what the user
sees comes back through the console platform. What it checks is the text itself, where it
enters (``ingress.input_checks``): a path, a name or a position that cannot be one is
answered with the reason, and nothing typed can raise out of ``handle_line``.

``open_console`` is the wiring ``spindle run`` uses (a stream renderer per thread over the
console platform, the live runtime, the chat); the platform contract test drives it too.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, TextIO

import trio

from threadspindle.agents import known_agents
from threadspindle.effects.console_platform import ConsolePlatform
from threadspindle.effects.git_workspace import checkpoint_folder
from threadspindle.effects.render import StreamRenderer
from threadspindle.effects.terminal_text import terminal_safe
from threadspindle.ingress.discord.translate import (
    PlainMessageMode,
    resolve_workdir,
    split_queue_suffix,
)
from threadspindle.ingress.input_checks import (
    MAX_PROMPT_CHARS,
    InputRefused,
    check_path,
    check_word,
    has_visible_text,
    parse_position,
    shown,
)
from threadspindle.ingress.schedule_commands import schedule_action, verbosity_action
from threadspindle.ingress.workspace_commands import shell_action, workspace_action
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.live.registry import Runtime, open_runtime

__all__ = [
    "ConsoleChat",
    "HELP",
    "open_console",
    "read_piped_lines",
    "read_terminal_lines",
    "thread_id_for",
]

logger = logging.getLogger("spindle.console")

AGENTS = known_agents()  # "/<agent> start" for each; any other name is an unknown command
MAX_THREAD_NAME = 64
_SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

# The commands above that take (or refuse) arguments, as their usage line says them.
_USAGE = {
    "queue": "/queue <prompt>",
    "steer": "/steer <text>",
    "btw": "/btw <question>",
    "fork": "/fork (no arguments)",
    "conversation": "/conversation end",
    "workdir": "/workdir set <path>",
    "model": "/model <name>",
    "answer": "/answer [id] <text>",
    "remove": "/remove <queue item id>",
}

HELP = """\
Plain lines are prompts for the current thread's agent; a line ending in " queue" waits
its turn instead of interrupting, one ending in " steer" is added to the running turn.
Commands:
  /<agent> start [workdir]     start a conversation (agents: claude codex gemini opencode echo)
  /<agent> resume <id>         resume one of the agent's sessions
  /<agent> conversations       list the agent's past sessions here
  /conversation end            end the conversation (the agent keeps its history)
  /queue <message>             queue a prompt without interrupting
  /steer <message>             add to the running turn without stopping it
  /compact                     let the agent compact (summarise) its conversation
  /fork                        a new thread continuing this conversation from here
  /btw <question>              ask on the side, in a forked thread (the run goes on)
  /abort                       stop the active run (queued prompts go on)
  /clear-queue [position]      drop all queued prompts, or the one at a position
  /status                      the thread's agent, run, queue and counters
  /workdir set <path>          move the conversation to another directory
  /model <name>                switch model (an active run is retried with it)
  /undo | /redo                restore the files to before the last run, or re-apply
  /diff [base]                 what changed since the conversation started
  !<command> | /shell <cmd>    run a shell command in the workdir (allow-listed users)
  /worktree new <name> [base] | list | remove <name> [force] | merge [target]
  /schedule <when> <prompt>    a prompt later: in 2h, 14:30, a cron expression (*/30 * * * *)
  /schedule list | /schedule cancel <id>
  /verbosity text|tools|all    what runs show: the answer; plus tool lines; everything
  /allow [id] | /deny [id]     answer the pending permission prompt
  /answer [id] <text>          answer the pending question (the oldest, without an id)
  /remove <item>               take a queued prompt out (its "Remove from queue")
  /thread new NAME | /thread switch NAME | /threads
  /wait                        wait until this thread is idle, or a prompt needs an answer
  /help | /quit"""


def thread_id_for(name: str) -> str:
    return f"console:{name}"


def console_thread_names(thread_ids: Iterable[str]) -> list[str]:
    """The names of the console's threads among a log's thread ids, ``main`` first."""
    prefix = thread_id_for("")
    names = [t[len(prefix) :] for t in thread_ids if t.startswith(prefix)]
    return ["main", *(name for name in names if name and name != "main")]


class ConsoleChat:
    def __init__(
        self,
        runtime: Runtime,
        *,
        out: TextIO,
        default_agent: str,
        default_workdir: str,
        author: str = "you",
        clock: Callable[[], float] = time.time,
        list_conversations: Callable[[str, str], list[str]] | None = None,
        plain_message: PlainMessageMode = "interrupt",
    ) -> None:
        self.runtime = runtime
        self.plain_message = plain_message  # how a line with no suffix is delivered
        self.out = out
        self.default_agent = default_agent
        self.default_workdir = default_workdir
        self.author = author
        self._clock = clock
        self._n = 0
        self._boot = f"{int(clock() * 1000):x}"
        self.current = "main"
        self.names: list[str] = ["main"]
        # Its lines get their thread's name once a second thread is used in this session
        # (typed into, or opened by /fork): their output interleaves (``open_console``).
        self.platform: ConsolePlatform | None = None
        self._used = {"main"}
        self._list_conversations = list_conversations or _list_conversations
        # thread id -> its stream renderer, filled by ``open_console`` (a test waits on them)
        self.renderers: dict[str, StreamRenderer] = {}

    # --- helpers --------------------------------------------------------------------------
    @property
    def thread_id(self) -> str:
        return thread_id_for(self.current)

    def _base(self) -> dict[str, Any]:
        self._n += 1
        return {
            "thread_id": self.thread_id,
            "action_id": f"con-{self._boot}-{self._n}",
            "at": self._clock(),
        }

    def say(self, text: str) -> None:
        self.out.write(terminal_safe(text) + "\n")

    def _use(self, name: str) -> None:
        self._used.add(name)
        if len(self._used) > 1 and self.platform is not None:
            self.platform.label_channels = True

    async def open_thread(self, source_thread_id: str, title: str) -> tuple[str, str]:
        """The runtime's ``thread_opener``: a new named console thread (``fork1``, ...);
        the current thread stays the one typed into."""
        n = 1
        while f"fork{n}" in self.names:
            n += 1
        name = f"fork{n}"
        self.names.append(name)
        self._use(name)
        self.say(f"[{name}] opened: {title} (/thread switch {name})")
        return thread_id_for(name), f"console thread {name} (/thread switch {name})"

    def _prompt_action(self, text: str) -> A.UserMessage | A.SteerCommand:
        """A typed line as a prompt: the `` steer``/`` queue`` suffixes, else the console's
        ``plain_message`` mode (as a Discord message in its channel)."""
        base = self._base()
        prompt, steered = split_queue_suffix(text, " steer")
        queued = False
        if not steered:
            prompt, queued = split_queue_suffix(text)
            steered = not queued and self.plain_message == "steer"
        if steered:
            return A.SteerCommand(
                **base,
                author_id=self.author,
                author_name=self.author,
                text=prompt,
                source_message_id=base["action_id"],
            )
        return A.UserMessage(
            **base,
            author_id=self.author,
            author_name=self.author,
            text=prompt,
            source_message_id=base["action_id"],
            interrupt=not queued and self.plain_message != "queue",
        )
        self.out.flush()

    def state(self) -> ThreadState | None:
        return self.runtime.snapshot(self.thread_id)

    def prompt_label(self) -> str:
        """``[thread · agent · ⠙ running · queue 2] > ``: where you are and what runs."""
        state = self.state()
        agent = state.conversation.agent if state and state.conversation else "no agent"
        queue = len(state.queue) if state else 0
        busy = ""
        if state and state.blockers:
            busy = " · ? waiting for your answer (/allow, /deny, /answer)"
        elif state and state.run:
            frame = _SPINNER[int(time.monotonic() * 10) % len(_SPINNER)]
            busy = f" · {frame} {state.run.phase.value}"
        return f"[{self.current} · {agent}{busy} · queue {queue}] > "

    async def post(self, action: A.Action) -> None:
        receipt = await self.runtime.post(action, channel_id="console")
        # A prompt is acknowledged only once it is durable: then a crash cannot lose it.
        await receipt.durable()

    async def ensure_conversation(self, *, announce: bool = False) -> None:
        """A fresh thread gets a conversation with the default agent, so `make run` is
        ready to chat at once. ``announce``: a conversation kept from an earlier run of
        the console is named (agent, workdir, what is queued), with a warning when its
        workdir is not the directory the console started in: the prompts typed now would
        run there, in another project, without a word."""
        state = self.state()
        if state is None or state.conversation is None:
            await self.start_conversation(self.default_agent, self.default_workdir)
            return
        if not announce:
            return
        conv = state.conversation
        queued = f", {len(state.queue)} queued" if state.queue else ""
        self.say(
            f"↳ Resumed thread {self.current}: {conv.agent} in {conv.workdir} "
            f"({state.counters.runs} runs so far{queued})."
        )
        if os.path.realpath(conv.workdir) != os.path.realpath(self.default_workdir):
            self.say(
                f"⚠ That is not {self.default_workdir}, where you started: "
                f"/workdir set {self.default_workdir} moves this conversation here, "
                "/thread new NAME starts another thread here."
            )

    def workdir_base(self) -> str:
        """Where a relative path is taken from: the conversation's workdir, else the
        directory the console started in (as on Discord: docs/commands.md)."""
        state = self.state()
        if state is not None and state.conversation is not None:
            return state.conversation.workdir
        return self.default_workdir

    async def start_conversation(
        self, agent: str, workdir: str, session: str | None = None
    ) -> None:
        check_path(workdir)
        if session is not None:
            check_word(session, "session id")
        resolved = resolve_workdir(workdir, base=self.workdir_base())
        if session:
            await self.post(
                A.ConversationResumed(
                    **self._base(),
                    agent=agent,
                    session_id=session,
                    requested_workdir=workdir,
                    resolved_workdir=resolved,
                )
            )
        else:
            await self.post(
                A.ConversationStarted(
                    **self._base(),
                    agent=agent,
                    requested_workdir=workdir,
                    resolved_workdir=resolved,
                )
            )

    # --- one line -------------------------------------------------------------------------
    async def handle_line(self, line: str) -> bool:
        """Handle one typed line; False when the user asked to quit. Never raises (but
        for cancellation): a refused value is answered with its reason, anything else
        that goes wrong with a warning, and the chat goes on."""
        try:
            return await self._handle_line(line)
        except InputRefused as refused:
            self.say(str(refused))
        except Exception as exc:
            logger.exception("could not handle a console line")
            self.say(f"⚠ Could not handle that line: {type(exc).__name__}: {shown(str(exc))}")
        return True

    async def _handle_line(self, line: str) -> bool:
        text = line.rstrip("\n")
        if len(text) > MAX_PROMPT_CHARS:
            self.say(f"Not sent: a line may hold at most {MAX_PROMPT_CHARS:,} characters.")
            return True
        if not has_visible_text(text):
            if text.strip():  # control characters only: said, as a blank line is not
                self.say("Not sent: the line has no text, only control characters.")
            return True
        shell = shell_action(text, self._base(), self.author, self.author)
        if shell is not None:
            await self.post(shell)
            return True
        if not text.startswith("/"):
            await self.post(self._prompt_action(text))
            return True
        # Words are split at white space, as on every other platform: no quoting (shlex
        # ate a path's backslashes and double spaces, and never said so). A path or an
        # answer is the rest of the line as typed (``_after``).
        words = text[1:].split()
        if not words:
            self.say("A command needs a name after the slash (try /help).")
            return True
        head, args = words[0].lower(), words[1:]
        rest = _after(text[1:], 1)
        return await self._command(head, args, rest)

    async def _command(self, head: str, args: list[str], rest: str) -> bool:
        if head in ("quit", "exit"):
            return False
        if head == "help":
            self.say(HELP)
        elif head == "thread":
            await self._thread_command(args)
        elif head == "threads":
            for name in self.names:
                state = self.runtime.snapshot(thread_id_for(name))
                phase = state.run.phase.value if state and state.run else "idle"
                queue = len(state.queue) if state else 0
                mark = "*" if name == self.current else " "
                self.say(f"{mark} {name}: {phase}, queue {queue}")
        elif head in AGENTS and args[:1] == ["start"]:
            await self.start_conversation(head, _after(rest, 1) or self.default_workdir)
        elif head in AGENTS and args[:1] == ["resume"] and len(args) != 2:
            self.say(f"usage: /{head} resume <session id>")
        elif head in AGENTS and args[:1] == ["resume"]:
            state = self.state()
            workdir = (
                state.conversation.workdir if state and state.conversation else self.default_workdir
            )
            await self.start_conversation(head, workdir, session=args[1])
        elif head in AGENTS and args[:1] == ["conversations"]:
            state = self.state()
            workdir = (
                state.conversation.workdir if state and state.conversation else self.default_workdir
            )
            found = self._list_conversations(head, workdir)
            self.say("\n".join(found) if found else f"No {head} conversations found for {workdir}.")
        elif head == "conversation" and args[:1] == ["end"]:
            await self.post(A.ConversationEnded(**self._base()))
        elif head == "queue" and rest:
            base = self._base()
            await self.post(
                A.QueueCommand(**base, author_id=self.author, author_name=self.author, text=rest)
            )
        elif head == "steer" and rest:
            base = self._base()
            await self.post(
                A.SteerCommand(**base, author_id=self.author, author_name=self.author, text=rest)
            )
        elif head == "fork" and not rest:
            await self.post(
                A.ForkRequested(**self._base(), author_id=self.author, author_name=self.author)
            )
        elif head == "btw" and rest:
            await self.post(
                A.ForkRequested(
                    **self._base(), author_id=self.author, author_name=self.author, question=rest
                )
            )
        elif head == "compact":
            await self.post(
                A.CompactRequested(**self._base(), author_id=self.author, author_name=self.author)
            )
        elif head == "abort":
            await self.post(A.AbortRequested(**self._base(), author_id=self.author))
        elif head == "clear-queue":
            if len(args) > 1:
                raise InputRefused("usage: /clear-queue [position]")
            position = parse_position(args[0]) if args else None
            await self.post(A.QueueCleared(**self._base(), position=position))
        elif head == "status":
            await self.post(A.StatusRequested(**self._base()))
        elif head == "workdir" and args[:1] == ["set"] and len(args) >= 2:
            path = check_path(_after(rest, 1))
            await self.post(
                A.WorkdirSet(
                    **self._base(),
                    requested_workdir=path,
                    resolved_workdir=resolve_workdir(path, base=self.workdir_base()),
                )
            )
        elif head == "model" and len(args) == 1:
            model = check_word(args[0], "model name")
            await self.post(A.ModelChanged(**self._base(), model=model))
        elif head in ("allow", "deny") and len(args) > 1:
            self.say(f"usage: /{head} [id]")
        elif head in ("allow", "deny"):
            request = self._pending("permission", args[0] if args else None)
            if request:
                await self.post(
                    A.PermissionAnswered(
                        **self._base(),
                        request_id=request,
                        allow=head == "allow",
                        author_id=self.author,
                    )
                )
        elif head == "answer" and args:
            # "/answer <id> <text>" when the first word names a pending question, else the
            # whole line answers the oldest one.
            named = len(args) > 1 and args[0] in self._pending_ids("question")
            request = self._pending("question", args[0] if named else None)
            answer = _after(rest, 1) if named else rest
            if request:
                await self.post(
                    A.QuestionAnswered(
                        **self._base(), request_id=request, answer=answer, author_id=self.author
                    )
                )
        elif head == "remove" and len(args) == 1:
            item = check_word(args[0], "queue item")
            await self.post(A.QueuedItemRemoved(**self._base(), item_id=item))
        elif head == "schedule":
            await self.post(
                schedule_action(
                    self._base(),
                    rest,
                    author_id=self.author,
                    author_name=self.author,
                    tz=self.runtime.timezone,
                )
            )
        elif head == "verbosity":
            await self.post(verbosity_action(self._base(), rest))
        elif head == "wait":
            await self.wait_idle()
        elif (action := workspace_action(head, rest, self._base(), self.author)) is not None:
            await self.post(action)
        elif head in _USAGE:  # a known command, with what it takes missing or extra
            self.say(f"usage: {_USAGE[head]}")
        else:
            self.say(f"Unknown command /{shown(head, 40)} (try /help).")
        return True

    def _pending_ids(self, kind: str) -> list[str]:
        state = self.state()
        return [b.request_id for b in (state.blockers if state else ()) if b.kind == kind]

    def _pending(self, kind: str, request_id: str | None) -> str | None:
        pending = self._pending_ids(kind)
        if request_id is not None:
            return request_id  # the core says so if it is not pending
        if not pending:
            self.say(f"No {kind} is waiting for an answer.")
            return None
        return pending[0]

    async def _thread_command(self, args: list[str]) -> None:
        if len(args) == 2 and args[0] in ("new", "switch"):
            name = check_word(args[1], "thread name", MAX_THREAD_NAME)
            if args[0] == "new" and name in self.names:
                self.say(f"Thread {name} exists: /thread switch {name}")
                return
            folder = checkpoint_folder(thread_id_for(name))
            twin = next(
                (n for n in self.names if checkpoint_folder(thread_id_for(n)) == folder), None
            )
            if args[0] == "new" and twin is not None:
                # Their checkpoint refs would share one folder, and pruning one thread's
                # would count the other's.
                self.say(
                    f"Thread {name} would share its checkpoints with thread {twin}: "
                    "pick a name of letters, digits, '.', '_' and '-'."
                )
                return
            if args[0] == "switch" and name not in self.names:
                self.say(f"No thread {name} (threads: {', '.join(self.names)}).")
                return
            if name not in self.names:
                self.names.append(name)
            self.current = name
            self._use(name)
            if args[0] == "new":
                await self.ensure_conversation()
            self.say(f"Now in thread {name}.")
        else:
            self.say("usage: /thread new NAME | /thread switch NAME")

    async def wait_idle(self, timeout_s: float = 300.0) -> None:
        with trio.move_on_after(timeout_s) as scope:
            while True:
                await self.runtime.wait_quiet(self.thread_id)
                state = self.state()
                ws = state.workspace if state is not None else None
                idle = ws is None or (ws.job is None and ws.shell is None and not ws.reads)
                if state is None or (state.run is None and not state.queue and idle):
                    break  # idle (no run, queue, shell command, workspace job or answer due)
                if state.blockers:
                    break  # a permission or question needs the user
                await trio.sleep(0.05)
        if scope.cancelled_caught:
            self.say(f"(still busy after {timeout_s:g}s)")


def _after(text: str, words: int) -> str:
    """``text`` after its first ``words`` words (split at white space), as typed: the
    white space inside it kept, stripped at both ends."""
    rest = text.strip()
    for _ in range(words):
        parts = rest.split(None, 1)
        rest = parts[1] if len(parts) > 1 else ""
    return rest.strip()


@asynccontextmanager
async def open_console(
    platform: ConsolePlatform,
    *,
    out: TextIO,
    default_agent: str,
    default_workdir: str,
    **runtime_kwargs: Any,
) -> AsyncIterator[ConsoleChat]:
    """The console's wiring for the body of the block: the live runtime (``runtime_kwargs``
    as for ``Runtime``: log, adapter factory, policy ...) with a stream renderer per thread
    over ``platform``, each with its background task, and the chat typed lines go to."""
    renderers: dict[str, StreamRenderer] = {}
    async with trio.open_nursery() as nursery:

        def renderer(thread_id: str) -> StreamRenderer:
            made = renderers[thread_id] = StreamRenderer(platform, thread_id)
            nursery.start_soon(made.run)
            return made

        async with open_runtime(renderer_factory=renderer, **runtime_kwargs) as runtime:
            chat = ConsoleChat(
                runtime, out=out, default_agent=default_agent, default_workdir=default_workdir
            )
            chat.renderers = renderers
            chat.platform = platform
            platform.channel_name = lambda channel: channel.removeprefix(thread_id_for(""))
            # The threads of earlier runs, from the log: /thread switch reaches them, and a
            # fork's new thread is never one of theirs (fork1 again would take its log).
            chat.names = console_thread_names(runtime.log.thread_ids())
            runtime.thread_opener = chat.open_thread  # /fork, /btw: a new console thread
            yield chat
        nursery.cancel_scope.cancel()  # the renderers' background tasks


async def read_piped_lines(chat: ConsoleChat) -> None:
    """Lines from a pipe or a file, until end of input or ``/quit``."""
    from threadspindle.effects.process import LineReader

    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    try:
        # (A line longer than this is cut, its rest dropped: refused as over the limit.)
        async for line in LineReader(stdin, max_line=4 * MAX_PROMPT_CHARS + 4):
            if not await chat.handle_line(line):
                break
    finally:
        await stdin.aclose()


async def read_terminal_lines(chat: ConsoleChat) -> None:
    """Lines typed in a terminal, with prompt_toolkit (run inside ``trio_asyncio``): line
    editing and history, and a prompt that shows the thread, its agent, a spinner while a
    run is active and the queue length, refreshed as they change. Ctrl-D or Ctrl-C quits."""
    import trio_asyncio
    from prompt_toolkit import PromptSession

    session: PromptSession[str] = PromptSession()
    prompt = trio_asyncio.aio_as_trio(session.prompt_async)
    while True:
        try:
            line = await prompt(chat.prompt_label, refresh_interval=0.1)
        except (EOFError, KeyboardInterrupt):
            return
        if not await chat.handle_line(line):
            return


def _list_conversations(agent: str, workdir: str) -> list[str]:
    """Ask the agent's adapter for its past sessions, newest first; best effort."""
    from threadspindle.agents import list_conversations

    try:
        found = list_conversations(agent, workdir)
    except Exception as exc:  # a listing problem must never break the chat
        print(f"(could not list {agent} conversations: {exc})", file=sys.stderr)
        return []
    return [
        f"{c.session_id}  {time.strftime('%Y-%m-%d %H:%M', time.localtime(c.updated_at))}  "
        f"{c.title[:70]}"
        for c in found
    ]
