"""``/<agent> conversations | start | resume`` as every text-command platform reads them
(Telegram, WhatsApp, Slack): the list of a workdir's recent sessions, and a start or resume
checked into (session id, requested workdir) before the platform builds its action.

Discord has slash commands with typed options and reads them itself."""

from __future__ import annotations

from threadspindle.agents import list_conversations
from threadspindle.ingress.input_checks import InputRefused, check_path, check_word

__all__ = ["SESSIONS_SHOWN", "conversations_text", "start_or_resume"]

SESSIONS_SHOWN = 15


def conversations_text(agent: str, workdir: str, resume_hint: str | None = None) -> str:
    """The agent's recent sessions in ``workdir``, newest first; ``resume_hint`` (the
    platform's spelling of the resume command) ends the list when given."""
    sessions = list_conversations(agent, workdir)
    if not sessions:
        return f"No {agent} sessions found for {workdir}."
    lines = [f"{s.session_id}  {s.title}" for s in sessions[:SESSIONS_SHOWN]]
    text = f"Recent {agent} sessions in {workdir}:\n" + "\n".join(lines)
    if resume_hint:
        text += f"\nResume one with {resume_hint}."
    return text


def start_or_resume(
    agent: str, sub: str, args: str, default_workdir: str, command: str
) -> tuple[str | None, str]:
    """``start [workdir]`` or ``resume <id> [workdir]``: (the session id to resume or None,
    the workdir asked for, checked to be a path). ``command`` is how the platform spells
    the agent's command in a usage line (``/claude``, ``claude``). ``InputRefused``
    otherwise."""
    session: str | None = None
    words = args.split(maxsplit=1)
    if sub == "resume":
        if not words:
            raise InputRefused(f"usage: {command} resume <id> [workdir]")
        session = check_word(words[0], "session id")
        args = words[1] if len(words) > 1 else ""
    elif sub != "start":
        raise InputRefused(f"usage: {command} start [workdir] | resume <id> | conversations")
    requested = args.strip() or default_workdir
    check_path(requested)
    return session, requested
