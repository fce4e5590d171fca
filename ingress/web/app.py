"""The web chat's ASGI application: pages, the live stream, and the user's actions.

``build_app(chat)`` is a Starlette app behind ``WebGuard`` (``ingress.web.security``: the
token, its cookie, ``Origin`` on every POST, ``Host``, the security headers); hypercorn
serves it on the trio thread (``ingress.web.host``). ``WebChat`` is what the routes share:
the runtime (the one entry for actions), the ``WebPlatform`` (what the renderer showed),
the settings and ids. It decides nothing: every request that changes something posts an
action and answers once it is durable; what the user then sees comes back through the
renderer and the live stream, exactly as on any other platform.

Routes, each below the start's own path (``security.own_path``, ``/s/<hex>``: ``WebGuard``
serves nothing outside it but the static files, and the routes see the path after it):

- ``GET /``: the web threads, starting a conversation, uploading an exported log;
- ``POST /threads`` (form ``agent``, ``workdir``): a new ``web:`` thread, then its page;
- ``GET /t/<thread>``: the chat, drawn from the platform's messages and the runtime's
  snapshot (a reload mid-run shows what the stream showed);
- ``GET /t/<thread>/events?after=N``: server-sent events: ``put``/``delete`` of messages
  (numbered: a reconnect resumes after ``Last-Event-ID``), ``status`` when the panel
  changes, ``reload`` when the page is too far behind;
- ``POST /t/<thread>/say`` (JSON ``text``, ``queue``) and ``/button`` (``action``,
  ``answer``): a prompt or command, a button press; 400 with ``error`` when refused;
- ``GET /t/<thread>/timeline``: the thread's timeline from the event log;
  ``POST /timeline`` (a file): the timeline of an exported log;
- ``GET /static/<name>``: the script and style shipped in the package.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import trio
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from threadspindle.effects.web_platform import Update, WebPlatform
from threadspindle.ingress.attachments import AttachmentLimits, AttachmentRefused, store_attachments
from threadspindle.ingress.input_checks import InputRefused
from threadspindle.ingress.runtime_port import RuntimePort
from threadspindle.ingress.web import pages
from threadspindle.ingress.web.commands import (
    AUTHOR,
    MAX_PROMPT_CHARS,
    WebIds,
    button_action,
    line_action,
    start_action,
)
from threadspindle.ingress.web.security import (
    SECURITY_HEADERS,
    allowed_hosts,
    cookie_header,
    cookie_name,
    host_ok,
    origin_ok,
    own_path,
    token_ok,
)
from threadspindle.ingress.web.settings import WebSettings
from threadspindle.ingress.web.timeline import timeline_of_db, timeline_of_lines
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.model import ThreadState
from threadspindle.runtime.core.storable import without_surrogates

__all__ = ["RuntimePort", "WebChat", "WebGuard", "build_app", "workdir_choices"]

_log = logging.getLogger(__name__)

WEB_THREAD = re.compile(r"^web:[0-9a-f]{1,32}$")
ANY_THREAD = re.compile(r"^[\w:.\-]{1,128}$")
MAX_UPLOAD = 50 * 1024 * 1024
MAX_EXPORT_LINE = 4 * 1024 * 1024  # one action of an uploaded export
MAX_BODY = 1024 * 1024
# Files sent with one message (``/t/<thread>/attach``), all together, and how many.
MAX_ATTACHED = 25 * 1024 * 1024
MAX_FILES = 10
STATUS_POLL_S = 0.3  # the status panel also follows state changes that show no message
KEEPALIVE_S = 15.0
# A live stream ends after this long and the browser reconnects (from ``Last-Event-ID``):
# its client sends nothing meanwhile, and the server's read timeout (``host``) would
# otherwise cut it as a stalled connection.
STREAM_LIFETIME_S = 45.0
STATIC_TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
MAX_WORKDIR_CHOICES = 300
MAX_NOTICES = 64  # refusals kept for their redirect's page (one per refused form sent)


@dataclass
class WebChat:
    """What every route shares; ``runtime`` is set once the runtime is open."""

    settings: WebSettings
    platform: WebPlatform
    runtime: RuntimePort | None = None
    log_path: Path | None = None  # the event log, for timelines
    clock: Callable[[], float] = time.time
    ids: WebIds = field(default_factory=WebIds)
    requests: int = 0
    refused: int = 0  # requests the guard turned away
    # Refusals shown on the home page after a redirect, by a random key: the page shows
    # only what the server put here, never text from its address (an agent's link to
    # ``?notice=...`` would put its own words in the chat's warning box).
    notices: dict[str, str] = field(default_factory=dict)

    def keep_notice(self, text: str) -> str:
        """Keep ``text`` for the home page; the key its address carries."""
        while len(self.notices) >= MAX_NOTICES:
            del self.notices[next(iter(self.notices))]  # the oldest: never read, or lost
        key = secrets.token_urlsafe(12)
        self.notices[key] = text
        return key

    def take_notice(self, key: str) -> str:
        """The notice kept under ``key``, once; "" for any other key."""
        return self.notices.pop(key, "")

    def live(self) -> RuntimePort:
        if self.runtime is None:
            raise RuntimeError("the runtime is not open yet")
        return self.runtime

    async def post(self, action: A.Action) -> None:
        receipt = await self.live().post(action, channel_id="web")
        await receipt.durable()  # answered only once a crash cannot lose it


def workdir_choices(roots: tuple[str, ...], limit: int = MAX_WORKDIR_CHOICES) -> list[str]:
    """The allowed roots and the directories right under them (hidden ones left out)."""
    found: list[str] = []
    for root in roots:
        found.append(root)
        try:
            entries = sorted(os.scandir(root), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if len(found) >= limit:
                return found
            try:
                if not entry.name.startswith(".") and entry.is_dir():
                    found.append(entry.path)
            except OSError:
                continue
    return found


# --- the guard ---------------------------------------------------------------------------


class WebGuard:
    """ASGI middleware: refuses what ``ingress.web.security`` refuses, before the app."""

    def __init__(self, app: ASGIApp, chat: WebChat, hosts: frozenset[str], port: int) -> None:
        self.app = app
        self.chat = chat
        self.hosts = hosts
        self.port = port  # names the cookie
        self.base = own_path(chat.settings.token)  # every page is under it, and its cookie

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.chat.requests += 1
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        path: str = scope["path"]
        token = self.chat.settings.token
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))

        async def send_secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        async def refuse(status: int, text: str) -> None:
            self.chat.refused += 1
            response = HTMLResponse(pages.error_page(status, text), status_code=status)
            await response(scope, receive, send_secured)

        if not host_ok(headers.get("host"), self.hosts):
            await refuse(421, "This server does not answer to that host name.")
            return
        if path.startswith("/static/") or path == "/favicon.ico":  # nothing secret there
            await self.app(scope, receive, send_secured)
            return
        given = query.get("token", [None])[0]
        inside = path == self.base or path.startswith(self.base + "/")
        if scope["method"] == "GET" and given is not None:
            if not token_ok(given, token):
                await refuse(401, "Wrong access token: open the URL Spindle printed at start.")
                return
            # The same page under the chat's own path (the printed URL is ``/?token=``),
            # where the cookie goes with every request, and nowhere else.
            rest = {k: v for k, v in query.items() if k != "token"}
            target = (path if inside else self.base + path) + (
                "?" + urlencode(rest, doseq=True) if rest else ""
            )
            response = RedirectResponse(target, status_code=303)
            response.headers["set-cookie"] = cookie_header(token, self.port)
            await response(scope, receive, send_secured)
            return
        # Outside the path nothing is served, and nothing says where the path is: it is
        # what keeps the cookie from a server on another port of the same host name.
        if not inside or not token_ok(
            _cookie(headers.get("cookie", ""), cookie_name(self.port)), token
        ):
            await refuse(401, "Open the URL Spindle printed at start (it carries the token).")
            return
        if path == self.base:
            await RedirectResponse(self.base + "/", status_code=303)(scope, receive, send_secured)
            return
        if scope["method"] not in ("GET", "HEAD") and not origin_ok(
            headers.get("origin"), self.hosts
        ):
            await refuse(403, "Refused: this request did not come from the web chat's page.")
            return
        # The routes see the path below the chat's own (``root_path``: Starlette routes on
        # what follows it, and the pages link under it).
        await self.app({**scope, "root_path": self.base}, receive, send_secured)


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


# --- the routes --------------------------------------------------------------------------


def _html(text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status)


def _refused(text: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": text}, status_code=status)


def _update_event(update: Update) -> str:
    data: dict[str, Any] = {"id": update.message_id}
    if update.message is not None:
        data["html"] = pages.message_html(update.message)
    return f"id: {update.seq}\nevent: {update.kind}\ndata: {json.dumps(data)}\n\n"


def _status_event(html: str, phase: str, title: str) -> str:
    """The status panel, the run's phase and the thread's name (the agent's title once it
    has one: the page's heading and the browser tab follow it)."""
    data = {"html": html, "phase": phase, "title": title}
    return f"event: status\ndata: {json.dumps(data)}\n\n"


async def _bounded_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The request's body, read chunk by chunk and refused past ``limit`` bytes: memory stays
    bounded whatever a client sends (a chunked body has no Content-Length to check first)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise InputRefused("The request is too large.")
        chunks.append(chunk)
    return b"".join(chunks)


async def _json_body(request: Request) -> dict[str, Any]:
    body = await _bounded_body(request)
    try:
        # A lone surrogate escape ("\\ud800") has no UTF-8 form: U+FFFD instead.
        data = without_surrogates(json.loads(body or b"{}"))
    except (ValueError, RecursionError):
        raise InputRefused("The request is not JSON.") from None
    if not isinstance(data, dict):
        raise InputRefused("The request is not a JSON object.")
    return data


def _event_id(raw: str) -> int:
    """A stream's ``Last-Event-ID`` or ``after``; 0 (from the start) when it is not one.
    Past 18 digits it is no id this server gave (and past 4300, ``int`` raises)."""
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 18 else 0


def _upload_lines(file: Any) -> Iterator[str]:
    """An uploaded export's lines, one at a time; ``ValueError`` for one longer than
    ``MAX_EXPORT_LINE`` (no action is: a prompt is at most 100,000 characters)."""
    file.seek(0)
    while line := file.readline(MAX_EXPORT_LINE + 1):
        if len(line) > MAX_EXPORT_LINE:
            raise ValueError(f"a line is longer than {MAX_EXPORT_LINE // 1048576} MiB")
        yield line.decode("utf-8", "replace").rstrip("\r\n")


def _content_length(request: Request) -> int | None:
    """The request's ``Content-Length``; None when it has none (or not a number)."""
    raw = request.headers.get("content-length") or ""
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 18 else None


def build_app(chat: WebChat, *, port: int | None = None) -> WebGuard:
    """The guarded app; ``port`` is the one really bound (the ``Host`` and ``Origin``
    checks need it when the setting is 0)."""
    settings = chat.settings
    static = {
        name: (resources.files("threadspindle.ingress.web.static").joinpath(name).read_bytes())
        for name in ("chat.js", "style.css", "timeline.js", "icon.svg")
    }

    def web_thread(request: Request) -> str | None:
        """The web thread the path names, when it exists (in the runtime, or on the page
        of this process): an unknown id never gets a view made for it."""
        thread_id = str(request.path_params["thread"])
        if not WEB_THREAD.match(thread_id):
            return None
        if chat.live().snapshot(thread_id) is None and not chat.platform.knows(thread_id):
            return None
        return thread_id

    async def home(request: Request) -> Response:
        runtime = chat.live()
        threads = {
            tid: state
            for tid, state in runtime.snapshots().items()
            if WEB_THREAD.match(tid) and state.conversation is not None
        }
        ordered = dict(sorted(threads.items(), key=lambda kv: -_last_used(kv[1])))
        workdirs = await trio.to_thread.run_sync(workdir_choices, settings.roots())
        return _html(
            pages.home_page(
                ordered,
                base=_base(request),
                agents=settings.agents,
                default_agent=settings.default_agent,
                workdirs=workdirs,
                default_workdir=settings.default_workdir,
                notice=chat.take_notice(request.query_params.get("notice", ""))[:300],
            )
        )

    async def start(request: Request) -> Response:
        thread_id = chat.ids.thread_id()
        try:
            form = parse_qs((await _bounded_body(request)).decode("utf-8", "replace"))
            agent = form.get("agent", [settings.default_agent])[0]
            workdir = form.get("workdir", [settings.default_workdir])[0]
            action = start_action(
                thread_id, chat.ids.action_id(), chat.clock(), agent, workdir, settings.agents
            )
        except InputRefused as refused:
            return RedirectResponse(
                f"{_base(request)}/?" + urlencode({"notice": chat.keep_notice(str(refused))}),
                status_code=303,
            )
        await chat.post(action)
        return RedirectResponse(f"{_base(request)}/t/{thread_id}", status_code=303)

    async def thread_page(request: Request) -> Response:
        thread_id = web_thread(request)
        if thread_id is None:
            return _html(pages.error_page(404, "No such web thread."), 404)
        view = chat.platform.view(thread_id)
        state = chat.live().snapshot(thread_id)
        return _html(
            pages.chat_page(
                thread_id,
                state,
                view.messages(),
                seq=view.seq,
                typing=chat.platform.typing_now(thread_id),
                base=_base(request),
            )
        )

    async def events(request: Request) -> Response:
        thread_id = web_thread(request)
        if thread_id is None:
            return _html(pages.error_page(404, "No such web thread."), 404)
        raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        after = _event_id(raw)

        async def stream() -> AsyncIterator[str]:
            seq = after
            shown_status: str | None = None
            shown_label = ""
            quiet_since = opened = trio.current_time()
            yield "retry: 1000\n\n"
            while trio.current_time() - opened < STREAM_LIFETIME_S:
                view = chat.platform.view(thread_id)
                updates = view.updates_after(seq) if seq <= view.seq else None
                upto = view.seq  # read with the updates: each yield below may let more in
                if updates is None:
                    yield "event: reload\ndata: {}\n\n"
                    return
                for update in updates:
                    yield _update_event(update)
                seq = upto  # the last update sent is change ``upto`` (its message's last)
                state = chat.live().snapshot(thread_id)
                status = pages.status_html(state, typing=chat.platform.typing_now(thread_id))
                label = pages.thread_label(state) if state is not None else thread_id
                if status != shown_status or label != shown_label:
                    shown_status, shown_label = status, label
                    phase = state.run.phase.value if state and state.run else "idle"
                    yield _status_event(status, phase, label)
                if updates or shown_status is status:  # something was sent just now
                    quiet_since = trio.current_time()
                elif trio.current_time() - quiet_since > KEEPALIVE_S:
                    quiet_since = trio.current_time()
                    yield ": keep-alive\n\n"
                with trio.move_on_after(STATUS_POLL_S):
                    await view.wait_change(seq)

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"x-accel-buffering": "no"},
        )

    async def say(request: Request) -> Response:
        thread_id = web_thread(request)
        if thread_id is None:
            return _refused("No such web thread.", 404)
        try:
            data = await _json_body(request)
            text = data.get("text")
            if not isinstance(text, str):
                raise InputRefused("Type a prompt or a command.")
            state = chat.live().snapshot(thread_id)
            if state is None or state.conversation is None:
                raise InputRefused("No conversation in this thread: start one on the home page.")
            action = line_action(state, thread_id, chat.ids.action_id(), chat.clock(), text)
            if data.get("queue") is True and isinstance(action, A.UserMessage):
                action = A.QueueCommand(
                    thread_id=thread_id,
                    action_id=action.action_id,
                    at=action.at,
                    author_id=action.author_id,
                    author_name=action.author_name,
                    text=action.text,
                    source_message_id=action.source_message_id,
                )
        except InputRefused as refused:
            return _refused(str(refused))
        chat.platform.user_said(thread_id, text)
        await chat.post(action)
        return Response(status_code=204)

    async def attach(request: Request) -> Response:
        """A message with files (a multipart form: ``text``, ``queue``, ``file``s): each
        saved into the conversation's workdir, a small text file inlined, as a chat
        platform's attachments are; the text, if any, the prompt. All of it or nothing:
        a file that cannot be taken refuses the message."""
        thread_id = web_thread(request)
        if thread_id is None:
            return _refused("No such web thread.", 404)
        length = _content_length(request)
        if length is None:
            return _refused("Send the files with their length (a browser does).", 411)
        if length > MAX_ATTACHED + MAX_BODY:
            return _refused(f"The files are larger than {MAX_ATTACHED // 1048576} MiB.", 413)
        state = chat.live().snapshot(thread_id)
        if state is None or state.conversation is None:
            return _refused("No conversation in this thread: start one on the home page.")
        workdir = state.conversation.workdir
        action_id = chat.ids.action_id()
        try:
            async with request.form(max_files=MAX_FILES, max_fields=4) as form:
                text = form.get("text")
                text = text if isinstance(text, str) else ""
                queued = form.get("queue") == "1"
                uploads = [u for u in form.getlist("file") if isinstance(u, UploadFile)]
                if not uploads:
                    raise InputRefused("Choose a file to send.")
                if text.startswith("/"):
                    raise InputRefused("A command takes no files: send the files alone.")
                if len(text) > MAX_PROMPT_CHARS:
                    raise InputRefused(f"A message may have at most {MAX_PROMPT_CHARS} characters.")
                files = [
                    (
                        upload.filename or "file",
                        await upload.read(MAX_ATTACHED + 1),
                        upload.content_type,
                    )
                    for upload in uploads
                ]
            attachments = await trio.to_thread.run_sync(
                lambda: store_attachments(
                    files,
                    message_id=action_id,
                    workdir=workdir,
                    limits=AttachmentLimits(max_bytes=MAX_ATTACHED),
                )
            )
        except (InputRefused, AttachmentRefused) as refused:
            return _refused(str(refused))
        except HTTPException as error:  # starlette's for a malformed form, too many files
            return _refused(f"The files could not be read: {error.detail}", error.status_code)
        fields: dict[str, Any] = {
            "thread_id": thread_id,
            "action_id": action_id,
            "at": chat.clock(),
            "author_id": AUTHOR,
            "author_name": AUTHOR,
            "source_message_id": action_id,
            "text": text,
            "attachments": attachments,
        }
        action: A.Action = A.QueueCommand(**fields) if queued else A.UserMessage(**fields)
        names = "\n".join(f"📎 {a.name}" for a in attachments)
        chat.platform.user_said(thread_id, f"{text}\n{names}" if text.strip() else names)
        await chat.post(action)
        return Response(status_code=204)

    async def button(request: Request) -> Response:
        thread_id = web_thread(request)
        if thread_id is None:
            return _refused("No such web thread.", 404)
        try:
            data = await _json_body(request)
            pressed = data.get("action")
            answer = data.get("answer")
            if not isinstance(pressed, str) or not (answer is None or isinstance(answer, str)):
                raise InputRefused("That button does nothing here.")
            state = chat.live().snapshot(thread_id)
            action: A.Action
            if pressed == "abort":
                action = A.AbortRequested(
                    thread_id=thread_id,
                    action_id=chat.ids.action_id(),
                    at=chat.clock(),
                    author_id=AUTHOR,
                )
            else:
                action = button_action(
                    state, thread_id, chat.ids.action_id(), chat.clock(), pressed, answer
                )
        except InputRefused as refused:
            return _refused(str(refused))
        await chat.post(action)
        return Response(status_code=204)

    async def thread_timeline(request: Request) -> Response:
        thread_id = str(request.path_params["thread"])
        log_path = chat.log_path
        if not ANY_THREAD.match(thread_id) or log_path is None:
            return _html(pages.error_page(404, "No such thread."), 404)
        now = chat.clock()
        try:
            # In a worker thread: folding a long log takes a while (~50 µs per action).
            timeline = await trio.to_thread.run_sync(
                lambda: timeline_of_db(log_path, thread_id, now=now)
            )
        except KeyError:
            return _html(pages.error_page(404, "No action of this thread is logged yet."), 404)
        except Exception as error:  # a log that cannot be read: say so, keep serving
            _log.warning("timeline of %s: %s", thread_id, error)
            return _html(pages.error_page(500, f"Cannot read the log: {error}"), 500)
        base = _base(request)
        back = f"{base}/t/{thread_id}" if WEB_THREAD.match(thread_id) else None
        return _html(pages.timeline_page(timeline, title=thread_id, back=back, base=base))

    async def upload_timeline(request: Request) -> Response:
        # The length first, as for attachments: without one (a chunked body) the form
        # parser would spool the whole body to disk before anything could refuse it.
        length = _content_length(request)
        if length is None:
            return _html(pages.error_page(411, "Send the file with its length."), 411)
        if length > MAX_UPLOAD:
            return _html(pages.error_page(413, "The file is larger than 50 MiB."), 413)
        try:
            async with request.form(max_files=1, max_fields=4) as form:
                upload = form.get("log")
                if not isinstance(upload, UploadFile):
                    return _html(pages.error_page(400, "Choose an exported log file."), 400)
                name = upload.filename or "uploaded log"
                # Line by line from the spooled file, in a worker thread: the whole text
                # split at once held every line of a 50 MiB file (1.3 GB for short lines).
                file = upload.file
                timeline = await trio.to_thread.run_sync(
                    lambda: timeline_of_lines(_upload_lines(file), name)
                )
        except ValueError as error:
            return _html(pages.error_page(400, f"Not a Spindle log export: {error}"), 400)
        except HTTPException as error:  # starlette's for a malformed form
            return _html(pages.error_page(400, f"The file could not be read: {error.detail}"), 400)
        if timeline.actions == 0:
            return _html(pages.error_page(400, "The file holds no action."), 400)
        return _html(pages.timeline_page(timeline, title=name, back=None, base=_base(request)))

    async def static_file(request: Request) -> Response:
        name = str(request.path_params["name"])
        body = static.get(name)
        if body is None:
            return Response("not found", status_code=404, media_type="text/plain")
        kind = STATIC_TYPES[os.path.splitext(name)[1]]
        return Response(body, media_type=f"{kind}; charset=utf-8")

    async def favicon(request: Request) -> Response:
        return RedirectResponse("/static/icon.svg", status_code=301)

    app = Starlette(
        routes=[
            Route("/", home, methods=["GET"]),
            Route("/threads", start, methods=["POST"]),
            Route("/t/{thread}", thread_page, methods=["GET"]),
            Route("/t/{thread}/events", events, methods=["GET"]),
            Route("/t/{thread}/say", say, methods=["POST"]),
            Route("/t/{thread}/attach", attach, methods=["POST"]),
            Route("/t/{thread}/button", button, methods=["POST"]),
            Route("/t/{thread}/timeline", thread_timeline, methods=["GET"]),
            Route("/timeline", upload_timeline, methods=["POST"]),
            Route("/static/{name}", static_file, methods=["GET"]),
            Route("/favicon.ico", favicon, methods=["GET"]),
        ]
    )
    bound = settings.port if port is None else port
    return WebGuard(app, chat, allowed_hosts(settings.host, bound, settings.token), bound)


def _base(request: Request) -> str:
    """The path every page is under (``WebGuard`` sets it): links and redirects start with
    it, so the browser sends the cookie with them."""
    return str(request.scope.get("root_path", ""))


def _last_used(state: ThreadState) -> float:
    if state.run is not None:
        return state.run.started_at
    if state.queue:
        return state.queue[-1].queued_at
    if state.last_prompt is not None:
        return state.last_prompt.queued_at
    return 0.0
