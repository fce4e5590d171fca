"""Handlers for what the agent and the runtime report: agent events (stamped with their run
and session), effect feedback, timer ticks, restarts and parking.
"""

from __future__ import annotations

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core import agent_events as E
from threadspindle.runtime.core import effect_types as F
from threadspindle.runtime.core.model import (
    AgentStatus,
    Blocker,
    OpenPart,
    Phase,
    Run,
)
from threadspindle.runtime.core.phase_table import next_phase
from threadspindle.runtime.core.transition_step import (
    RETRY_DETAIL_CHARS,
    TOOL_RESULT_CHARS,
    Step,
    end_run,
    find_blocker,
    finish_retry_line,
    interrupt_run,
)

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
    usage = ev.usage
    if usage and usage.context_window and usage.input_tokens is not None:
        used = usage.input_tokens + (usage.cache_read_tokens or 0)
        parts.append(f"{100 * used / usage.context_window:.0f}% context")
    return " · ".join(parts)


def _append_delta(step: Step, run: Run, ev: E.AgentEvent, **run_update: object) -> bool:
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
    seq = part.seq + 1
    # Built without validation: every field comes from state the core itself made.
    step.emit(F.AppendOutput.trusted(key=part.key, seq=seq, text=ev.text))
    step.set_run(open_part=part.replace(seq=seq), **run_update)
    return True


def _stream(step: Step, kind: str, text: str, block: str | None) -> None:
    run = step.state.run
    assert run is not None
    part = run.open_part
    if part is not None and part.kind == kind and part.block == block:
        seq = part.seq + 1
        step.emit(F.AppendOutput(key=part.key, seq=seq, text=text))
        step.set_run(open_part=part.replace(seq=seq))
        return
    step.seal_open_part()
    key = step.post(kind, text)  # type: ignore[arg-type]
    step.set_run(open_part=OpenPart(key=key, kind=kind, block=block, seq=0))


def _tool_key(run: Run, tool_id: str) -> tuple[str, str] | None:
    keys = dict(run.tool_keys)
    if tool_id not in keys:
        return None
    return keys[tool_id], dict(run.tool_headers)[tool_id]


def on_agent_event(step: Step, a: A.AgentEventReceived) -> None:
    run = step.state.run
    conv = step.state.conversation
    ev = a.event
    if run is None or a.run_id != run.id:
        step.record(
            f"stale {ev.type} of run {a.run_id} (current: {run.id if run else None})", "stale_drops"
        )
        return
    known = conv.session_id if conv is not None else None
    if (
        known is not None
        and a.session_id is not None
        and a.session_id != known
        and not isinstance(ev, E.SessionStarted | E.TurnCompleted)
    ):
        step.record(f"stale {ev.type} of session {a.session_id} (current: {known})", "stale_drops")
        return
    target = next_phase(run.phase, "agent_event")
    moved = {"phase": target} if target is not None and target is not run.phase else {}
    interrupting = (target or run.phase) is Phase.INTERRUPTING
    if not interrupting and _append_delta(step, run, ev, last_event_at=a.at, **moved):
        return  # the common case, a delta continuing the open part: one copy of the run
    step.set_run(last_event_at=a.at, **moved)

    if isinstance(ev, E.SessionStarted):
        if conv is not None:
            update = {"session_id": ev.session_id}
            step.set(conversation=conv.replace(**update))
    elif isinstance(ev, E.TurnCompleted | E.TurnAborted):
        on_turn_end(step, ev)
    elif isinstance(ev, E.PermissionRequested | E.QuestionAsked):
        if interrupting:
            # The user already moved on: refuse at once so the agent is not left waiting.
            if isinstance(ev, E.PermissionRequested):
                step.emit(F.AnswerPermission(request_id=ev.request_id, allow=False))
            else:
                step.emit(F.AnswerQuestion(request_id=ev.request_id, answer=None))
            step.note = "request during an interrupt refused"
            return
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
    elif interrupting:
        # Output of a run the user interrupted is not shown any more.
        step.note = f"{ev.type} while interrupting: not shown"
    elif isinstance(ev, E.TextDelta):
        _stream(step, "text", ev.text, ev.block)
    elif isinstance(ev, E.ThinkingDelta):
        _stream(step, "thinking", ev.text, None)
    elif isinstance(ev, E.ToolStarted):
        step.seal_open_part()
        header = f"{ev.display_name}({ev.input_summary})"
        key = step.post("tool", header)
        current = step.state.run
        assert current is not None
        step.set_run(
            tool_keys=current.tool_keys + ((ev.tool_id, key),),
            tool_headers=current.tool_headers + ((ev.tool_id, header),),
        )
    elif isinstance(ev, E.ToolFinished):
        result = (
            ev.result
            if len(ev.result) <= TOOL_RESULT_CHARS
            else (
                ev.result[:TOOL_RESULT_CHARS] + f"… (+{len(ev.result) - TOOL_RESULT_CHARS} chars)"
            )
        )
        mark = "✗ " if ev.is_error else "→ "
        current = step.state.run
        assert current is not None
        found = _tool_key(current, ev.tool_id)
        if found is None:
            step.seal_open_part()
            step.post("tool", f"(tool {ev.tool_id})\n{mark}{result}")
        else:
            key, header = found
            step.emit(F.EditOutput(key=key, text=f"{header}\n{mark}{result}"))
    elif isinstance(ev, E.AgentError):
        if ev.retryable:
            step.emit(F.LogNote(level="warning", message=f"agent retrying: {ev.message}"))
            _show_retry(step, ev)
        else:
            step.seal_open_part()
            step.post("notice", f"⚠ {ev.message}")


def _show_retry(step: Step, ev: E.AgentError) -> None:
    """The CLI retries a failed model call: one status line per run says so, edited in
    place at each retry and finalised when the run ends (``end_run``)."""
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
        if ev.session_id and conv is not None:
            step.set(conversation=conv.replace(session_id=ev.session_id))
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
    elif run.end_reason is None:
        detail = f" (exit code {ev.exit_code})" if ev.exit_code is not None else ""
        tail = f"\n```\n{ev.stderr_tail[-800:]}\n```" if ev.stderr_tail.strip() else ""
        step.post("notice", f"⚠ The turn ended early: {ev.reason}{detail}{tail}")
        step.count("failed")
    end_run(step, "turn_end")


# --- effect feedback, timers, runtime -------------------------------------------------


def on_output_posted(step: Step, a: A.OutputPosted) -> None:
    # The key -> platform id mapping lives in the log (this action); nothing to decide.
    return


def on_effect_failed(step: Step, a: A.EffectFailed) -> None:
    step.emit(F.LogNote(level="warning", message=f"{a.effect} failed: {a.reason}"))
    run = step.state.run
    if a.effect in ("prompt_agent", "start_agent"):
        step.set(agent_status=AgentStatus.STOPPED)
        if run is not None:
            if run.end_reason is None:
                step.post("notice", f"⚠ The agent could not take the prompt: {a.reason}")
                step.count("failed")
            end_run(step, "agent_exit")
        elif step.state.conversation is not None:
            step.reply(f"⚠ The agent could not start: {a.reason}")


def on_agent_connected(step: Step, a: A.AgentConnected) -> None:
    step.count("listener_starts")
    step.set(agent_status=AgentStatus.READY)
    conv = step.state.conversation
    if conv is not None and a.session_id and conv.session_id is None:
        step.set(conversation=conv.replace(session_id=a.session_id))


def on_agent_exited(step: Step, a: A.AgentExited) -> None:
    step.set(agent_status=AgentStatus.STOPPED)
    run = step.state.run
    if run is None:
        return
    if run.end_reason is None:
        detail = f" (exit code {a.exit_code})" if a.exit_code is not None else ""
        tail = f"\n```\n{a.stderr_tail[-800:]}\n```" if a.stderr_tail.strip() else ""
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
        end_run(step, "force_end")
    if step.state.agent_status is not AgentStatus.STOPPED:
        step.emit(F.StopAgent(reason=a.reason))
    step.set(parked=True, agent_status=AgentStatus.STOPPED)


def on_policy_set(step: Step, a: A.PolicySet) -> None:
    step.set(policy=a.policy)
