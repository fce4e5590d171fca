"""Typed agent events: what every agent adapter turns its CLI's wire format into.

Adapters (``agents``) produce these, unstamped. The thread's listener wraps each one
in an ``AgentEventReceived`` action stamped with the run and session it belongs to, so the
pure core can drop events of a stale run (the session demux invariant).
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeVar

from pydantic import Field

from threadspindle.runtime.core.frozen import Frozen

__all__ = [
    "MAX_EVENT_CHARS",
    "MAX_EVENT_ITEMS",
    "AgentEvent",
    "AgentError",
    "PermissionRequested",
    "QuestionAsked",
    "SessionStarted",
    "SteerRefused",
    "SteerTaken",
    "TextDelta",
    "ThinkingDelta",
    "ToolFinished",
    "TitleChanged",
    "ToolStarted",
    "TurnAborted",
    "TurnCompleted",
    "Usage",
    "bounded_event",
    "continues_delta",
    "joined_delta",
    "split_delta",
]


class Usage(Frozen):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    context_window: int | None = None


class SessionStarted(Frozen):
    """The CLI told us its session/thread id (and maybe its model)."""

    type: Literal["session_started"] = "session_started"
    session_id: str
    model: str | None = None


class TextDelta(Frozen):
    """A piece of answer text. ``block`` separates text blocks of one turn (new message)."""

    type: Literal["text_delta"] = "text_delta"
    text: str
    block: str | None = None


class ThinkingDelta(Frozen):
    type: Literal["thinking_delta"] = "thinking_delta"
    text: str


class ToolStarted(Frozen):
    """A tool call began. ``display_name`` is already cleaned by the adapter."""

    type: Literal["tool_started"] = "tool_started"
    tool_id: str
    name: str
    display_name: str
    input_summary: str = ""


class ToolFinished(Frozen):
    type: Literal["tool_finished"] = "tool_finished"
    tool_id: str
    result: str = ""
    is_error: bool = False


class PermissionRequested(Frozen):
    """The agent asks whether it may use a tool; the thread must answer allow/deny."""

    type: Literal["permission_requested"] = "permission_requested"
    request_id: str
    tool: str
    detail: str = ""


class QuestionAsked(Frozen):
    """The agent asks the user a question (e.g. Claude Code's AskUserQuestion)."""

    type: Literal["question_asked"] = "question_asked"
    request_id: str
    question: str
    options: tuple[str, ...] = ()
    multiple: bool = False


class TurnCompleted(Frozen):
    """The CLI's own completion event ended the turn."""

    type: Literal["turn_completed"] = "turn_completed"
    session_id: str | None = None
    cost_usd: float | None = None
    duration_ms: int | None = None
    usage: Usage | None = None
    model: str | None = None
    is_error: bool = False
    error: str | None = None


class TurnAborted(Frozen):
    """The turn ended without a normal completion: interrupted, or the process went away."""

    type: Literal["turn_aborted"] = "turn_aborted"
    reason: str
    exit_code: int | None = None
    stderr_tail: str = ""


class AgentError(Frozen):
    """An error the agent reported; ``retryable`` when the CLI will try again by itself.
    A retry says which one it is when the adapter knows: ``attempt`` (1 for the first
    retry) of at most ``max_retries``."""

    type: Literal["agent_error"] = "agent_error"
    message: str
    retryable: bool = False
    attempt: int | None = None
    max_retries: int | None = None


class TitleChanged(Frozen):
    """The CLI named (or renamed) its session: Codex ``thread/name/updated``, an OpenCode
    session title, Claude Code's summary. It may come between turns: it belongs to the
    conversation, not to a run."""

    type: Literal["title_changed"] = "title_changed"
    title: str


class SteerTaken(Frozen):
    """The agent took the steered message ``steer_id`` into the running turn. An adapter
    emits it before that turn's end (in stream order), never after."""

    type: Literal["steer_taken"] = "steer_taken"
    steer_id: str


class SteerRefused(Frozen):
    """The agent did not take the steered message ``steer_id`` (the turn had ended, the
    CLI said no): it becomes a normal prompt."""

    type: Literal["steer_refused"] = "steer_refused"
    steer_id: str
    reason: str = ""


def continues_delta(first: object, then: object) -> bool:
    """True when ``then`` continues ``first`` as one delta: two text deltas of one text
    block, or two thinking deltas. Such a run of deltas is worth one delta with the texts
    joined (``joined_delta``): the runtime merges the deltas an agent's reader handed over
    together into one action, and the log records that one, so replay sees the same."""
    if isinstance(first, TextDelta):
        return isinstance(then, TextDelta) and then.block == first.block
    return isinstance(first, ThinkingDelta) and isinstance(then, ThinkingDelta)


def joined_delta(first: TextDelta | ThinkingDelta, texts: list[str]) -> TextDelta | ThinkingDelta:
    """One delta of ``first``'s kind (and block) carrying ``texts`` joined: a run of deltas
    for which ``continues_delta`` held, as one."""
    text = "".join(texts)
    if isinstance(first, TextDelta):
        return TextDelta.trusted(text=text, block=first.block)
    return ThinkingDelta.trusted(text=text)


# The most one event carries, so that an action, its log row (a JetStream message above
# all: 1 MiB by default) and the effects made of it stay bounded whatever an agent writes
# (a line may hold up to 32 MiB). A delta past it is split into several, losing nothing;
# any other text is cut (it is shown in a card, a notice or a prompt, never whole).
MAX_EVENT_CHARS = 16_384
MAX_EVENT_ITEMS = 64  # a question's options

_E = TypeVar("_E", bound=Frozen)


def split_delta(event: TextDelta | ThinkingDelta) -> list[TextDelta | ThinkingDelta]:
    """``event`` as consecutive deltas of at most ``MAX_EVENT_CHARS`` each, whose texts
    joined are its text (itself alone when it is short enough)."""
    text = event.text
    if len(text) <= MAX_EVENT_CHARS:
        return [event]
    pieces = [text[i : i + MAX_EVENT_CHARS] for i in range(0, len(text), MAX_EVENT_CHARS)]
    if isinstance(event, TextDelta):
        return [TextDelta.trusted(text=piece, block=event.block) for piece in pieces]
    return [ThinkingDelta.trusted(text=piece) for piece in pieces]


def _cut(text: str) -> str:
    return text if len(text) <= MAX_EVENT_CHARS else text[: MAX_EVENT_CHARS - 1] + "…"


def bounded_event(event: _E) -> _E:
    """``event`` with each text of it cut to ``MAX_EVENT_CHARS`` (an ellipsis last) and a
    list of texts to ``MAX_EVENT_ITEMS`` items; ``event`` itself when nothing is over (the
    usual case). Not for deltas: ``split_delta`` keeps all of theirs."""
    changes: dict[str, object] = {}
    for name, value in event.__dict__.items():
        if isinstance(value, str):
            if len(value) > MAX_EVENT_CHARS:
                changes[name] = _cut(value)
        elif isinstance(value, tuple) and (
            len(value) > MAX_EVENT_ITEMS
            or any(isinstance(v, str) and len(v) > MAX_EVENT_CHARS for v in value)
        ):
            changes[name] = tuple(
                _cut(v) if isinstance(v, str) else v for v in value[:MAX_EVENT_ITEMS]
            )
    return event.replace(**changes) if changes else event


AgentEvent = Annotated[
    SessionStarted
    | TextDelta
    | ThinkingDelta
    | ToolStarted
    | ToolFinished
    | PermissionRequested
    | QuestionAsked
    | TurnCompleted
    | TurnAborted
    | AgentError
    | TitleChanged
    | SteerTaken
    | SteerRefused,
    Field(discriminator="type"),
]
