"""The web chat's ASGI app, driven by httpx in-process over a recording runtime: who gets
in (token, cookie, Origin, Host), what each request posts, and that nothing an agent or a
user wrote reaches the page as markup."""

from __future__ import annotations

import http.cookiejar
import json
import re
import urllib.request
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from threadspindle.effects.platform import SelectMenu
from threadspindle.effects.web_platform import WebPlatform
from threadspindle.ingress.web import app as web_app
from threadspindle.ingress.web import host as web_host
from threadspindle.ingress.web.app import WebChat, build_app
from threadspindle.ingress.web.security import own_name, own_path
from threadspindle.ingress.web.settings import WebSettings
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.effect_types import Button
from threadspindle.runtime.core.model import (
    Blocker,
    Conversation,
    Phase,
    QueueItem,
    Run,
    ThreadState,
)
from threadspindle.testkit.connection_flood import open_flood, until_accepted

TOKEN = "t0ken-for-tests-only"
PORT = 8750
ORIGIN = f"http://127.0.0.1:{PORT}"
THREAD = "web:0abc"
BASE = own_path(TOKEN)  # every page is under it (a path in a test is below it)
XSS = '<script>alert(1)</script> <img src=x onerror="alert(2)"> "><b>'


class Receipt:
    async def durable(self) -> bool:
        return True


class RecordingRuntime:
    """The runtime as the web chat sees it: what was posted, and states set by the test."""

    def __init__(self) -> None:
        self.posted: list[A.Action] = []
        self.states: dict[str, ThreadState] = {}

    async def post(self, action: A.Action, *, channel_id: str | None = None) -> Receipt:
        self.posted.append(action)
        return Receipt()

    def snapshot(self, thread_id: str) -> ThreadState | None:
        return self.states.get(thread_id)

    def snapshots(self) -> Mapping[str, ThreadState]:
        return dict(self.states)


def _item(item_id: str, text: str) -> QueueItem:
    return QueueItem(id=item_id, author_id="web", author_name="web", text=text, queued_at=1.0)


def _state(workdir: str, **update: Any) -> ThreadState:
    state = ThreadState.new(THREAD).replace(
        conversation=Conversation(agent="echo", workdir=workdir)
    )
    return state.replace(**update) if update else state


@pytest.fixture
def runtime(tmp_path: Path) -> RecordingRuntime:
    runtime = RecordingRuntime()
    runtime.states[THREAD] = _state(str(tmp_path))
    return runtime


@pytest.fixture
def chat(runtime: RecordingRuntime, tmp_path: Path) -> WebChat:
    settings = WebSettings(
        token=TOKEN,
        port=PORT,
        agents=("echo", "claude"),
        default_workdir=str(tmp_path),
        allowed_roots=(str(tmp_path),),
    )
    return WebChat(settings, WebPlatform(), runtime, clock=lambda: 1000.0)


@pytest.fixture
async def client(chat: WebChat) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=build_app(chat))
    async with httpx.AsyncClient(transport=transport, base_url=ORIGIN + BASE) as c:
        yield c


async def _logged_in(client: httpx.AsyncClient) -> None:
    answer = await client.get(f"/?token={TOKEN}")
    assert answer.status_code == 303
    client.cookies.set(f"spindle_web_{PORT}", TOKEN)


# --- who gets in -------------------------------------------------------------------------


async def test_without_the_token_nothing_is_shown_or_posted(
    client: httpx.AsyncClient, runtime: RecordingRuntime
) -> None:
    for path in ("/", f"/t/{THREAD}", f"/t/{THREAD}/events", f"/t/{THREAD}/timeline"):
        answer = await client.get(path)
        assert answer.status_code == 401, path
        assert "printed at start" in answer.text
    answer = await client.post(f"/t/{THREAD}/say", json={"text": "hi"}, headers={"origin": ORIGIN})
    assert answer.status_code == 401
    answer = await client.get("/?token=wrong-token")
    assert answer.status_code == 401
    assert "set-cookie" not in answer.headers
    assert runtime.posted == []


async def test_the_token_in_the_url_becomes_a_strict_httponly_cookie(
    client: httpx.AsyncClient,
) -> None:
    answer = await client.get(f"/t/{THREAD}?token={TOKEN}&x=1")
    assert answer.status_code == 303
    assert answer.headers["location"] == f"{BASE}/t/{THREAD}?x=1"  # the token left the URL
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"spindle_web_{PORT}={TOKEN};")  # one per port
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and f"Path={BASE};" in cookie
    page = await client.get(f"/t/{THREAD}")  # httpx keeps the cookie
    assert page.status_code == 200
    assert TOKEN not in page.text
    # The printed URL is the server's root: it leads under the chat's own path.
    printed = await client.get(f"{ORIGIN}/?token={TOKEN}")
    assert printed.status_code == 303 and printed.headers["location"] == f"{BASE}/"


async def test_the_cookie_goes_only_under_a_path_no_agent_can_know(
    client: httpx.AsyncClient, runtime: RecordingRuntime
) -> None:
    # Browsers send a host's cookies to every port of it: opened under 127.0.0.1 (Safari
    # may not resolve the chat's own name), the cookie went to an agent's server on
    # 127.0.0.1:3000 with the first link to it the user followed. Scoped to a path derived
    # from the token, it goes with no URL an agent can write (docs/web.md).
    assert re.fullmatch(r"/s/[0-9a-f]{32}", BASE)
    assert TOKEN not in BASE and own_path("another start's token") != BASE
    assert BASE[3:] not in own_name(TOKEN)  # (not the host name's digits either)
    answer = await client.get(f"{ORIGIN}/?token={TOKEN}")
    jar = http.cookiejar.CookieJar()
    jar.extract_cookies(
        _Answer(answer.headers.get_list("set-cookie")),
        urllib.request.Request(f"{ORIGIN}/?token={TOKEN}"),
    )
    for url, sent in (
        (f"{ORIGIN}{BASE}/t/{THREAD}", True),
        ("http://127.0.0.1:3000/", False),  # the agent's server: same host, as a browser
        ("http://127.0.0.1:3000/s/", False),
        (f"http://127.0.0.1:3000{BASE}x/", False),
        (f"{ORIGIN}/t/{THREAD}", False),
    ):
        request = urllib.request.Request(url)
        jar.add_cookie_header(request)
        assert request.has_header("Cookie") is sent, url
    # With the cookie, nothing outside the path is served, and no answer says where it is.
    client.cookies.set(f"spindle_web_{PORT}", TOKEN)
    for path in ("/", f"/t/{THREAD}", "/s/", f"{BASE[:-1]}/t/{THREAD}"):
        outside = await client.get(f"{ORIGIN}{path}")
        assert outside.status_code == 401, path
        assert BASE not in outside.text and "location" not in outside.headers
    assert (await client.get(f"{ORIGIN}{BASE}")).headers["location"] == f"{BASE}/"
    home = await client.get("/")
    assert home.status_code == 200
    # Every link and form of the pages stays under it (the static files need no cookie).
    for page in (home, await client.get(f"/t/{THREAD}")):
        for link in re.findall(r'(?:href|action|src|data-base)="([^"]*)"', page.text):
            assert link.startswith((f"{BASE}/", "/static/")), link
    assert runtime.posted == []


class _Answer:
    """An HTTP answer's headers as ``http.cookiejar`` reads them (a browser's cookie rules:
    the ``Path`` a cookie is sent under)."""

    def __init__(self, cookies: list[str]) -> None:
        self._cookies = cookies

    def info(self) -> _Answer:
        return self

    def get_all(self, name: str, default: list[str]) -> list[str]:
        return self._cookies if name.lower() == "set-cookie" else default


async def test_every_post_needs_this_servers_origin(
    client: httpx.AsyncClient, runtime: RecordingRuntime
) -> None:
    await _logged_in(client)
    for origin in (
        None,
        "http://evil.example",
        "https://127.0.0.1:8750",
        "null",
        f"http://127.0.0.1:{PORT + 1}",
        f"{ORIGIN}/path",
    ):
        headers = {"origin": origin} if origin else {}
        answer = await client.post(f"/t/{THREAD}/say", json={"text": "hi"}, headers=headers)
        assert answer.status_code == 403, origin
        answer = await client.post(
            "/threads", data={"agent": "echo", "workdir": "/"}, headers=headers
        )
        assert answer.status_code == 403, origin
    assert runtime.posted == []
    for origin in (ORIGIN, f"http://localhost:{PORT}"):
        answer = await client.post(
            f"/t/{THREAD}/say", json={"text": "hi"}, headers={"origin": origin}
        )
        assert answer.status_code == 204
    assert [type(a) for a in runtime.posted] == [A.UserMessage, A.UserMessage]


async def test_two_web_chats_on_one_machine_keep_their_own_cookies(
    chat: WebChat, runtime: RecordingRuntime
) -> None:
    # A browser sends a host's cookies to every port of it: with one cookie name the
    # second chat's login overwrote the first's (each logged the other out).
    other = WebChat(
        chat.settings.model_copy(update={"token": "other-token", "port": 9999}), WebPlatform()
    )
    jar = httpx.Cookies()
    for app, port, token in (
        (build_app(chat), PORT, TOKEN),
        (build_app(other), 9999, "other-token"),
    ):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{port}") as c:
            answer = await c.get(f"/?token={token}")
            name, _, rest = answer.headers["set-cookie"].partition("=")
            jar.set(name, rest.partition(";")[0], domain="127.0.0.1")  # as a browser keeps it
    assert dict(jar) == {f"spindle_web_{PORT}": TOKEN, "spindle_web_9999": "other-token"}
    transport = httpx.ASGITransport(app=build_app(chat))
    async with httpx.AsyncClient(transport=transport, base_url=ORIGIN + BASE, cookies=jar) as c:
        assert (await c.get(f"/t/{THREAD}")).status_code == 200  # still logged in
        c.cookies.clear()
        c.cookies.set("spindle_web_9999", TOKEN)  # this chat's token under another's name
        assert (await c.get(f"/t/{THREAD}")).status_code == 401


async def test_the_chat_answers_to_a_host_name_of_its_own(
    client: httpx.AsyncClient, runtime: RecordingRuntime
) -> None:
    # spindle-<hex>.localhost: loopback without DNS, and a name no agent can know, so its
    # cookie goes to no agent's server on another port (docs/web.md).
    name = own_name(TOKEN)
    assert re.fullmatch(r"spindle-[0-9a-f]{12}\.localhost", name)
    assert TOKEN not in name and own_name("another start's token") != name
    own = f"{name}:{PORT}"
    answer = await client.get(f"/?token={TOKEN}", headers={"host": own})
    assert answer.status_code == 303
    await _logged_in(client)
    answer = await client.post(
        f"/t/{THREAD}/say",
        json={"text": "hi"},
        headers={"host": own, "origin": f"http://{own}"},
    )
    assert answer.status_code == 204
    assert [type(a) for a in runtime.posted] == [A.UserMessage]


async def test_a_foreign_host_name_is_refused(client: httpx.AsyncClient) -> None:
    await _logged_in(client)
    answer = await client.get("/", headers={"host": f"rebound.example:{PORT}"})
    assert answer.status_code == 421
    # The fixed name of earlier versions: an agent knows it, and its server on another
    # port under it would get the cookie; the chat no longer answers to it.
    answer = await client.get("/", headers={"host": f"spindle.localhost:{PORT}"})
    assert answer.status_code == 421


async def test_every_answer_carries_the_security_headers(client: httpx.AsyncClient) -> None:
    await _logged_in(client)
    for path in ("/", f"/t/{THREAD}", "/static/chat.js", "/nowhere"):
        answer = await client.get(path)
        csp = answer.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp
        assert "unsafe-inline" not in csp
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["referrer-policy"] == "same-origin"


async def test_pages_load_nothing_from_elsewhere_and_have_no_inline_script(
    client: httpx.AsyncClient, chat: WebChat
) -> None:
    await _logged_in(client)
    await chat.platform.send(
        THREAD, "see <https://example.org>, ![img](https://example.com/x.png) [x](//example.com)"
    )
    for path in ("/", f"/t/{THREAD}"):
        page = (await client.get(path)).text
        # Links may lead anywhere; nothing is *loaded* from anywhere but this server.
        loaded = re.findall(r'\ssrc="([^"]*)"', page) + re.findall(
            r'<link [^>]*href="([^"]*)"', page
        )
        assert "/static/style.css" in loaded, path
        assert all(url.startswith("/static/") for url in loaded), (path, loaded)
        if path != "/":
            assert "<img" not in page.split('id="messages"')[-1]  # the image stays text
        assert re.findall(r"<script[^>]*>", page) in ([], ['<script src="/static/chat.js" defer>'])
        assert "style=" not in page
    for name, kind in (
        ("chat.js", "text/javascript"),
        ("style.css", "text/css"),
        ("timeline.js", "text/javascript"),
    ):
        answer = await client.get(f"/static/{name}")
        assert answer.status_code == 200 and answer.headers["content-type"].startswith(kind)
        assert "http://" not in answer.text and "https://" not in answer.text
    assert (await client.get("/static/../app.py")).status_code == 404


# --- what is shown ----------------------------------------------------------------------


async def test_agent_and_user_text_is_shown_as_text(
    client: httpx.AsyncClient, chat: WebChat, runtime: RecordingRuntime, tmp_path: Path
) -> None:
    await _logged_in(client)
    await chat.platform.send(THREAD, f"answer: {XSS}")
    await chat.platform.send(
        THREAD,
        "❓ **Question:** pick",
        menu=SelectMenu(custom_id="question:q1", options=(XSS, "plain")),
    )
    await chat.platform.reply(
        THREAD, "a1", "Queued.", buttons=(Button(label=XSS, action=f"remove_queued:{XSS}"),)
    )
    runtime.states[THREAD] = _state(
        str(tmp_path),
        run=Run(
            id="r1", prompt=_item("p", XSS), phase=Phase.RUNNING, started_at=1, last_event_at=1
        ),
        queue=(_item("q-1", XSS),),
        blockers=(Blocker(request_id="q1", kind="question", key="k", run_id="r1", text=XSS),),
    )
    page = (await client.get(f"/t/{THREAD}")).text
    shown = page.split('id="messages"')[-1]  # the chat, after the page's own header
    assert "<script>alert" not in page and "<img" not in shown and '"><b>' not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'onerror="alert' not in page  # only ever inside escaped text
    assert page.count("<script") == 1  # the page's own chat.js
    # Attributes carry the same text escaped: the quote cannot close them.
    assert 'data-answer="&lt;script&gt;alert(1)&lt;/script&gt; &lt;img src=x onerror=&quot;' in page
    home = (await client.get("/")).text
    assert "<script>alert" not in home


async def test_the_chat_page_shows_status_queue_and_prompts(
    client: httpx.AsyncClient, chat: WebChat, runtime: RecordingRuntime, tmp_path: Path
) -> None:
    await _logged_in(client)
    await chat.platform.send(
        THREAD,
        "🔐 **Permission needed:** `Bash`",
        buttons=(
            Button(label="Accept", action="permission:allow:p1"),
            Button(label="Deny", action="permission:deny:p1"),
        ),
    )
    runtime.states[THREAD] = _state(
        str(tmp_path),
        run=Run(
            id="r1", prompt=_item("p", "first"), phase=Phase.RUNNING, started_at=1, last_event_at=1
        ),
        queue=(_item("q-1", "second"), _item("q-2", "third")),
    )
    page = (await client.get(f"/t/{THREAD}")).text
    assert 'id="abort" data-action="abort"' in page
    assert page.count('data-action="remove_queued:') == 2
    assert 'data-action="permission:allow:p1">Accept</button>' in page
    assert 'class="phase phase-running"' in page
    assert f'data-seq="{chat.platform.view(THREAD).seq}"' in page


# --- what is posted ----------------------------------------------------------------------


async def test_starting_a_conversation_posts_it_with_the_resolved_workdir(
    client: httpx.AsyncClient, runtime: RecordingRuntime, tmp_path: Path
) -> None:
    await _logged_in(client)
    (tmp_path / "app").mkdir()
    answer = await client.post(
        "/threads",
        data={"agent": "echo", "workdir": str(tmp_path / "app" / "..")},
        headers={"origin": ORIGIN},
    )
    assert answer.status_code == 303
    (start,) = runtime.posted
    assert isinstance(start, A.ConversationStarted)
    assert answer.headers["location"] == f"{BASE}/t/{start.thread_id}"
    assert re.fullmatch(r"web:[0-9a-f]{12}", start.thread_id)
    assert start.agent == "echo" and start.resolved_workdir == str(tmp_path)
    for form in (
        {"agent": "nope", "workdir": str(tmp_path)},
        {"agent": "echo", "workdir": "bad\x00path"},
    ):
        answer = await client.post("/threads", data=form, headers={"origin": ORIGIN})
        assert answer.status_code == 303 and answer.headers["location"].startswith(
            f"{BASE}/?notice="
        )
        # The page it leads to says why, once; the address holds a key, not the words.
        where = answer.headers["location"].removeprefix(BASE)
        assert "nope" not in where and "path" not in where
        page = (await client.get(where)).text
        assert '<p class="notice">' in page and ("nope" in page or "path" in page)
        assert '<p class="notice">' not in (await client.get(where)).text
    assert len(runtime.posted) == 1
    # A notice in an address the server did not make (an agent's link) shows nothing.
    forged = await client.get("/?notice=Session+expired:+log+in+at+evil.example")
    assert forged.status_code == 200 and "evil.example" not in forged.text
    assert '<p class="notice">' not in forged.text


async def test_lines_buttons_and_refusals(
    client: httpx.AsyncClient, runtime: RecordingRuntime, chat: WebChat, tmp_path: Path
) -> None:
    await _logged_in(client)
    runtime.states[THREAD] = _state(
        str(tmp_path),
        run=Run(
            id="r1", prompt=_item("p", "x"), phase=Phase.RUNNING, started_at=1, last_event_at=1
        ),
        queue=(_item("q-1", "second"),),
        blockers=(Blocker(request_id="p1", kind="permission", key="k", run_id="r1", text="t"),),
    )
    h = {"origin": ORIGIN}

    async def say(body: dict[str, Any]) -> httpx.Response:
        return await client.post(f"/t/{THREAD}/say", json=body, headers=h)

    async def press(body: dict[str, Any]) -> httpx.Response:
        return await client.post(f"/t/{THREAD}/button", json=body, headers=h)

    assert (await say({"text": "plain"})).status_code == 204
    assert (await say({"text": "later", "queue": True})).status_code == 204
    assert (await say({"text": "also later queue"})).status_code == 204
    assert (await say({"text": "/abort"})).status_code == 204
    assert (await say({"text": "/clear-queue 1"})).status_code == 204
    assert (await press({"action": "remove_queued:q-1"})).status_code == 204
    assert (await press({"action": "permission:allow:p1"})).status_code == 204
    assert (await press({"action": "abort"})).status_code == 204
    kinds = [(type(a).__name__, getattr(a, "interrupt", None)) for a in runtime.posted]
    assert kinds == [
        ("UserMessage", True),
        ("QueueCommand", None),
        ("UserMessage", False),
        ("AbortRequested", None),
        ("QueueCleared", None),
        ("QueuedItemRemoved", None),
        ("PermissionAnswered", None),
        ("AbortRequested", None),
    ]
    posted = len(runtime.posted)
    for body, why in (
        ({"text": "/clear-queue ²"}, "position"),
        ({"text": "/frobnicate"}, "Unknown command"),
        ({"text": "   "}, "Type a prompt"),
        ({"text": 42}, "Type a prompt"),
    ):
        answer = await say(body)
        assert answer.status_code == 400 and why in answer.json()["error"]
    for body, why in (
        ({"action": "remove_queued:gone"}, "no longer queued"),
        ({"action": "permission:deny:other"}, "no longer pending"),
        ({"action": "question:p1", "answer": "x"}, "no longer pending"),
        ({"action": "whatever"}, "does nothing"),
    ):
        answer = await press(body)
        assert answer.status_code == 400 and why in answer.json()["error"]
    bad = await client.post(f"/t/{THREAD}/say", content=b"not json", headers=h)
    assert bad.status_code == 400
    elsewhere = await client.post("/t/1234/say", json={"text": "hi"}, headers=h)
    assert elsewhere.status_code == 404  # only web threads take prompts here
    unknown = await client.post("/t/web:ffff/say", json={"text": "hi"}, headers=h)
    assert unknown.status_code == 404
    for path in ("/t/web:ffff", "/t/web:ffff/events"):
        assert (await client.get(path)).status_code == 404
    assert not chat.platform.knows("web:ffff")  # no view made for an id nobody uses
    assert len(runtime.posted) == posted


async def test_an_uploaded_export_is_drawn_and_a_bad_one_refused(
    client: httpx.AsyncClient,
) -> None:
    await _logged_in(client)
    golden = Path(__file__).parents[2] / "runtime" / "golden" / "interrupt_queue.jsonl"
    h = {"origin": ORIGIN}
    answer = await client.post(
        "/timeline", files={"log": ("run.jsonl", golden.read_bytes())}, headers=h
    )
    assert answer.status_code == 200
    assert answer.text.count('class="run ') == 3
    bad = await client.post("/timeline", files={"log": ("x.jsonl", b"{nope")}, headers=h)
    assert bad.status_code == 400 and "Not a Spindle log export" in bad.text
    # Times no log holds (spans past a float's range): refused, not drawn.
    rows = [json.loads(line) for line in golden.read_text().splitlines() if line.strip()]
    for i, row in enumerate(rows):
        row["action"]["at"] = -1e308 if i == 0 else 1e308
    odd = "\n".join(json.dumps(row) for row in rows).encode()
    answer = await client.post("/timeline", files={"log": ("odd.jsonl", odd)}, headers=h)
    assert answer.status_code == 400 and "not a time between 1970 and 9999" in answer.text
    # A line longer than any action: refused, not parsed.
    long = b'{"x": "' + b"y" * (4 * 1024 * 1024) + b'"}\n'
    answer = await client.post("/timeline", files={"log": ("long.jsonl", long)}, headers=h)
    assert answer.status_code == 400 and "longer than 4 MiB" in answer.text

    # Without a length (a chunked body), refused before the form is spooled anywhere.
    async def chunks():
        yield golden.read_bytes()

    chunked = await client.post(
        "/timeline", content=chunks(), headers={**h, "content-type": "multipart/form-data"}
    )
    assert chunked.status_code == 411


async def test_an_oversized_body_is_refused_without_being_read_whole(
    client: httpx.AsyncClient, runtime: RecordingRuntime
) -> None:
    """A body past the limit is refused chunk by chunk, Content-Length or not (a chunked
    body has none), and posts nothing."""
    await _logged_in(client)
    h = {"origin": ORIGIN}

    async def chunks():
        for _ in range(64):  # 4 MiB offered, 1 MiB allowed
            yield b"x" * 65536

    answer = await client.post(f"/t/{THREAD}/say", content=chunks(), headers=h)
    assert answer.status_code == 400 and "too large" in answer.json()["error"]
    started = await client.post("/threads", content=chunks(), headers=h)
    assert started.status_code == 303
    notice = await client.get(started.headers["location"].removeprefix(BASE))
    assert "too large" in notice.text
    assert runtime.posted == []


# --- files sent with a message ------------------------------------------------------------


async def test_files_sent_with_a_message_are_saved_for_the_agent(
    client: httpx.AsyncClient, runtime: RecordingRuntime, chat: WebChat, tmp_path: Path
) -> None:
    await _logged_in(client)
    h = {"origin": ORIGIN}
    picture = bytes(range(256)) * 40
    answer = await client.post(
        f"/t/{THREAD}/attach",
        data={"text": "what is wrong here?", "queue": "0"},
        files=[
            ("file", ("screen shot.png", picture, "image/png")),
            ("file", ("notes.md", b"# fix the parser\n", "text/markdown")),
        ],
        headers=h,
    )
    assert answer.status_code == 204, answer.text
    (action,) = runtime.posted
    assert isinstance(action, A.UserMessage) and action.interrupt
    assert action.text == "what is wrong here?"
    shot, notes = action.attachments
    assert shot.path is not None and Path(shot.path).read_bytes() == picture
    assert Path(shot.path).parent == tmp_path.resolve() / ".spindle" / "attachments"
    assert shot.name == "screen_shot.png" and shot.content_type == "image/png"
    assert notes.inline_text == "# fix the parser\n" and notes.path is None
    # The page shows the user's message with the files named.
    (shown,) = [m for m in chat.platform.view(THREAD).messages() if m.kind == "user"]
    assert "what is wrong here?" in shown.text and "📎 screen_shot.png" in shown.text

    # A file alone, queued: a /queue prompt of the file.
    queued = await client.post(
        f"/t/{THREAD}/attach",
        data={"queue": "1"},
        files={"file": ("a.log", b"boom\n", "text/plain")},
        headers=h,
    )
    assert queued.status_code == 204
    assert isinstance(runtime.posted[-1], A.QueueCommand)
    assert runtime.posted[-1].attachments[0].inline_text == "boom\n"


async def test_files_are_refused_whole_and_post_nothing(
    client: httpx.AsyncClient, runtime: RecordingRuntime, tmp_path: Path
) -> None:
    await _logged_in(client)
    h = {"origin": ORIGIN}

    async def attach(data: dict[str, str], files: Any, headers: dict[str, str] = h) -> Any:
        return await client.post(f"/t/{THREAD}/attach", data=data, files=files, headers=headers)

    one = {"file": ("a.png", b"x" * 100, "image/png")}
    command = await attach({"text": "/abort"}, one)
    assert command.status_code == 400 and "A command takes no files" in command.json()["error"]
    none = await attach({"text": "hi"}, {"other": ("a.png", b"x", "image/png")})
    assert none.status_code == 400 and "Choose a file" in none.json()["error"]
    foreign = await attach({"text": "hi"}, one, {"origin": "http://evil.example"})
    assert foreign.status_code == 403
    # The agent planted a symlink where the files go: refused, nothing written through it.
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / ".spindle").symlink_to(tmp_path / "elsewhere")
    planted = await attach(
        {"text": "hi"},
        [("file", ("ok.txt", b"t", "text/plain")), ("file", ("b.png", b"x", "image/png"))],
    )
    assert planted.status_code == 400 and "symlink" in planted.json()["error"]
    assert list((tmp_path / "elsewhere").iterdir()) == []
    eleven = await attach(
        {"text": "hi"}, [("file", (f"{n}.png", b"x", "image/png")) for n in range(11)]
    )
    assert eleven.status_code == 400 and "could not be read" in eleven.json()["error"]
    too_big = await attach({"text": "hi"}, {"file": ("big.bin", bytes(27 * 1024 * 1024), "a/b")})
    assert too_big.status_code == 413
    assert runtime.posted == []


async def test_a_stalled_request_is_dropped_and_a_live_stream_ends_before_that(
    chat: WebChat, monkeypatch: pytest.MonkeyPatch
) -> None:
    # hypercorn's read timeout is None by default: a request whose body stalls was held
    # for ever. With one, a live stream (its client only listens) must end itself first.
    monkeypatch.setattr(web_host, "READ_TIMEOUT_S", 1)
    monkeypatch.setattr(web_app, "STREAM_LIFETIME_S", 0.5)
    chat.settings = chat.settings.model_copy(update={"port": 0})
    async with trio.open_nursery() as nursery:
        server = await nursery.start(web_host.serve_web, chat)
        host = f"127.0.0.1:{server.port}"
        cookie = f"spindle_web_{server.port}={TOKEN}"
        stalled = await trio.open_tcp_stream("127.0.0.1", server.port)
        head = (
            f"POST {BASE}/t/{THREAD}/say HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n"
            f"Cookie: {cookie}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
        )
        await stalled.send_all(head.encode())
        async with httpx.AsyncClient(
            base_url=server.url + BASE, headers={"cookie": cookie}
        ) as client:
            with trio.fail_after(5):
                stream = await client.get(f"/t/{THREAD}/events")  # whole: it ended
        assert stream.status_code == 200 and stream.text.startswith("retry: 1000")
        with trio.fail_after(3):
            while await stalled.receive_some():
                pass  # until the server closes it
        nursery.cancel_scope.cancel()


async def test_a_flood_of_connections_is_held_to_the_cap_and_the_chat_serves_after(
    chat: WebChat, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Any local process (an agent) can open connections without the token; each held one
    # is a descriptor the agents' pipes and the database need (effects/connection_cap.py).
    monkeypatch.setattr(web_host, "MAX_CONNECTIONS", 8)
    chat.settings = chat.settings.model_copy(update={"port": 0})
    async with trio.open_nursery() as nursery:
        server = await nursery.start(web_host.serve_web, chat)
        flood = await open_flood("127.0.0.1", server.port, 80)
        assert len(flood.kept) == 8 and flood.closed == 72
        await flood.aclose()
        await until_accepted("127.0.0.1", server.port)
        async with httpx.AsyncClient() as client:
            answer = await client.get(server.start_url)
        assert answer.status_code == 303 and answer.headers["location"] == f"{BASE}/"
        nursery.cancel_scope.cancel()


async def test_an_absurd_event_id_is_no_id(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # int() refuses more than 4300 digits: a 5000-digit Last-Event-ID was a 500.
    monkeypatch.setattr(web_app, "STREAM_LIFETIME_S", 0.1)
    await _logged_in(client)
    huge = "9" * 5000
    by_header = await client.get(f"/t/{THREAD}/events", headers={"last-event-id": huge})
    by_query = await client.get(f"/t/{THREAD}/events?after={huge}")
    for answer in (by_header, by_query):
        assert answer.status_code == 200
        assert answer.text.startswith("retry: 1000")


async def test_a_lone_surrogate_in_a_prompt_is_replaced_not_fatal(
    client: httpx.AsyncClient, runtime: RecordingRuntime, tmp_path: Path
) -> None:
    # Valid JSON ("\ud800", what JavaScript writes for a string cut inside an emoji), but
    # no UTF-8 text: it used to end in a 500, a page that could never render again and a
    # gap in the log that refused every later start.
    await _logged_in(client)
    runtime.states[THREAD] = _state(str(tmp_path))
    answer = await client.post(
        f"/t/{THREAD}/say",
        content=b'{"text": "hi \\ud800 there"}',
        headers={"origin": ORIGIN, "content-type": "application/json"},
    )
    assert answer.status_code == 204
    assert runtime.posted[-1].text == "hi \ufffd there"
    assert (await client.get(f"/t/{THREAD}")).status_code == 200
