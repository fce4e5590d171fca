"""Text that is safe to write to a terminal: what an agent (or a file it wrote) says must
not drive the user's terminal.

An agent's output is untrusted text. Written raw, an escape sequence in it can clear the
screen, move the cursor to overwrite what was printed (a forged "Accept" or a hidden
command), set the window title, write to the clipboard (OSC 52) or, on some terminals,
answer back as if typed. ``terminal_safe`` removes every such sequence whole (CSI, OSC,
DCS/PM/APC strings, two-character escapes), then every control character left except
newline and tab (a lone ESC, BEL, backspace, carriage return, the C1 range), the
bidirectional overrides and marks that make text display in another order than it reads
("Trojan Source"), and the Unicode line and paragraph separators. Everything else, emoji
and every script included, passes untouched.

Stripping works on any cut of a stream: a sequence split across two pieces loses its ESC
in the first, so the second only shows a few harmless printable characters.
"""

from __future__ import annotations

import re

__all__ = ["terminal_safe"]

_SEQUENCE = re.compile(
    r"""
      \x1b\[ [0-?]* [ -/]* [@-~]                  # CSI: colours, cursor moves, erase
    | \x9b [0-?]* [ -/]* [@-~]                    # CSI as one C1 character
    | (?:\x1b[\]P^_X]|[\x90\x98\x9d\x9e\x9f])     # OSC, DCS, PM, APC, SOS (ESC or C1 form)
      [^\x07\x1b\x9c]* (?:\x07|\x1b\\|\x9c)?      #   ... up to their terminator, if any
    | \x1b [ -/]* [0-~]                           # other escapes: ESC c (reset), ESC 7 ...
    """,
    re.VERBOSE,
)
# Control characters but newline and tab; DEL; C1; bidi embeddings/overrides/isolates and
# marks (ALM, LRM, RLM: a mark reorders neutral characters around it as an override does);
# the line and paragraph separators (a terminal may break a line there, or show nothing:
# either way the line reads otherwise than it is). The zero-width joiner stays: emoji.
_CONTROL = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


def terminal_safe(text: str) -> str:
    """``text`` without escape sequences and control characters (newline and tab kept)."""
    if _CONTROL.search(text) is None:  # the common case: nothing to strip
        return text
    return _CONTROL.sub("", _SEQUENCE.sub("", text))
