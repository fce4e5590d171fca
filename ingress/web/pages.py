"""The web chat's HTML, drawn on the server: pages, and the fragments the live stream sends.

One function per piece, used both for the first drawing of a page and for its live
updates (``message_html``, ``status_html``), so a reloaded page shows exactly what the
stream had shown. Every text that did not come from this module is escaped
(``html.escape``); a message's body is the HTML ``effects.web_markup`` made, which has no
raw HTML in it. No inline script or style anywhere (the page's CSP forbids both): the
behaviour is ``static/chat.js``, the look ``static/style.css``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from html import escape

from threadspindle.effects.web_platform import WebMessage
from threadspindle.ingress.web.timeline import Timeline
from threadspindle.ingress.web.timeline_svg import runs_table, timeline_svg
from threadspindle.runtime.core.model import ThreadState

__all__ = [
    "chat_page",
    "error_page",
    "home_page",
    "standalone_timeline",
    "message_html",
    "status_html",
    "thread_label",
    "thread_place",
    "timeline_page",
]

QUEUE_SHOWN = 50


def _layout(
    title: str,
    body: str,
    *,
    scripts: Iterable[str] = (),
    main_class: str = "",
    inline: tuple[str, str] | None = None,
    base: str = "",
) -> str:
    """A whole page. ``inline`` (a style sheet and a script) makes a page to open from
    disk, with nothing to fetch; served pages link the package's files instead. ``base``:
    the path the chat's pages are under (``security.own_path``; the static files are not)."""
    if inline is None:
        head = (
            '<link rel="stylesheet" href="/static/style.css">'
            '<link rel="icon" href="/static/icon.svg" type="image/svg+xml">'
            + "".join(f'<script src="/static/{escape(s)}" defer></script>' for s in scripts)
        )
        brand = (
            f'<a class="brand" href="{escape(base)}/">'
            '<img src="/static/icon.svg" alt="" width="18" height="18"> Spindle</a>'
        )
        end = ""
    else:
        head = f"<style>{inline[0]}</style>"
        brand = '<span class="brand">Spindle</span>'
        end = f"<script>{inline[1]}</script>"
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)} · Spindle</title>{head}</head><body>"
        f'<header class="top">{brand}<span class="where">web chat</span></header>'
        f'<main class="{escape(main_class)}">{body}</main>{end}</body></html>'
    )


def thread_label(state: ThreadState) -> str:
    """The thread's name: the agent's session title once it has one, else agent · folder."""
    if state.title:
        return state.title
    return thread_place(state)


def thread_place(state: ThreadState) -> str:
    conversation = state.conversation
    if conversation is None:
        return f"{state.thread_id} (no conversation)"
    folder = os.path.basename(conversation.workdir.rstrip("/")) or conversation.workdir
    return f"{conversation.agent} · {folder}"


def _phase(state: ThreadState | None) -> str:
    if state is None or state.run is None:
        return "idle"
    return state.run.phase.value


def home_page(
    threads: Mapping[str, ThreadState],
    *,
    agents: tuple[str, ...],
    default_agent: str,
    workdirs: Iterable[str],
    default_workdir: str,
    notice: str = "",
    base: str = "",
) -> str:
    items = []
    for thread_id, state in threads.items():
        queue = len(state.queue)
        waiting = " · waiting for an answer" if state.blockers else ""
        place = f'<span class="muted"> {escape(thread_place(state))} </span>' if state.title else ""
        items.append(
            f'<li><a href="{escape(base)}/t/{escape(thread_id)}">{escape(thread_label(state))}</a>'
            f"{place} "
            f'<span class="phase phase-{escape(_phase(state))}">{escape(_phase(state))}</span>'
            f'<span class="muted"> queue {queue}{waiting} · </span>'
            f'<a class="muted" href="{escape(base)}/t/{escape(thread_id)}/timeline">timeline</a>'
            "</li>"
        )
    listing = (
        f'<ul class="threads">{"".join(items)}</ul>'
        if items
        else '<p class="muted">No conversation yet: start one below.</p>'
    )
    options = "".join(
        f'<option value="{escape(a)}"{" selected" if a == default_agent else ""}>{escape(a)}'
        "</option>"
        for a in agents
    )
    dirs = "".join(f'<option value="{escape(d)}"></option>' for d in workdirs)
    notice_html = f'<p class="notice">{escape(notice)}</p>' if notice else ""
    body = (
        f"{notice_html}<section><h1>Conversations</h1>{listing}</section>"
        "<section><h2>Start a conversation</h2>"
        f'<form class="start" method="post" action="{escape(base)}/threads">'
        f'<label>Agent <select name="agent" id="agent">{options}</select></label>'
        '<label>Workdir <input name="workdir" id="workdir" list="workdirs" size="50" '
        f'value="{escape(default_workdir)}" required></label>'
        f'<datalist id="workdirs">{dirs}</datalist>'
        '<button type="submit" id="start">Start</button></form>'
        '<p class="muted">The workdir must be inside the allowed roots '
        "(<code>runtime.allowed_roots</code>).</p></section>"
        "<section><h2>Play back an exported log</h2>"
        f'<form class="upload" method="post" action="{escape(base)}/timeline" '
        'enctype="multipart/form-data">'
        '<input type="file" name="log" id="log-file" accept=".jsonl,.json,.txt" required> '
        '<button type="submit" id="upload">Show its timeline</button></form>'
        '<p class="muted">A file written by <code>spindle log export THREAD -o FILE</code>.</p>'
        "</section>"
    )
    return _layout("Conversations", body, base=base)


def _buttons(message: WebMessage) -> str:
    parts = [
        f'<button type="button" class="btn" data-action="{escape(b.action)}">'
        f"{escape(b.label)}</button>"
        for b in message.buttons
    ]
    if message.menu is not None:
        menu = message.menu
        if menu.multiple:
            boxes = "".join(
                f'<label class="choice"><input type="checkbox" value="{escape(o)}">'
                f"{escape(o)}</label>"
                for o in menu.options
            )
            parts.append(
                f'<span class="multi">{boxes}<button type="button" class="btn" '
                f'data-action="{escape(menu.custom_id)}" data-multi="1">Send</button></span>'
            )
        else:
            parts += [
                f'<button type="button" class="btn" data-action="{escape(menu.custom_id)}" '
                f'data-answer="{escape(o)}">{escape(o)}</button>'
                for o in menu.options
            ]
    return f'<div class="buttons">{"".join(parts)}</div>' if parts else ""


def message_html(message: WebMessage) -> str:
    classes = ["msg", f"kind-{message.kind}"]
    if message.reply:
        classes.append("reply")
    if message.ephemeral:
        classes.append("ephemeral")
    return (
        f'<div class="{" ".join(classes)}" id="m-{escape(message.id)}" '
        f'data-id="{escape(message.id)}"><div class="body">{message.html}</div>'
        f"{_buttons(message)}</div>"
    )


def status_html(state: ThreadState | None, *, typing: bool) -> str:
    """The thread's status panel: phase, agent, the running prompt, Abort, the queue with a
    Remove button per prompt, and an answer box per open question."""
    if state is None or state.conversation is None:
        return '<p class="muted">No conversation in this thread.</p>'
    conversation = state.conversation
    phase = _phase(state)
    model = f" · {escape(conversation.model)}" if conversation.model else ""
    parts = [
        f'<div class="status-line"><span class="phase phase-{escape(phase)}" id="phase">'
        f"{escape(phase)}</span> <b>{escape(conversation.agent)}</b>{model} "
        f'<span class="muted">in <code>{escape(conversation.workdir)}</code> · agent '
        f"{escape(state.agent_status.value)}</span>"
        + (' <span class="typing" id="typing">typing…</span>' if typing and state.run else "")
        + "</div>"
    ]
    if state.run is not None:
        parts.append(
            f'<div class="running">Running: <span class="prompt">'
            f"{escape(_cut(state.run.prompt.text))}</span> "
            '<button type="button" class="btn danger" id="abort" data-action="abort">Abort'
            "</button></div>"
        )
    for blocker in state.blockers:
        if blocker.kind == "question":
            request = escape(blocker.request_id)
            parts.append(
                f'<div class="answer"><span>❓ {escape(_cut(blocker.text))}</span> '
                f'<input type="text" class="answer-text" data-request="{request}"'
                ' placeholder="your answer"> <button type="button" class="btn" '
                f'data-action="question:{request}" data-from-input="1">Answer'
                "</button></div>"
            )
        else:
            parts.append('<div class="waiting">🔐 Waiting for your permission (below).</div>')
    if state.queue:
        items = "".join(
            f'<li data-item="{escape(item.id)}"><span class="prompt">{escape(_cut(item.text))}'
            f'</span> <button type="button" class="btn small" '
            f'data-action="remove_queued:{escape(item.id)}">Remove</button></li>'
            for item in state.queue[:QUEUE_SHOWN]
        )
        more = len(state.queue) - QUEUE_SHOWN
        tail = f'<li class="muted">… and {more} more</li>' if more > 0 else ""
        parts.append(
            f'<div class="queue">Queue ({len(state.queue)}):<ol id="queue">{items}{tail}</ol></div>'
        )
    else:
        parts.append('<div class="queue muted" id="queue-empty">Queue empty.</div>')
    return "".join(parts)


def _cut(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def chat_page(
    thread_id: str,
    state: ThreadState | None,
    messages: Iterable[WebMessage],
    *,
    seq: int,
    typing: bool,
    base: str = "",
) -> str:
    label = thread_label(state) if state is not None else thread_id
    shown = "".join(message_html(m) for m in messages)
    if not shown:
        shown = (
            '<p class="muted" id="no-messages">Nothing shown in this thread since Spindle '
            "started; its history is in the timeline.</p>"
        )
    body = (
        f'<div id="chat" data-thread="{escape(thread_id)}" '
        f'data-base="{escape(base)}/t/{escape(thread_id)}" data-seq="{seq}">'
        f'<div class="chat-head"><h1 id="thread-title">{escape(label)}</h1>'
        f'<a href="{escape(base)}/t/{escape(thread_id)}/timeline" id="timeline-link">timeline</a>'
        "</div>"
        f'<section id="status" aria-live="polite">{status_html(state, typing=typing)}</section>'
        f'<section id="messages">{shown}</section>'
        '<p class="notice" id="notice" hidden></p>'
        '<form id="composer" autocomplete="off">'
        '<textarea id="prompt" rows="3" placeholder="A prompt, or a command: /queue, /abort, '
        '/status, /clear-queue … (Enter sends, Shift+Enter for a new line)"></textarea>'
        '<div class="composer-buttons"><button type="submit" id="send">Send</button>'
        '<button type="button" id="queue-send" title="Wait for the current run">Queue</button>'
        '<label class="attach" title="Files for the agent, saved into its workdir">'
        '<input type="file" id="files" multiple> Attach</label>'
        "</div></form></div>"
    )
    return _layout(label, body, scripts=("chat.js",), main_class="chat", base=base)


def timeline_page(
    timeline: Timeline,
    *,
    title: str,
    back: str | None,
    inline: tuple[str, str] | None = None,
    base: str = "",
) -> str:
    if back:
        link = f'<a href="{escape(back)}">back to the chat</a>'
    else:
        link = "" if inline else f'<a href="{escape(base)}/">home</a>'
    body = (
        f'<div class="chat-head"><h1>Timeline · {escape(title)}</h1>{link}</div>'
        f"{runs_table(timeline)}"
        '<div class="player"><button type="button" id="play">▶ Play</button> '
        '<input type="range" id="scrub" min="0" max="1000" value="1000"> '
        '<span id="clock" class="muted"></span></div>'
        f'<div class="svgbox">{timeline_svg(timeline)}</div>'
    )
    return _layout(
        f"Timeline · {title}",
        body,
        scripts=("timeline.js",),
        main_class="wide",
        inline=inline,
        base=base,
    )


def standalone_timeline(timeline: Timeline, *, title: str) -> str:
    """The timeline page as one file to open from disk (``spindle web-timeline``): its
    style and playback script inlined, nothing loaded from anywhere."""
    from importlib import resources

    static = resources.files("threadspindle.ingress.web.static")
    css = static.joinpath("style.css").read_text(encoding="utf-8")
    js = static.joinpath("timeline.js").read_text(encoding="utf-8")
    return timeline_page(timeline, title=title, back=None, inline=(css, js))


def error_page(status: int, text: str) -> str:
    return _layout(f"{status}", f'<h1>{status}</h1><p class="notice">{escape(text)}</p>')
