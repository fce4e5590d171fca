"""What a person (or an agent) types into Spindle, checked where it enters.

Console lines, slash-command options and message contents are untrusted text: a NUL, a
control character, a Unicode digit or a megabyte where a path or a name is expected must
be answered with a reason, never passed on to a call that raises (``os.path.realpath``
with a NUL, ``int("²")``) or to an agent CLI's argv. Each check here raises
``InputRefused`` with the sentence to show the user; ingress answers with it (the console
prints it, Discord replies to the interaction, only to its author).

Free text (prompts, ``/queue`` messages, question answers) is not checked here: it goes to
the agent as data, never into a path or an argv.
"""

from __future__ import annotations

import re

from threadspindle.runtime.core.guards import has_visible_text

__all__ = [
    "MAX_NAME_CHARS",
    "MAX_PATH_BYTES",
    "MAX_PROMPT_CHARS",
    "InputRefused",
    "check_path",
    "check_word",
    "has_visible_text",
    "parse_position",
    "shown",
]

MAX_PATH_BYTES = 4096  # PATH_MAX on Linux: a longer path cannot be opened anyway
MAX_NAME_CHARS = 200  # model names, session ids, thread names
# A prompt typed where Spindle reads it whole (the console's lines, the web chat's
# messages); the chat platforms bound theirs themselves.
MAX_PROMPT_CHARS = 100_000

# C0 and C1 control characters and DEL: never part of a path or a name anyone means.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_POSITION = re.compile(r"[0-9]{1,9}")  # ASCII digits only: "²".isdigit() is True


class InputRefused(ValueError):
    """A value a user typed that Spindle will not take; ``str()`` says why, for the user."""


def shown(value: str, limit: int = 60) -> str:
    """``value`` as it may be echoed back: control characters escaped, cut to ``limit``."""
    text = repr(value[:limit])[1:-1]
    return text + ("…" if len(value) > limit else "")


def _control_problem(value: str, what: str) -> str | None:
    found = _CONTROL.search(value)
    if found is None:
        return None
    char = found.group()
    name = "a NUL character" if char == "\0" else f"a control character ({char!r})"
    return f"The {what} contains {name}: {shown(value)!r}."


def check_path(value: str, what: str = "workdir") -> str:
    """``value`` when it can be a path; ``InputRefused`` naming the problem otherwise."""
    problem = _control_problem(value, what)
    if problem is None and len(value.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        problem = f"The {what} is longer than {MAX_PATH_BYTES} bytes."
    if problem is not None:
        raise InputRefused(problem)
    return value


def check_word(value: str, what: str, max_chars: int = MAX_NAME_CHARS) -> str:
    """``value`` when it is one printable word of at most ``max_chars`` characters (a model
    name, a session id, a thread name); ``InputRefused`` naming the problem otherwise."""
    problem = _control_problem(value, what)
    if problem is None and (not value.strip() or any(c.isspace() for c in value)):
        problem = f"The {what} must be one word without spaces: {shown(value)!r}."
    if problem is None and len(value) > max_chars:
        problem = f"The {what} is longer than {max_chars} characters."
    if problem is not None:
        raise InputRefused(problem)
    return value


def parse_position(value: str) -> int:
    """A 1-based queue position typed as ASCII digits (``InputRefused`` otherwise)."""
    digits = value.strip()
    if _POSITION.fullmatch(digits) is None:
        raise InputRefused(
            f"The position must be a number such as 2, not {shown(value)!r} "
            "(/clear-queue alone drops every queued prompt)."
        )
    # The stripped digits: ``str.strip`` takes characters (\x1c-\x1f) that ``int`` refuses.
    return int(digits)
