"""The pure text work of chat output: split a growing text into chat-sized messages, and
write each kind of output (tool card, thinking preview, prompts) as chat markdown.

``MessageChunker`` takes a streamed text delta by delta and cuts it into messages of at most
``budget`` characters, counted the platform's way (``LengthUnit``: code points, or UTF-16
units as Telegram counts, where an emoji is two). It keeps three promises:

- **Line boundaries.** A message ends at the end of a line whenever the line fits; only a
  line longer than a whole message is cut (at a space when there is one).
- **Balanced fences.** A message never ends inside a fenced code block: when a cut falls
  inside one, the message gets a closing ```` ``` ```` (the *repair suffix*) and the next
  message reopens the fence with the same opening line, language included (the *repair
  prefix*). Apart from these repairs and the wrapped links, the concatenation of the
  messages is the input text.
- **Linear cost.** Every input character is looked at a bounded number of times: completed
  lines are committed once into the open message, closed messages are handed out and
  forgotten, and only the open message (at most ``budget`` characters) is ever joined.

Bare ``http(s)://`` links outside code are wrapped in ``<>`` so Discord shows no embed, and
a mention the agent wrote outside code is escaped (``\\<@id>``, Discord's own escape): only
the core's own text (a prompt's "Allowed by <@id>", added after the chunker) may mention
someone; each platform's converter shows an escaped one as the plain text ``<@id>``.

A fence line is a whole line whose stripped text starts with three backticks; it opens a
fence when none is open (the rest of the line is the language) and closes the open fence
when it is nothing but backticks. Everything here is pure: no I/O, no clock.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Literal

__all__ = [
    "THINKING_PREVIEW_CHARS",
    "LengthUnit",
    "MessageChunker",
    "fit_message",
    "is_blank",
    "parse_component_action",
    "permission_action",
    "permission_text",
    "question_menu_id",
    "escape_mentions",
    "question_text",
    "render_tool_card",
    "split_message",
    "text_length",
    "thinking_preview",
    "wrap_bare_links",
]

FENCE = "```"
REPAIR_RESERVE = len("\n" + FENCE)  # room kept free to close a fence at any cut
MAX_REOPEN_LINE = 40  # a longer opening fence line is reopened as a plain ```

_BARE_LINK = re.compile(r"(?<![<(\[\w/])https?://[^\s<>`]+")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
_TRAILING_PUNCTUATION = ".,;:!?'\"*_~"


# How a platform counts a message's length: code points (Python's ``len``: Discord), or
# UTF-16 code units (Telegram; an emoji outside the BMP is two).
LengthUnit = Literal["chars", "utf16"]


def text_length(text: str, unit: LengthUnit = "chars") -> int:
    """``text``'s length as a platform counting in ``unit`` counts it."""
    if unit == "chars":
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def _index_within(text: str, limit: int, unit: LengthUnit) -> int:
    """The longest prefix of ``text`` (its end index) no longer than ``limit`` in ``unit``:
    never half of a character."""
    if unit == "chars" or limit >= len(text) * 2:
        return max(0, min(limit, len(text)))
    # Cut the UTF-16 bytes; a dangling high surrogate (half a character) is dropped.
    head = text.encode("utf-16-le")[: 2 * max(limit, 0)].decode("utf-16-le", errors="ignore")
    return len(head)


def is_blank(text: str) -> bool:
    """Chat platforms refuse empty or whitespace-only messages."""
    return not text.strip()


def _wrap_link(match: re.Match[str]) -> str:
    url = match.group(0)
    # Sentence punctuation and an unbalanced closing parenthesis are not part of the link.
    end = len(url)
    while end > 0:
        last = url[end - 1]
        if last in _TRAILING_PUNCTUATION:
            end -= 1
        elif last == ")" and url.count("(", 0, end) < url.count(")", 0, end):
            end -= 1
        else:
            break
    if end <= len("https://"):
        return url
    return f"<{url[:end]}>{url[end:]}"


def _outside_code(line: str, change: Callable[[str], str]) -> str:
    """``line`` with ``change`` applied to its text outside inline code spans."""
    pieces: list[str] = []
    last = 0
    for span in _INLINE_CODE.finditer(line):
        pieces.append(change(line[last : span.start()]))
        pieces.append(span.group(0))
        last = span.end()
    pieces.append(change(line[last:]))
    return "".join(pieces)


def wrap_bare_links(line: str) -> str:
    """Wrap bare links in ``<>`` (no embed), leaving inline code spans untouched."""
    if "://" not in line:
        return line
    return _outside_code(line, lambda prose: _BARE_LINK.sub(_wrap_link, prose))


MENTION = "<@"
ESCAPED_MENTION = "\\<@"  # Discord markdown's escape: shown as text, mentions nobody


def escape_mentions(line: str) -> str:
    """Mentions (``<@id>``) made inert: agent text must not ping anyone on a platform whose
    converter turns ``<@id>`` into a mention (Telegram, Slack); an already escaped one is
    left as it is. Inside inline code too: where a span ends is the converter's to say
    (``**a`** <@1> `x` `` reads as bold, then a mention, to Telegram's), so the converters
    undo the escape in what they render as code."""
    if MENTION not in line:
        return line
    return _escape_prose_mentions(line)


def _escape_prose_mentions(prose: str) -> str:
    return re.sub(r"(?<!\\)<@", lambda _: ESCAPED_MENTION, prose)


def _fence_line(line: str) -> str | None:
    """The stripped fence line if ``line`` (one whole line) is one, else None."""
    stripped = line.strip()
    return stripped if stripped.startswith(FENCE) else None


def _next_fence(fence: str | None, line: str) -> str | None:
    """The open fence (its opening line) after the whole line ``line``."""
    marker = _fence_line(line)
    if marker is None:
        return fence
    if fence is None:
        return marker
    return None if marker.strip("`") == "" else fence


class MessageChunker:
    """Cuts a streamed text into messages of at most ``budget`` characters.

    ``feed`` deltas, ``finish`` at the end; ``take_closed`` hands out the finished messages
    (final texts, in order) and ``live_text`` shows the open one as it is now. The open
    message's display closes a still-open fence (``close_live_fence``) so a half-streamed
    code block renders as code.
    """

    def __init__(
        self,
        budget: int,
        *,
        wrap_links: bool = True,
        close_live_fence: bool = True,
        unit: LengthUnit = "chars",
    ) -> None:
        if budget < 100:
            raise ValueError(f"message budget {budget} is too small to split code fences")
        self.budget = budget
        self.unit = unit
        self.wrap_links = wrap_links
        self.close_live_fence = close_live_fence
        self._fence: str | None = None  # open fence after the committed text
        self._prefix = ""  # the repair prefix of the open message
        self._parts: list[str] = []  # committed text of the open message
        self._body_len = 0
        self._body_blank = True  # whitespace or a fence opening only: not a message yet
        self._pending = ""  # the current line, not yet complete
        self._pending_at_line_start = True
        self._closed: list[str] = []
        self.finished = False

    # -- input ---------------------------------------------------------------------------

    def feed(self, text: str) -> None:
        if self.finished:
            raise RuntimeError("feed after finish")
        if not text:
            return
        if "\n" in text:
            # Only the pending line and this delta are scanned: the pending line holds no
            # newline, so earlier text is never looked at again.
            lines = (self._pending + text).split("\n")
            self._pending = lines.pop()
            for line in lines:
                self._commit(line + "\n", whole_line=self._pending_at_line_start)
                self._pending_at_line_start = True
        else:
            self._pending += text
        self._fit_pending()

    def fits(self, text: str) -> bool:
        """Whether ``feed(text)`` is sure to close no message: the open message, the pending
        line and ``text`` stay within the budget however they render (a wrapped link gains
        its two brackets, and every link holds a "://", one of which may straddle the two;
        a fence opened by it costs ``REPAIR_RESERVE``). Conservative: False near the
        budget, where only feeding tells. A renderer uses it to append to a message it
        already posted without a platform call and without a scheduler round."""
        if self.finished:
            return False
        pending = self._pending
        links = pending.count("://") + text.count("://") + 1
        mentions = pending.count("<") + text.count("<")  # an escape adds one character each
        worst = self._len(pending) + self._len(text) + 2 * links + mentions + REPAIR_RESERVE
        return self._len(self._prefix) + self._body_len + worst <= self.budget

    def finish(self) -> None:
        """The text is complete: commit the last line and close the open message."""
        if self.finished:
            return
        self.finished = True
        if self._pending:
            pending, self._pending = self._pending, ""
            self._commit(pending, whole_line=self._pending_at_line_start)
        if self._body_len:
            self._close()

    def close_at_paragraph(self) -> bool:
        """Close the open message here if it ends a paragraph (a blank line) outside any
        code block: a platform without edits sends it now instead of at the budget or the
        end. True when it closed one."""
        if self.finished or self._fence is not None or self._body_blank:
            return False
        if not "".join(self._parts[-2:]).endswith("\n\n"):
            return False
        last = next((p for p in reversed(self._parts) if p.strip()), "")
        if last.lstrip().startswith("#"):
            return False  # a heading belongs with the paragraph it heads
        self._close()
        return True

    # -- output --------------------------------------------------------------------------

    def take_closed(self) -> list[str]:
        """Messages finished since the last call, final texts in order."""
        closed, self._closed = self._closed, []
        return closed

    def live_text(self, *, whole_lines: bool = False) -> str:
        """The open message as it should be shown now ("" when there is none); with
        ``whole_lines``, without the line still being written (an append-only display
        then only ever gains whole lines)."""
        if self.finished:
            return ""
        pending = (
            "" if whole_lines else self._render(self._pending, in_fence=self._fence is not None)
        )
        if not self._body_len and not pending:
            return ""
        text = self._prefix + "".join(self._parts) + pending
        if self.close_live_fence and self._fence is not None:
            text += FENCE if text.endswith("\n") else "\n" + FENCE
        # Over budget only while a pathological line has no safe cut yet: show less.
        return text[: _index_within(text, self.budget, self.unit)]

    # -- the cutting -----------------------------------------------------------------------

    def _len(self, text: str) -> int:
        return text_length(text, self.unit)

    def _render(self, piece: str, *, in_fence: bool) -> str:
        # Mentions are escaped in fences too: where a fence opens or ends is each
        # converter's to say (Slack closes a one-line ```x``` at once, the chunker keeps
        # it open), and the converters show the escape as written inside code.
        if in_fence:
            return escape_mentions(piece)
        return escape_mentions(wrap_bare_links(piece) if self.wrap_links else piece)

    def _room(self, fence_after_piece: str | None) -> int:
        reserve = REPAIR_RESERVE if fence_after_piece is not None else 0
        return self.budget - self._len(self._prefix) - self._body_len - reserve

    def _fresh_room(self) -> int:
        return self.budget - self._len(self._reopen_prefix()) - REPAIR_RESERVE

    def _reopen_prefix(self) -> str:
        if self._fence is None:
            return ""
        return (self._fence if len(self._fence) <= MAX_REOPEN_LINE else FENCE) + "\n"

    def _fit_pending(self) -> None:
        """Keep the open message plus the pending line within the budget."""
        while self._pending:
            room = self.budget - self._len(self._prefix) - self._body_len - REPAIR_RESERVE
            # Cheap first: wrapping adds at most two characters per link, an escaped mention
            # one.
            pending = self._pending
            estimate = self._len(pending) + 2 * pending.count("://") + pending.count("<@")
            if estimate <= room:
                return
            if self._closable():
                self._close()
                continue
            fresh = self._fresh_room()
            if self._len(self._render(self._pending, in_fence=self._fence is not None)) <= room:
                return
            # One line longer than a whole message (or after blank lines): commit a piece,
            # keeping a safe start for the rest (see _cut_point).
            high = _index_within(self._pending, fresh, self.unit)
            low = _index_within(self._pending, max(fresh // 2, 1), self.unit)
            cut = _cut_point(self._pending, low, high, open_end=True)
            if cut >= len(self._pending):
                if self._len(self._pending) <= 2 * fresh:
                    return  # nothing safe to cut yet: wait for more of the line
                cut = max(high, 1)  # a run of backticks this long renders oddly anyway
            piece, self._pending = self._pending[:cut], self._pending[cut:]
            self._commit(piece, whole_line=False)
            self._pending_at_line_start = False

    def _commit(self, piece: str, *, whole_line: bool) -> None:
        """Add committed text (a whole line, or a piece of a line) to the open message."""
        is_fence_line = whole_line and _fence_line(piece) is not None
        fence_after_piece = _next_fence(self._fence, piece) if is_fence_line else self._fence
        # A fence line is markup, never a link.
        rendered = piece if is_fence_line else self._render(piece, in_fence=self._fence is not None)
        while rendered:
            room = self._room(fence_after_piece)
            size = self._len(rendered)
            if size <= room:
                # A line opening a fence is markup: a message of nothing else must not end.
                opens = is_fence_line and self._fence is None
                self._append(rendered, content=not opens)
                self._fence = fence_after_piece
                return
            if self._closable() and size <= self._fresh_room():
                self._close()
                continue
            if self._closable() and room < self._fresh_room() // 4:
                self._close()  # too little room left to be worth a cut here
                continue
            # Longer than a whole message: cut it. Its pieces are plain text of the current
            # fence (a fence line this long is not markup anyway).
            fence_after_piece = self._fence
            room = self._room(self._fence)
            high = _index_within(rendered, room, self.unit)
            cut = _cut_point(rendered, _index_within(rendered, max(room // 2, 1), self.unit), high)
            self._append(rendered[:cut])
            rendered = rendered[cut:]
            self._close()

    def _closable(self) -> bool:
        """A message may end here: it has content, not only whitespace (a chat platform
        refuses a blank message, so blank lines wait for the text after them) or a fence
        opening (an empty code block says nothing), unless so much of that piled up that
        nothing else fits."""
        if not self._body_len:
            return False
        return not self._body_blank or self._room(self._fence) < 1

    def _append(self, text: str, *, content: bool = True) -> None:
        self._parts.append(text)
        self._body_len += self._len(text)
        if content and text.strip():
            self._body_blank = False

    def _close(self) -> None:
        body = "".join(self._parts)
        suffix = ""
        if self._fence is not None:
            suffix = FENCE if body.endswith("\n") else "\n" + FENCE
        self._closed.append(self._prefix + body + suffix)
        self._prefix = self._reopen_prefix()
        self._parts = []
        self._body_len = 0
        self._body_blank = True


_CUT_SEARCH = 64  # how far a cut moves back, and looks ahead, to find a safe start


def _safe_start(text: str, cut: int, *, open_end: bool) -> bool:
    """Whether ``text[cut:]`` may start a message: a piece of a line that starts a message
    reads as a line there, so it must not start like a fence. When more of the line may
    follow (``open_end``), even one backtick or only spaces could become one."""
    head = text[cut : cut + _CUT_SEARCH].lstrip(" ")
    if open_end:
        return bool(head) and not head.startswith("`")
    return not head.startswith(FENCE)


def _cut_point(text: str, low: int, high: int, *, open_end: bool = False) -> int:
    """Where to cut an over-long line: after the last space in ``text[low:high]``, else at
    ``high``; never inside a ``<link>`` wrapped here; never where the rest would start
    like a fence nor inside one character as read (``_splits_character``): then earlier,
    or ``len(text)`` when no cut is safe."""
    high = max(1, min(high, len(text)))
    cut = high
    space = text.rfind(" ", low, high)
    opening = text.rfind("<", low, high)
    if space >= 0:
        cut = space + 1
    elif opening > 0 and text.find(">", opening, high) < 0:
        cut = opening
    for candidate in range(cut, max(cut - _CUT_SEARCH, 0), -1):
        if _safe_start(text, candidate, open_end=open_end) and not _splits_character(
            text, candidate
        ):
            return candidate
    return len(text) if open_end else high


_JOINERS = frozenset("\u200d\ufe0e\ufe0f")  # zero-width joiner, variation selectors


def _is_regional(char: str) -> bool:
    return "\U0001f1e6" <= char <= "\U0001f1ff"  # the letters of a flag


def _splits_character(text: str, cut: int) -> bool:
    """Whether a cut at ``cut`` splits what reads as one character: a ZWJ emoji sequence,
    a base and its combining mark or variation selector, a flag's two letters."""
    if cut <= 0 or cut >= len(text):
        return False
    before, after = text[cut - 1], text[cut]
    if after in _JOINERS or before == "\u200d" or unicodedata.combining(after):
        return True
    if _is_regional(before) and _is_regional(after):
        run = 0  # flags pair up from the start of a run of regional indicators
        while cut - run - 1 >= 0 and _is_regional(text[cut - run - 1]):
            run += 1
        return run % 2 == 1
    return False


def split_message(
    text: str,
    budget: int,
    *,
    wrap_links: bool = True,
    close_live_fence: bool = True,
    unit: LengthUnit = "chars",
) -> list[str]:
    """A whole text as chat messages (each non-blank, at most ``budget`` in ``unit``)."""
    chunker = MessageChunker(
        budget, wrap_links=wrap_links, close_live_fence=close_live_fence, unit=unit
    )
    chunker.feed(text)
    chunker.finish()
    return [message for message in chunker.take_closed() if not is_blank(message)]


TRUNCATED = "\n-# … (truncated)"


def fit_message(
    text: str, budget: int, *, wrap_links: bool = True, unit: LengthUnit = "chars"
) -> str:
    """A text as one message of at most ``budget`` (in ``unit``): the first part, with its
    fences closed, and a truncation note when something was left out."""
    messages = split_message(text, budget - len(TRUNCATED), wrap_links=wrap_links, unit=unit)
    if not messages:
        return ""
    if len(messages) == 1:
        return messages[0]
    return messages[0] + TRUNCATED


def thinking_preview(tail: str, *, truncated: bool, width: int = 200) -> str:
    """Thinking as one line of Discord subtext: its last ``width`` characters."""
    flat = " ".join(tail.split())
    if len(flat) > width:
        flat, truncated = flat[-width:], True
    if not flat:
        return ""
    # Backticks and asterisks in a one-line preview would open markup that never closes.
    flat = escape_mentions(flat.replace("`", "'").replace("*", ""))
    return "-# 💭 " + ("…" if truncated else "") + flat


THINKING_PREVIEW_CHARS = 200
TOOL_HEADER_CHARS = 180
TOOL_RESULT_LINES = 8
TOOL_RESULT_MARKS = {"→ ": False, "✗ ": True}  # the core's result marks: ok / error


# --- component ids: what the Accept/Deny buttons and the question menu send back -------------


def permission_action(request_id: str, allow: bool) -> str:
    return f"permission:{'allow' if allow else 'deny'}:{request_id}"


def question_menu_id(request_id: str) -> str:
    return f"question:{request_id}"


def parse_component_action(action: str) -> tuple[str, str, bool | None] | None:
    """``("permission", request_id, allow)`` or ``("question", request_id, None)`` for the
    ids made above; None for anything else (e.g. ingress-defined buttons)."""
    kind, _, rest = action.partition(":")
    if kind == "permission":
        verdict, _, request_id = rest.partition(":")
        if verdict in ("allow", "deny") and request_id:
            return "permission", request_id, verdict == "allow"
    if kind == "question" and rest:
        return "question", rest, None
    return None


# --- how each kind of output reads (Discord markdown) -------------------------------------


def _is_span(text: str) -> bool:
    return "`" not in text and "\n" not in text


def _as_code(text: str) -> str:
    """``text`` shown as code whatever it holds: what a user approves (a permission's
    command) and what a tool card names must read exactly as it runs, never as markdown
    (``||…||`` would hide part of it as a spoiler). Without a backtick an inline span
    does; with one, a fenced block, the one code form every platform's converter keeps
    literal (Slack cannot put a backtick in an inline span, WhatsApp knows no longer
    backtick runs)."""
    return f"`{text}`" if _is_span(text) else _code_block(text)


def _code_after(label: str, text: str) -> str:
    """``label`` then ``text`` as code: on its line when a span, below it when a block."""
    return label + (" " if _is_span(text) else "\n") + _as_code(text)


_BROKEN_FENCE = "`\u200b``"  # looks like a fence, ends no code block


def _code_block(text: str) -> str:
    # A fence inside the result would end the block early (anywhere in a line: WhatsApp
    # ends monospace at any ```), and so would a longer run, which one pass leaves a
    # ``` of: break runs until none is left.
    body = text
    while FENCE in body:
        body = body.replace(FENCE, _BROKEN_FENCE)
    return f"{FENCE}\n{body}\n{FENCE}"


def render_tool_card(text: str) -> str:
    """A tool output (``header`` then, once finished, ``"→ result"`` or ``"✗ error"``) as a
    compact card: subtext header, result in a code block cut to a few lines."""
    header, _, rest = text.partition("\n")
    if len(header) > TOOL_HEADER_CHARS:
        header = header[:TOOL_HEADER_CHARS] + "…"
    card = _code_after("-# 🔧", header)
    if not rest:
        return card
    is_error = False
    for mark, error in TOOL_RESULT_MARKS.items():
        if rest.startswith(mark):
            rest, is_error = rest[len(mark) :], error
            break
    lines = rest.rstrip("\n").split("\n")
    if len(lines) > TOOL_RESULT_LINES:
        lines = lines[:TOOL_RESULT_LINES] + [f"… (+{len(lines) - TOOL_RESULT_LINES} lines)"]
    result = "\n".join(lines)
    if is_error:
        card += "\n⚠️ **error**"
    if result.strip():
        card += "\n" + _code_block(result)
    return card


def permission_text(tool: str, detail: str) -> str:
    text = _code_after("🔐 **Permission needed:**", tool)
    if detail.strip():
        detail = detail.strip()
        text += "\n" + _as_code(detail)
    return text


def question_text(
    question: str,
    *,
    has_options: bool,
    multiple: bool,
    options: tuple[str, ...] = (),
    option_chars: int | None = None,
    menu_options: int | None = None,
) -> str:
    """The question's text; its ``options`` listed in full, numbered, when the platform's
    menu cannot show each of them whole (one longer than ``option_chars``, more than
    ``menu_options``, or an empty one): a cut label alone may not tell two apart."""
    text = f"❓ **Question:** {question}"
    if _menu_hides_options(options, option_chars, menu_options):
        text += "\n" + "\n".join(
            f"{n}. {option.strip() or EMPTY_OPTION}" for n, option in enumerate(options, 1)
        )
    if not has_options:
        text += "\n-# Answer with a message in this thread."
    elif multiple:
        text += "\n-# Choose one or more."
    return text


EMPTY_OPTION = "(empty)"  # how an empty option reads: a platform refuses an empty label


def _menu_hides_options(
    options: tuple[str, ...], option_chars: int | None, menu_options: int | None
) -> bool:
    if menu_options is not None and len(options) > menu_options:
        return True
    if any(not option.strip() for option in options):
        return True
    return option_chars is not None and any(len(option) > option_chars for option in options)
