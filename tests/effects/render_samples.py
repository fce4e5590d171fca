"""Sample texts and the reference reading of chat messages shared by the renderer tests.

``original_text`` undoes exactly what the renderer may add to a text (fence repairs and
``<>`` around bare links), using its own small fence reading of the *input*, so the tests
do not trust the code under test to say where a repair is.
"""

from __future__ import annotations

import re

FENCE = "```"
_WRAPPED_LINK = re.compile(r"<(https?://[^\s<>]+)>")


def long_answer(target: int = 6000) -> str:
    """A realistic long answer: prose with links, and code blocks in two languages."""
    parts: list[str] = []
    n = size = 0
    while size < target:
        n += 1
        parts.append(
            f"Step {n}: the handler in https://example.com/docs/step{n} reads the config and "
            f"retries on failure; see `handler_{n}()` for the details.\n"
        )
        size += len(parts[-1])
        if n % 2 == 0:
            lang = "python" if n % 4 == 0 else "json"
            body = "".join(f"    v_{n}_{i} = compute({i}, {n})  # line {i}\n" for i in range(14))
            parts.append(f"```{lang}\n{body}```\n")
            size += len(parts[-1])
    return "".join(parts)


def fence_of_lines(text: str, *, final: bool) -> str | None:
    """The open fence after the complete lines of ``text`` (all lines when ``final``)."""
    lines = text.split("\n")
    if not final:
        lines = lines[:-1]
    fence: str | None = None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith(FENCE):
            if fence is None:
                fence = stripped
            elif stripped.strip("`") == "":
                fence = None
    return fence


def unwrap_links(text: str) -> str:
    return _WRAPPED_LINK.sub(r"\1", text)


def original_text(messages: list[str], source: str) -> str:
    """Strip the fence repairs and link wrapping from ``messages`` (which render ``source``)
    and return their concatenation; raises AssertionError when the messages cannot be read
    as "reopen prefix + the next piece of the source + closing suffix", one after another.

    Where a message could end in two ways (a repair suffix or source text), both readings
    are tried: the reading is a small depth-first search."""

    def read(index: int, rebuilt: str) -> str | None:
        if index == len(messages):
            return rebuilt
        message = messages[index]
        fence = fence_of_lines(rebuilt, final=False) if index else None
        if fence is not None:
            if not message.startswith(fence + "\n"):
                return None
            message = message[len(fence) + 1 :]
        body = unwrap_links(message)
        last = index == len(messages) - 1
        for suffix in ("", FENCE, "\n" + FENCE):
            if suffix and not body.endswith(suffix):
                continue
            end = rebuilt + (body[: len(body) - len(suffix)] if suffix else body)
            if not source.startswith(end):
                continue
            still_open = fence_of_lines(end, final=last and len(end) == len(source))
            if (still_open is not None) == bool(suffix):
                found = read(index + 1, end)
                if found is not None:
                    return found
        return None

    result = read(0, "")
    assert result is not None, f"messages are not pieces of the source: {messages!r}"
    return result


def balanced(message: str) -> bool:
    """Every fence the message opens, it closes."""
    return fence_of_lines(message, final=True) is None
