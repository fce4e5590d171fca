"""The state of one chat thread: conversation, run, queue, blockers, outputs, counters.

Everything here is a frozen pydantic model, so a state is a value: the transition builds a
new one, the store swaps it in, and a state round-trips through JSON unchanged. Nothing here
is a flag that could be derived: ``runtime.core.guards`` derives ``is_busy`` and friends.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from threadspindle.runtime.core.frozen import Frozen
from threadspindle.runtime.core.workspace_model import Workspace, WorkspacePolicy

__all__ = [
    "AgentCapabilities",
    "AgentStatus",
    "Attachment",
    "Blocker",
    "Conversation",
    "Counters",
    "OpenPart",
    "Phase",
    "Policy",
    "QueueItem",
    "Run",
    "Schedule",
    "ThreadState",
    "Verbosity",
]


class Phase(StrEnum):
    """Where the thread's run is. Exactly one run can be outside IDLE at a time."""

    IDLE = "idle"  # no active run
    DISPATCHING = "dispatching"  # the prompt was handed to the agent; no event of it yet
    RUNNING = "running"  # the agent is producing events for the run
    INTERRUPTING = "interrupting"  # an interrupt was sent; waiting for the turn to end


class AgentStatus(StrEnum):
    """The agent process/connection as last reported by effect feedback."""

    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"


# What a run shows in the thread: "text" only the answer (and notices, the footer);
# "tools" the answer plus one line per tool call; "all" everything (thinking, tool output).
Verbosity = Literal["text", "tools", "all"]


class AgentCapabilities(Frozen):
    """What the connected agent can do besides prompts and interrupts, as its adapter
    declares it (``AgentPort.capabilities``, reported with ``AgentConnected``)."""

    steer: bool = False  # take a message into the running turn without aborting it
    compact: bool = False  # run the CLI's own compaction of the conversation (/compact)
    fork: bool = False  # start a new session continuing a copy of an existing one (/fork)
    rollback: bool = False  # drop its last turns from the conversation (/undo)
    restore: bool = False  # bring turns it rolled back into the conversation again (/redo)
    shell: bool = False  # run a `!` command in its own shell, into its context


class Policy(Frozen):
    """Per-thread limits, set by the runtime from configuration (and recorded in the log)."""

    queue_limit: int = 50
    allowed_roots: tuple[str, ...] = ()
    interrupt_grace_s: float = 10.0  # INTERRUPTING longer than this: stop the agent
    turn_idle_timeout_s: float = 600.0  # no agent event for this long: end the turn
    workspace: WorkspacePolicy = WorkspacePolicy()  # checkpoints, shell allow-list (issue 16)
    verbosity: Verbosity = "all"  # what a run shows unless /verbosity says otherwise


class Attachment(Frozen):
    name: str
    content_type: str | None = None
    size: int | None = None
    path: str | None = None  # saved into the workdir by ingress
    url: str | None = None
    inline_text: str | None = None  # small text files are inlined


class QueueItem(Frozen):
    """A prompt waiting for its turn. ``id`` comes from ingress (message/interaction id)."""

    id: str
    author_id: str
    author_name: str
    text: str
    attachments: tuple[Attachment, ...] = ()
    source_message_id: str | None = None
    from_queue: bool = False  # came from /queue or the " queue" suffix: never interrupts
    command: str | None = None  # "compact": the run is the CLI's compaction, not a prompt
    queued_at: float


class Schedule(Frozen):
    """A prompt that fires later (``/schedule``), or an agent's own wake-up. ``due_at`` is
    when it fires next (seconds since the epoch, computed by ingress or the runtime's timer:
    the core never reads a clock); a ``cron`` schedule is re-armed by the timer's next time."""

    id: str  # "s1", "s2" ...: from ``Counters.schedules``, shown to the user
    text: str
    author_id: str
    author_name: str = ""
    due_at: float
    cron: str | None = None
    label: str = ""  # how the user said when ("in 2h", "*/30 * * * *"), for /schedule list
    wakeup: bool = False  # set by the agent (MCP tool): a user message cancels it
    created_at: float


class Conversation(Frozen):
    agent: str
    workdir: str
    session_id: str | None = None  # the CLI's resume id, learned from its events
    model: str | None = None
    system_instruction: str | None = None
    # The session this conversation is a fork of, until the fork's own session id is
    # known: the first start forks it (``StartAgent.fork``), later ones resume the fork.
    fork_of: str | None = None


class OpenPart(Frozen):
    """The streamed output part (text or thinking) currently receiving deltas."""

    key: str
    kind: str  # "text" | "thinking"
    block: str | None = None
    seq: int = 0  # number of deltas appended so far (the idempotency of appends)


class Run(Frozen):
    id: str
    prompt: QueueItem
    phase: Phase
    started_at: float
    last_event_at: float
    interrupt_at: float | None = None
    end_reason: str | None = None  # set when interrupted/aborted: no footer then
    parts: int = 0  # outputs opened so far; the next key is f"{id}/{parts}"
    open_part: OpenPart | None = None
    tool_keys: tuple[tuple[str, str], ...] = ()  # (tool_id, output key)
    tool_headers: tuple[tuple[str, str], ...] = ()  # (tool_id, header text)
    retry_key: str | None = None  # the status line showing the model API's retries
    retries: int = 0  # the last retry it showed
    # Steered messages handed to the agent for this run and not yet taken or refused: a
    # run that ends with some left puts them at the head of the queue (never lost), and a
    # taken one leaves here for good (never sent twice).
    steers: tuple[QueueItem, ...] = ()


class Blocker(Frozen):
    """A permission or question request waiting for the user's answer."""

    request_id: str
    kind: str  # "permission" | "question"
    key: str  # output key of the rendered prompt
    run_id: str
    text: str


class Counters(Frozen):
    queued: int = 0
    dequeued: int = 0
    rejected: int = 0
    removed: int = 0
    interrupts: int = 0
    aborts: int = 0
    completed: int = 0
    failed: int = 0
    stale_drops: int = 0
    ignored: int = 0
    duplicates: int = 0
    listener_starts: int = 0
    runs: int = 0  # runs started; also the source of run ids
    replies: int = 0
    illegal_moves: int = 0  # phase moves the table does not have (recorded, never applied)
    schedules: int = 0  # schedules made so far; also the source of schedule ids
    schedules_fired: int = 0
    steers: int = 0  # messages handed to a running turn (SteerAgent)
    steers_taken: int = 0  # ... that the agent took into that turn
    stopped: int = 0  # runs Spindle itself ended: a shutdown, a park, a restart
    # The agent's wake-ups since a person last wrote in the thread (reset then): a chain of
    # them is held to ``WAKEUP_CHAIN_LIMIT`` (transitions_schedule).
    wakeups_unattended: int = 0


class ThreadState(Frozen):
    thread_id: str
    policy: Policy = Policy()
    conversation: Conversation | None = None
    agent_status: AgentStatus = AgentStatus.STOPPED
    run: Run | None = None
    queue: tuple[QueueItem, ...] = ()
    blockers: tuple[Blocker, ...] = ()
    emitted_keys: tuple[str, ...] = ()  # keys of outputs of the current run (and recent)
    last_prompt: QueueItem | None = None  # for /model: retry the last prompt
    recent_action_ids: tuple[str, ...] = ()  # duplicate ingress delivery is dropped
    counters: Counters = Counters()
    parked: bool = False  # the runtime put the actor away; user ingress or a restart wakes it
    last_note: str | None = None  # why the last action was ignored or rejected
    workspace: Workspace = Workspace()  # checkpoints, shell, worktree (transitions_workspace)
    schedules: tuple[Schedule, ...] = ()  # pending /schedule prompts and agent wake-ups
    verbosity: Verbosity | None = None  # /verbosity; None: the policy's default
    title: str | None = None  # the agent's session title, as last shown as the thread's name
    capabilities: AgentCapabilities | None = None  # of the connected agent; None: unknown
    context_notice: int = 0  # the context-use threshold (80, 95) last told; 0: below

    @classmethod
    def new(cls, thread_id: str, policy: Policy | None = None) -> ThreadState:
        return cls(thread_id=thread_id, policy=policy or Policy())
