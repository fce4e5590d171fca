"""How the Gemini CLI is launched (pure): ``gemini --acp`` [``-m <model>``] in the workdir, or
one ``gemini --prompt=<text> -o stream-json`` per turn (the fall-back, with ``-r <session>`` or
``--session-id <new id>``), with ``GEMINI_CLI_HOME`` at the thread's own settings home
(``home.py``: its MCP servers and bounded retries; shown read-write to the sandboxed CLI),
``GEMINI_CLI_TRUST_WORKSPACE=true`` (an untrusted folder loads no MCP servers and downgrades
approval modes) and ``GEMINI_CLI_NO_RELAUNCH=true`` (no second node process).

The system instruction goes first in the prompt, tagged (``base.launch.prompt_text``):
Gemini has no flag that adds to its system prompt, only ``GEMINI_SYSTEM_MD``, which replaces
it.
"""

from __future__ import annotations

from collections.abc import Mapping

from threadspindle.agents.base.launch import TURN_STDOUT_BYTES, LaunchSpec, launch_environment
from threadspindle.agents.base.options import AgentOptions

__all__ = [
    "ARGV_PROMPT_MAX_BYTES",
    "DEFAULT_BINARY",
    "DEFAULT_ENV",
    "launch_spec",
    "prompt_fits_argv",
]

DEFAULT_BINARY = "gemini"
DEFAULT_ENV = {
    "GEMINI_CLI_NO_RELAUNCH": "true",
    "GEMINI_CLI_TRUST_WORKSPACE": "true",
    "GEMINI_TELEMETRY_ENABLED": "false",
}


# Linux takes at most 128 KiB (MAX_ARG_STRLEN) in one argument; the rest of a prompt's
# argument ("--prompt=") and a margin stay under it.
ARGV_PROMPT_MAX_BYTES = 120_000


def prompt_fits_argv(prompt: str) -> bool:
    """Whether a one-turn prompt goes on the command line (else on stdin)."""
    return len(prompt.encode("utf-8", "surrogatepass")) <= ARGV_PROMPT_MAX_BYTES


def stdout_room(prompt: str) -> int:
    """The stdout pipe's room a one-turn process needs: its stream begins by echoing the
    prompt in a JSON string (twice the bytes leave room for escapes) and ends with the
    answer, and the CLI drops what the pipe has not taken when it exits
    (``TURN_STDOUT_BYTES``): a quick answer after a long prompt was lost whenever the reader
    was a little behind."""
    size = len(prompt.encode("utf-8", "surrogatepass"))
    return max(TURN_STDOUT_BYTES, 2 * size + 64 * 1024)


def launch_spec(
    options: AgentOptions,
    workdir: str,
    gemini_home: str,
    *,
    model: str | None = None,
    per_turn_prompt: str | None = None,
    resume: str | None = None,
    new_session_id: str | None = None,
    base_env: Mapping[str, str] | None = None,
) -> LaunchSpec:
    """``gemini --acp`` or, with ``per_turn_prompt``, one ``-p`` turn, using the settings
    home ``gemini_home``."""
    argv = [options.binary or DEFAULT_BINARY]
    if per_turn_prompt is None:
        argv.append("--acp")
    else:
        # No one can answer a permission prompt in -p mode: approve, as the recipes do.
        # ``--prompt=<text>``: a prompt that starts with "-" must not read as a flag. A NUL
        # cannot be in an argument at all (exec refuses the whole command), and it says
        # nothing to a model: it is dropped. A prompt too long for one argument goes on
        # stdin instead (the adapter writes it): with stdin not a terminal the CLI runs
        # headless and takes what it reads there as the prompt.
        if prompt_fits_argv(per_turn_prompt):
            argv.append(f"--prompt={per_turn_prompt.replace(chr(0), '')}")
        argv += ["-o", "stream-json", "--approval-mode", "yolo"]
        if resume:
            argv += ["-r", resume]
        elif new_session_id:
            argv += ["--session-id", new_session_id]
    chosen_model = model or options.model
    if chosen_model:
        argv += ["-m", chosen_model]
    argv += list(options.extra_args)
    env = launch_environment(
        options, forced={**DEFAULT_ENV, "GEMINI_CLI_HOME": gemini_home}, base=base_env
    )
    return LaunchSpec.of(options, argv, env, workdir, expose_writable=(gemini_home,))
