"""Handlers for what the agent and the runtime report: agent events (stamped with their run
and session), effect feedback, timer ticks, restarts and parking.

Agent events are taken by one table, ``AGENT_EVENT_RULES``: for each event type, the phase
table's event it is, its handler while the run works, its handler once the run is being
interrupted, and whether it is taken from another session than the known one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core import agent_events as E
from threadspindle.runtime.core import effect_types as F
from threadspindle.runtime.core.guards import usable_session_id
from threadspindle.runtime.core.model import (
    AgentStatus,
    Blocker,
    OpenPart,
    Phase,
    QueueItem,
    Run,
    ThreadState,
)
from threadspindle.runtime.core.phase_table import PhaseEvent, next_phase
from threadspindle.runtime.core.transition_step import (
    RETRY_DETAIL_CHARS,
    TOOL_RESULT_CHARS,
    Step,
    Transition,
    close_run,
    end_run,
    find_blocker,
    finish_retry_line,
    interrupt_run,
    move,
    requeue_steers,
)
from threadspindle.runtime.core.transitions_schedule import on_title_changed

STDERR_TAIL_CHARS = 800  # an exit notice shows at most this much of the agent's stderr
STEER_ECHO_CHARS = 200  # a steered message is shown this long in the thread
CONTEXT_THRESHOLDS = (95, 80)  # context use (%) at which a notice suggests /compact

# --- agent events ----------------------------------------------------------------------


def _format_duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def _footer(run: Run, ev: E.TurnCompleted, at: float) -> str:
    seconds = ev.duration_ms / 1000 if ev.duration_ms is not None else max(0.0, at - run.started_at)
    parts = [_format_duration(seconds)]
    if ev.cost_usd is not None:
        parts.append(f"${ev.cost_usd:.4f}")
    if ev.model:
        parts.append(ev.model)
    percent = context_percent(ev.usage)
    if percent is not None:
        parts.append(f"{percent:.0f}% context")
    return " · ".join(parts)


def context_percent(usage: E.Usage | None) -> float | None:
    """How full the context window is after a turn (its last request's input, cached or
    not, over the window), when the CLI reports both."""
    if usage is None or not usage.context_window or usage.input_tokens is None:
        return None
    used = usage.input_tokens + (usage.cache_read_tokens or 0) + (usage.cache_write_tokens or 0)
    return 100 * used / usage.context_window


def _context_notice(step: Step, ev: E.TurnCompleted) -> None:
    """Past 80% and 95% of the context window, say so once each and suggest /compact;
    below 80% again (after a compaction) the thresholds are armed again."""
    percent = context_percent(ev.usage)
    if percent is None:
        return
    reached = next((t for t in CONTEXT_THRESHOLDS if percent >= t), 0)
    if reached > step.state.context_notice:
        step.post(
            "notice",
            f"⚠ The context window is {percent:.0f}% full: /compact summarises the "
            "conversation so far and frees it.",
        )
    if reached != step.state.context_notice:
        step.set(context_notice=reached)


def _exit_detail(exit_code: int | None, stderr_tail: str) -> tuple[str, str]:
    """How a notice names an agent's exit: the exit code, and its stderr's last lines as a
    code block (each empty when unknown)."""
    detail = f" (exit code {exit_code})" if exit_code is not None else ""
    tail = f"\n```\n{stderr_tail[-STDERR_TAIL_CHARS:]}\n```" if stderr_tail.strip() else ""
    return detail, tail


def _append_delta(step: Step, run: Run, ev: E.AgentEvent, at: float) -> bool:
    """Fast path: a text/thinking delta that continues the open part becomes one
    ``AppendOutput`` and one copy of the run. False when it is anything else."""
    part = run.open_part
    if part is None:
        return False
    if isinstance(ev, E.TextDelta):
        if part.kind != "text" or part.block != ev.block:
            return False
    elif not (isinstance(ev, E.ThinkingDelta) and part.kind == "thinking"):
        return False
    elif _verbosity(step) != "all":
        return False  # /verbosity changed mid-run: the handler drops the thinking
    seq = part.seq + 1
    # Built without validation: every field comes from state the core itself made.
    step.emit(F.AppendOutput.trusted(key=part.key, seq=seq, text=ev.text))
    step.set_run(open_part=part.replace(seq=seq), last_event_at=at)
    return True


def _open_part(step: Step, kind: F.OutputKind, text: str, block: str | None) -> None:
    """A delta that does not continue the open part (``_append_delta`` took those) starts a
    new streamed part."""
    step.seal_open_part()
    key = step.post(kind, text)
    step.set_run(open_part=OpenPart(key=key, kind=kind, block=block, seq=0))


def _tool_key(run: Run, tool_id: str) -> tuple[str, str] | None:
    keys = dict(run.tool_keys)
    if tool_id not in keys:
        return None
    return keys[tool_id], dict(run.tool_headers)[tool_id]


def _on_session_started(step: Step, ev: E.SessionStarted) -> None:
    conv = step.state.conversation
    if not usable_session_id(ev.session_id):
        step.record(f"unusable session id from the agent ignored: {ev.session_id[:80]!r}")
        return
    if conv is not None:
        # A fork's own session id: later starts resume it instead of forking again.
        fork_of = conv.fork_of if ev.session_id == conv.fork_of else None
        step.set(conversation=conv.replace(session_id=ev.session_id, fork_of=fork_of))


def _on_text(step: Step, ev: E.TextDelta) -> None:
    _open_part(step, "text", ev.text, ev.block)


def _verbosity(step: Step) -> str:
    """What the thread's runs show: its /verbosity, else the policy's default."""
    return step.state.verbosity or step.state.policy.verbosity


def _on_thinking(step: Step, ev: E.ThinkingDelta) -> None:
    if _verbosity(step) != "all":
        step.note = "thinking not shown (verbosity)"
        return
    _open_part(step, "thinking", ev.text, None)


def _on_tool_started(step: Step, ev: E.ToolStarted) -> None:
    step.seal_open_part()
    if _verbosity(step) == "text":
        step.note = "tool not shown (verbosity text)"
        return
    header = f"{ev.display_name}({ev.input_summary})"
    key = step.post("tool", header)
    run = step.state.run
    assert run is not None
    step.set_run(
        tool_keys=run.tool_keys + ((ev.tool_id, key),),
        tool_headers=run.tool_headers + ((ev.tool_id, header),),
    )


def _on_tool_finished(step: Step, ev: E.ToolFinished) -> None:
    verbosity = _verbosity(step)
    if verbosity != "all":
        run = step.state.run
        assert run is not None
        found = _tool_key(run, ev.tool_id)
        if verbosity == "tools" and found is not None:
            # One line per tool: its header and how it ended, never its output.
            key, header = found
            step.emit(F.EditOutput(key=key, text=f"{header} {'✗' if ev.is_error else '✓'}"))
        else:
            step.note = f"tool result not shown (verbosity {verbosity})"
        return
    result = ev.result
    if len(result) > TOOL_RESULT_CHARS:
        result = result[:TOOL_RESULT_CHARS] + f"… (+{len(result) - TOOL_RESULT_CHARS} chars)"
    mark = "✗ " if ev.is_error else "→ "
    run = step.state.run
    assert run is not None
    found = _tool_key(run, ev.tool_id)
    if found is None:
        step.seal_open_part()
        step.post("tool", f"(tool {ev.tool_id})\n{mark}{result}")
    else:
        key, header = found
        step.emit(F.EditOutput(key=key, text=f"{header}\n{mark}{result}"))


def _on_agent_error(step: Step, ev: E.AgentError) -> None:
    if ev.retryable:
        step.emit(F.LogNote(level="warning", message=f"agent retrying: {ev.message}"))
        _show_retry(step, ev)
    else:
        step.seal_open_part()
        step.post("notice", f"⚠ {ev.message}")


def _on_request(step: Step, ev: E.PermissionRequested | E.QuestionAsked) -> None:
    """The agent waits for the user: show the prompt and hold the queue until answered."""
    run = step.state.run
    assert run is not None
    if find_blocker(step, ev.request_id, "permission") or find_blocker(
        step, ev.request_id, "question"
    ):
        step.record(f"duplicate request {ev.request_id}", "duplicates")
        return
    step.seal_open_part()
    key = step.new_run_key()
    if isinstance(ev, E.PermissionRequested):
        step.emit(
            F.ShowPermissionPrompt(
                key=key, request_id=ev.request_id, tool=ev.tool, detail=ev.detail
            )
        )
        blocker = Blocker(
            request_id=ev.request_id,
            kind="permission",
            key=key,
            run_id=run.id,
            text=f"{ev.tool}: {ev.detail}",
        )
    else:
        step.emit(
            F.ShowQuestion(
                key=key,
                request_id=ev.request_id,
                question=ev.question,
                options=ev.options,
                multiple=ev.multiple,
            )
        )
        blocker = Blocker(
            request_id=ev.request_id, kind="question", key=key, run_id=run.id, text=ev.question
        )
    step.set(blockers=step.state.blockers + (blocker,))
    step.emit(F.Typing(on=False))


def _refuse_request(step: Step, ev: E.PermissionRequested | E.QuestionAsked) -> None:
    """The user already moved on: refuse at once so the agent is not left waiting."""
    if isinstance(ev, E.PermissionRequested):
        step.emit(F.AnswerPermission(request_id=ev.request_id, allow=False))
    else:
        step.emit(F.AnswerQuestion(request_id=ev.request_id, answer=None))
    step.note = "request during an interrupt refused"


def _not_shown(step: Step, ev: E.AgentEvent) -> None:
    """Output of a run the user interrupted is not shown any more."""
    step.note = f"{ev.type} while interrupting: not shown"


def _show_retry(step: Step, ev: E.AgentError) -> None:
    """The CLI retries a failed model call: one status line per run says so, edited in
    place at each retry and finalised when the run ends (``close_run``)."""
    run = step.state.run
    assert run is not None
    attempt = ev.attempt if ev.attempt is not None else run.retries + 1
    of = f" of {ev.max_retries}" if ev.max_retries else ""
    text = f"⚠ The model API is unreachable — retry {attempt}{of}"
    detail = " ".join(ev.message.split())[:RETRY_DETAIL_CHARS]
    if detail:
        text += f"\n-# {detail}"
    if run.retry_key is None:
        step.seal_open_part()
        key = step.post("status", text)
        step.set_run(retry_key=key, retries=attempt)
    else:
        step.emit(F.EditOutput(key=run.retry_key, text=text))
        step.set_run(retries=attempt)


def on_turn_end(step: Step, ev: E.TurnCompleted | E.TurnAborted) -> None:
    run = step.state.run
    assert run is not None
    step.seal_open_part()
    # The retry line first, so the thread reads in order: finalised, then the outcome.
    completed = isinstance(ev, E.TurnCompleted) and not ev.is_error
    finish_retry_line(step, answered=completed and run.end_reason is None)
    if isinstance(ev, E.TurnCompleted):
        conv = step.state.conversation
        if usable_session_id(ev.session_id) and conv is not None:
            fork_of = conv.fork_of if ev.session_id == conv.fork_of else None
            step.set(conversation=conv.replace(session_id=ev.session_id, fork_of=fork_of))
        if run.end_reason is None:
            # A failed run ends with its notice instead of a footer (docs/commands.md).
            if ev.is_error:
                step.post(
                    "notice", f"⚠ The turn failed: {ev.error or 'the agent reported an error'}"
                )
                step.count("failed")
            else:
                step.count("completed")
                step.post("footer", _footer(run, ev, step.action.at))
                _context_notice(step, ev)
    elif run.end_reason is None:
        detail, tail = _exit_detail(ev.exit_code, ev.stderr_tail)
        step.post("notice", f"⚠ The turn ended early: {ev.reason}{detail}{tail}")
        step.count("failed")
    close_run(step)  # on_agent_event then applies the table's turn_end move


def _on_title(step: Step, ev: E.TitleChanged) -> None:
    on_title_changed(step, ev.title)


def _take_steer(step: Step, steer_id: str) -> QueueItem | None:
    """The pending steered message ``steer_id`` of the run, removed from it (None: it is
    not pending, e.g. already requeued)."""
    run = step.state.run
    assert run is not None
    item = next((s for s in run.steers if s.id == steer_id), None)
    if item is None:
        step.note = f"steer {steer_id} is not pending"
        return None
    step.set_run(steers=tuple(s for s in run.steers if s.id != steer_id))
    return item


def _on_steer_taken(step: Step, ev: E.SteerTaken) -> None:
    item = _take_steer(step, ev.steer_id)
    if item is None:
        return
    step.count("steers_taken")
    if step.state.run is not None and step.state.run.phase is not Phase.INTERRUPTING:
        step.seal_open_part()
        text = item.text
        if len(text) > STEER_ECHO_CHARS:
            text = text[:STEER_ECHO_CHARS] + "…"
        step.post("marker", f"↪ {item.author_name or item.author_id} (added to this turn): {text}")


def _on_steer_refused(step: Step, ev: E.SteerRefused) -> None:
    item = _take_steer(step, ev.steer_id)
    if item is None:
        return
    requeue_steers(step, (item,))
    if step.state.run is not None and step.state.run.phase is not Phase.INTERRUPTING:
        step.seal_open_part()
        why = f" ({ev.reason})" if ev.reason else ""
        step.post("notice", f"The running turn could not take a message{why}: it is sent next.")


class AgentEventRule(NamedTuple):
    """How the core takes one type of agent event of the current run."""

    phase_event: PhaseEvent  # the phase table's event it is (``agent_event`` or ``turn_end``)
    handle: Callable[[Step, Any], None]  # while the run is dispatching or running
    while_interrupting: Callable[[Step, Any], None]  # once the run is being interrupted
    any_session: bool = False  # taken even when stamped with another session than the known


# Every agent event type, as data: which phase move it is and what it does. Before the
# handler runs, the run's last-event time is updated; after it, the phase move is applied
# (``turn_end`` handlers have closed the run by then, ``close_run``). ``SessionStarted``
# and ``TurnCompleted`` carry the session id, so a new id is news, not a stale event.
AGENT_EVENT_RULES: dict[type[E.AgentEvent], AgentEventRule] = {
    E.SessionStarted: AgentEventRule(
        "agent_event", _on_session_started, _on_session_started, any_session=True
    ),
    E.TextDelta: AgentEventRule("agent_event", _on_text, _not_shown),
    E.ThinkingDelta: AgentEventRule("agent_event", _on_thinking, _not_shown),
    E.ToolStarted: AgentEventRule("agent_event", _on_tool_started, _not_shown),
    E.ToolFinished: AgentEventRule("agent_event", _on_tool_finished, _not_shown),
    E.AgentError: AgentEventRule("agent_event", _on_agent_error, _not_shown),
    E.PermissionRequested: AgentEventRule("agent_event", _on_request, _refuse_request),
    E.QuestionAsked: AgentEventRule("agent_event", _on_request, _refuse_request),
    E.TurnCompleted: AgentEventRule("turn_end", on_turn_end, on_turn_end, any_session=True),
    E.TurnAborted: AgentEventRule("turn_end", on_turn_end, on_turn_end),
    # Also taken outside a run (then without a phase move): see ``on_agent_event``.
    E.TitleChanged: AgentEventRule("agent_event", _on_title, _on_title, any_session=True),
    E.SteerTaken: AgentEventRule("agent_event", _on_steer_taken, _on_steer_taken),
    E.SteerRefused: AgentEventRule("agent_event", _on_steer_refused, _on_steer_refused),
}


def on_agent_event(step: Step, a: A.AgentEventReceived) -> None:
    run = step.state.run
    ev = a.event
    if isinstance(ev, E.TitleChanged) and (run is None or a.run_id != run.id):
        # The conversation's title, not the run's: taken between turns too (no phase move).
        on_title_changed(step, ev.title)
        return
    if run is None or a.run_id != run.id:
        step.record(
            f"stale {ev.type} of run {a.run_id} (current: {run.id if run else None})", "stale_drops"
        )
        return
    rule = AGENT_EVENT_RULES[type(ev)]
    conv = step.state.conversation
    known = conv.session_id if conv is not None else None
    if (
        known is not None
        and a.session_id is not None
        and a.session_id != known
        and not rule.any_session
    ):
        step.record(f"stale {ev.type} of session {a.session_id} (current: {known})", "stale_drops")
        return
    interrupting = run.phase is Phase.INTERRUPTING
    # The common case, a delta continuing the open part, is one copy of the run.
    if interrupting or not _append_delta(step, run, ev, a.at):
        step.set_run(last_event_at=a.at)
        (rule.while_interrupting if interrupting else rule.handle)(step, ev)
    move(step, rule.phase_event)


def continue_delta(state: ThreadState, a: A.AgentEventReceived) -> Transition | None:
    """The transition of the commonest action on its own, or None for ``transition``'s
    general path: a text (or shown thinking) delta of the current run continuing its open
    part, which becomes one ``AppendOutput`` and one copy of the run and the state.

    Every condition under which the general path would do anything more is checked here
    and sends the action there instead: another thread, run or session; a phase move; a
    run being interrupted; a part it does not continue; a note to clear; the workspace's
    session to update (``after_step``). The result is the general path's, to the byte and
    the fields set (tests/runtime/test_state_machine.py compares both on every delta
    action, test_delta_fast_path.py on each case). It spares the ``Step``, the hooks and
    the drain: 11.4 -> 6-7 us per delta in a micro-benchmark, and deltas are most of the
    actions of a busy process."""
    run = state.run
    if run is None or a.run_id != run.id or a.thread_id != state.thread_id:
        return None
    part = run.open_part
    if part is None or state.last_note is not None:
        return None
    ev = a.event
    if isinstance(ev, E.TextDelta):
        if part.kind != "text" or part.block != ev.block:
            return None
    elif isinstance(ev, E.ThinkingDelta):
        if part.kind != "thinking" or (state.verbosity or state.policy.verbosity) != "all":
            return None
    else:
        return None
    current = run.phase
    if current is Phase.INTERRUPTING or next_phase(current, "agent_event") is not current:
        return None
    conv = state.conversation
    session = conv.session_id if conv is not None else None
    if session is not None:
        if a.session_id is not None and a.session_id != session:
            return None  # a stale session: the general path records it
        if session != state.workspace.agent_session:
            return None  # ``after_step`` tracks the new session
    seq = part.seq + 1
    effect = F.AppendOutput.trusted(key=part.key, seq=seq, text=ev.text)
    new_run = run.replace(open_part=part.replace(seq=seq), last_event_at=a.at)
    return Transition.trusted(state=state.replace(run=new_run), effects=(effect,), note=None)


# --- effect feedback, timers, runtime -------------------------------------------------


def on_output_posted(step: Step, a: A.OutputPosted) -> None:
    # The key -> platform id mapping lives in the log (this action); nothing to decide.
    return


def on_effect_failed(step: Step, a: A.EffectFailed) -> None:
    step.emit(F.LogNote(level="warning", message=f"{a.effect} failed: {a.reason}"))
    run = step.state.run
    if a.effect == "open_thread":
        step.reply(f"⚠ Could not open a thread for the fork: {a.reason}")
        return
    if a.effect == "steer_agent" and run is not None:
        # The steer never reached the agent: it becomes a normal prompt.
        lost = tuple(s for s in run.steers if a.key == f"{step.thread}/steer/{s.id}")
        requeue_steers(step, lost)
        return
    if a.effect in ("prompt_agent", "start_agent"):
        step.set(agent_status=AgentStatus.STOPPED)
        if run is not None:
            if run.end_reason is None:
                step.post("notice", f"⚠ The agent could not take the prompt: {a.reason}")
                step.count("failed")
            end_run(step, "agent_exit")
        elif step.state.conversation is not None:
            step.reply(f"⚠ The agent could not start: {a.reason}")


def on_thread_forked(step: Step, a: A.ThreadForked) -> None:
    step.reply(f"↳ Forked into {a.label}: the conversation continues there too.")


def on_agent_connected(step: Step, a: A.AgentConnected) -> None:
    step.count("listener_starts")
    step.set(agent_status=AgentStatus.READY)
    if a.capabilities is not None:
        step.set(capabilities=a.capabilities)
    conv = step.state.conversation
    if conv is not None and usable_session_id(a.session_id) and conv.session_id is None:
        step.set(conversation=conv.replace(session_id=a.session_id))


def on_agent_exited(step: Step, a: A.AgentExited) -> None:
    step.set(agent_status=AgentStatus.STOPPED)
    run = step.state.run
    if run is None:
        return
    if run.end_reason is None:
        detail, tail = _exit_detail(a.exit_code, a.stderr_tail)
        step.post("notice", f"⚠ The agent exited during the run{detail}.{tail}")
        step.count("failed")
    end_run(step, "agent_exit")


def on_tick(step: Step, a: A.Tick) -> None:
    run = step.state.run
    if run is None:
        return
    policy = step.state.policy
    if run.phase is Phase.INTERRUPTING:
        if run.interrupt_at is not None and a.at - run.interrupt_at >= policy.interrupt_grace_s:
            step.post(
                "notice",
                f"⚠ The agent did not stop within {policy.interrupt_grace_s:g}s: it was restarted.",
            )
            step.emit(F.StopAgent(reason="interrupt timed out"))
            step.set(agent_status=AgentStatus.STOPPED)
            end_run(step, "force_end")
        return
    if not step.state.blockers and a.at - run.last_event_at >= policy.turn_idle_timeout_s:
        step.post(
            "notice",
            f"⚠ No output from the agent for {policy.turn_idle_timeout_s:g}s: ending the turn.",
        )
        interrupt_run(step, "timed out")


def on_recovered(step: Step, a: A.RuntimeRecovered) -> None:
    # The process died: no agent is running any more, whatever the log last said.
    step.set(agent_status=AgentStatus.STOPPED)
    if step.state.run is not None:
        if step.state.run.end_reason is None:
            step.post(
                "notice",
                "⚠ Spindle restarted while this run was active: it was "
                "interrupted. Queued prompts continue.",
            )
            step.set_run(end_reason="runtime restarted")
            step.count("stopped")
        end_run(step, "force_end")


def on_parked(step: Step, a: A.ThreadParked) -> None:
    # Stop the run here, while the chat can still be told, instead of letting the agent's
    # exit look like a crash; the queue is kept for when the thread wakes.
    if step.state.run is not None:
        if step.state.run.end_reason is None:
            queued = len(step.state.queue)
            more = f" {queued} queued prompt(s) will run when it is back." if queued else ""
            step.post("notice", f"⚠ Spindle stopped this run ({a.reason}).{more}")
            step.set_run(end_reason=a.reason)
            step.count("stopped")
        end_run(step, "force_end")
    if step.state.agent_status is not AgentStatus.STOPPED:
        step.emit(F.StopAgent(reason=a.reason))
    step.set(parked=True, agent_status=AgentStatus.STOPPED)


def on_policy_set(step: Step, a: A.PolicySet) -> None:
    step.set(policy=a.policy)


# --- the agent-event table, as docs/state-machine.md shows it -------------------------

_WHILE_INTERRUPTING: dict[Callable[[Step, Any], None], str] = {
    _not_shown: "not shown (noted)",
    _refuse_request: "refused at once",
    _on_steer_taken: "taken (no marker)",
    _on_steer_refused: "requeued (no notice)",
}


def render_agent_event_rules() -> str:
    """``AGENT_EVENT_RULES`` as a Markdown table (``tests/runtime/test_diagram.py`` checks
    that docs/state-machine.md carries this copy)."""
    lines = [
        "| agent event | phase event | while interrupting | stamped with another session |",
        "|---|---|---|---|",
    ]
    for event_type, rule in AGENT_EVENT_RULES.items():
        name = event_type.model_fields["type"].default
        interrupting = _WHILE_INTERRUPTING.get(rule.while_interrupting, "taken as usual")
        other = "taken (it carries the session id)" if rule.any_session else "stale: dropped"
        lines.append(f"| `{name}` | {rule.phase_event} | {interrupting} | {other} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_agent_event_rules(), end="")
