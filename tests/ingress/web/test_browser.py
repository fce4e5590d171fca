"""The web chat in a real browser: Debian's headless Chromium driven by Playwright.

``spindle run``'s wiring (``run_platforms`` with the web chat, the live runtime on a real
SQLite log, the echo agent answering word by word) serves on 127.0.0.1 in this trio run;
the whole Playwright session runs in one worker thread (Playwright's sync calls would
block the loop that serves the page). The browser resolves no name but 127.0.0.1
(``NO_DNS``). One session walks through what a user does: start a conversation, watch an
answer stream, queue two prompts and remove one, reload mid-run and find the same page,
abort, answer a permission prompt, send a file with a prompt, see an answer holding
``<script>`` shown as text, open the thread's timeline, and then open the links an agent
could write to a server of its own on loopback, which must not get the chat's cookie. With
``SPINDLE_SCREENSHOTS=DIR`` the chat and the timeline are saved there
(``docs/web-chat.png``, ``docs/web-timeline.png`` were made so).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import trio
from playwright.sync_api import Page, expect, sync_playwright

from threadspindle.agents.base import AgentOptions
from threadspindle.agents.echo import EchoAdapter
from threadspindle.ingress.platforms import PlatformsApp, run_platforms
from threadspindle.ingress.web.settings import WebSettings
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.agent_events import TitleChanged
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.live.log import EventLog
from threadspindle.testkit.http_thread import serving

CHROMIUM = "/usr/lib/chromium/chromium"  # the ELF: the /usr/bin wrapper adds its own flags
# No name reaches a DNS server; loopback's names are Chromium's own (it resolves *.localhost
# to loopback itself).
NO_DNS = [
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1, "
    "EXCLUDE *.localhost"
]
WORD_DELAY_S = 0.1
TIMEOUT_MS = 20_000
# Long enough that a loaded machine cannot finish it before the test aborts it.
LONG = " ".join(f"w{n}" for n in range(1, 151))  # 150 words: about 15 s of streaming
FIRST = " ".join(["one", "two", "three", *(f"x{n}" for n in range(24)), "twelve"])  # ~3 s
XSS = "<script>window.__pwned=1</script> <img src=x onerror=window.__pwned=2> done"


def _messages(page: Page) -> list[str]:
    return [t.strip() for t in page.locator("#messages .msg .body").all_inner_texts()]


def _until(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _wait_idle(page: Page) -> None:
    expect(page.locator("#phase")).to_have_text("idle", timeout=TIMEOUT_MS)


def _send(page: Page, text: str, *, queue: bool = False) -> None:
    page.fill("#prompt", text)
    page.click("#queue-send" if queue else "#send")
    expect(page.locator("#prompt")).to_have_value("", timeout=TIMEOUT_MS)


class _AgentServer:
    """A server an agent could start on loopback (a dev server it asks the user to open):
    what it keeps is the ``Cookie`` header of each request it gets."""

    def __init__(self) -> None:
        cookies: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                cookies.append(self.headers.get("cookie") or "")
                self.send_response(200)
                self.send_header("content-type", "text/plain")
                self.end_headers()
                self.wfile.write(b"the agent's server")

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.cookies = cookies
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = serving(self._server)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _browser_session(
    start_url: str,
    snapshot: Callable[[str], ThreadState | None],
    shots: Path,
    name_thread: Callable[[str, str], None],
    agent_server: _AgentServer,
    loopback_url: str,
) -> dict[str, Any]:
    """The user's walk through the chat, in the browser; returns what it saw."""
    # trio-asyncio (imported by the platforms) patches asyncio's loop creation; Playwright's
    # sync API needs a plain loop, and the policy is per thread under trio-asyncio.
    asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    seen: dict[str, Any] = {}
    dialogs: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=NO_DNS)
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 900})
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

            # The start URL carries the token; the page then runs on the cookie alone.
            page.goto(start_url)
            assert "token=" not in page.url
            expect(page.locator("h1").first).to_have_text("Conversations")
            page.select_option("#agent", "echo")
            page.click("#start")
            expect(page.locator("#chat")).to_be_visible(timeout=TIMEOUT_MS)
            thread = page.locator("#chat").get_attribute("data-thread")
            assert thread is not None and thread.startswith("web:")
            seen["thread"] = thread
            _until(
                lambda: (snapshot(thread) or ThreadState.new("x")).conversation is not None,
                "the conversation",
            )

            # 1. A prompt streams in: the answer is seen growing, then whole.
            _send(page, FIRST)
            lengths: list[int] = []

            def grown() -> bool:
                texts = [t for t in _messages(page) if t.startswith("one two")]
                if len(texts) >= 2:  # the user's own message, then the answer
                    lengths.append(len(texts[-1]))
                    return texts[-1].endswith("twelve")
                return False

            _until(grown, "the whole answer")
            seen["stream_lengths"] = sorted(set(lengths))
            _wait_idle(page)

            # The agent names its session: the heading and the tab follow, live.
            name_thread(thread, "Echo <b>demo</b> title")
            expect(page.locator("#thread-title")).to_have_text(
                "Echo <b>demo</b> title", timeout=TIMEOUT_MS
            )
            expect(page).to_have_title("Echo <b>demo</b> title · Spindle")

            # 2. Queue two behind a long run, remove one.
            _send(page, LONG)
            expect(page.locator("#phase")).to_have_text("running", timeout=TIMEOUT_MS)
            _send(page, "queued first", queue=True)
            _send(page, "queued second", queue=True)
            expect(page.locator("#queue li")).to_have_count(2, timeout=TIMEOUT_MS)
            page.locator("#queue li", has_text="queued second").locator("button").click()
            expect(page.locator("#queue li")).to_have_count(1, timeout=TIMEOUT_MS)
            expect(page.locator("#queue li")).to_contain_text("queued first")
            state = snapshot(thread)
            assert state is not None and [q.text for q in state.queue] == ["queued first"]

            # 3. Reload mid-run: the same messages, status and queue are drawn again.
            # The user's own message, then the answer streaming in.
            _until(
                lambda: sum(t.startswith("w1 w2 w3") for t in _messages(page)) == 2,
                "the long answer to start",
            )
            before = _messages(page)
            page.reload()
            expect(page.locator("#phase")).to_have_text("running", timeout=TIMEOUT_MS)
            after = _messages(page)
            assert len(after) >= len(before)
            for was, now in zip(before, after, strict=False):
                # The same messages in the same order; the streaming answer may have grown.
                assert now == was or (was.startswith("w1 w2") and now.startswith(was)), (was, now)
            expect(page.locator("#queue li")).to_have_count(1)
            expect(page.locator("#queue li")).to_contain_text("queued first")
            seen["reload"] = (len(before), len(after))

            # ... and it goes on streaming after the reload.
            def long_answer() -> str:
                return [t for t in _messages(page) if t.startswith("w1 w2")][-1]

            grown_from = len(long_answer())
            _until(lambda: len(long_answer()) > grown_from, "the stream after reload")

            # 4. Abort: the run stops, the queued prompt goes next.
            page.click("#abort")
            expect(page.locator("#messages")).to_contain_text(
                "Aborted the current run", timeout=TIMEOUT_MS
            )
            _until(
                lambda: any(t.strip() == "queued first" for t in _messages(page)[-3:]),
                "the queued prompt's answer",
            )
            _wait_idle(page)
            assert not long_answer().rstrip().endswith("w150")  # cut short by the abort

            # 5. A permission prompt answered with its button.
            _send(page, "please ask tool")
            accept = page.locator("#messages button", has_text="Accept")
            expect(accept).to_be_visible(timeout=TIMEOUT_MS)
            _until(
                lambda: bool((snapshot(thread) or ThreadState.new("x")).blockers),
                "the pending permission",
            )
            accept.click()
            _until(
                lambda: any(t.strip() == "please ask tool" for t in _messages(page)[-3:]),
                "the answer after the permission",
            )
            expect(page.locator("#messages button", has_text="Accept")).to_have_count(0)
            _wait_idle(page)

            # 5b. A file sent with a prompt: saved for the agent (a small text file is
            # inlined into the prompt, which the echo agent says back).
            page.set_input_files(
                "#files",
                files=[{"name": "notes.txt", "mimeType": "text/plain", "buffer": b"alpha beta"}],
            )
            _send(page, "read my notes")
            expect(page.locator("#files")).to_have_value("", timeout=TIMEOUT_MS)
            _until(
                lambda: any("alpha beta" in t and "notes.txt" in t for t in _messages(page)),
                "the answer to the file",
            )
            seen["attached"] = [t for t in _messages(page) if "📎" in t]
            _wait_idle(page)

            # 6. An answer holding markup is shown as text; nothing runs.
            _send(page, XSS)
            _until(
                lambda: sum(t.strip().endswith("done") for t in _messages(page)) >= 2,
                "the echoed markup",
            )
            _wait_idle(page)
            seen["script_tags_in_messages"] = page.locator("#messages script").count()
            seen["img_tags_in_messages"] = page.locator("#messages img").count()
            seen["pwned"] = page.evaluate("window.__pwned === undefined ? null : window.__pwned")
            seen["literal"] = [t for t in _messages(page) if "<script>" in t]
            page.evaluate("window.scrollTo(0, 0)")  # the status panel in its place
            page.screenshot(path=str(shots / "web-chat.png"), full_page=True)

            # 7. The timeline of this thread.
            page.click("#timeline-link")
            expect(page.locator("svg.timeline")).to_be_visible(timeout=TIMEOUT_MS)
            seen["run_bars"] = page.locator("svg.timeline rect.run").evaluate_all(
                "rects => rects.map(r => r.getAttribute('class'))"
            )
            seen["waits"] = page.locator("svg.timeline rect.wait").count()
            seen["tools"] = page.locator("svg.timeline rect.tool").count()
            page.click("#play")
            page.wait_for_timeout(400)
            seen["played_width"] = float(page.locator("#played-rect").get_attribute("width") or "0")
            page.fill("#scrub", "1000")
            page.dispatch_event("#scrub", "input")
            page.screenshot(path=str(shots / "web-timeline.png"), full_page=True)

            # 8. Links to a server of the agent's on another port, under every name an agent
            # can know: the chat's cookie (scoped by host name, not port) goes to none.
            for name in ("127.0.0.1", "localhost", "spindle.localhost"):
                page.goto(f"http://{name}:{agent_server.port}/")
                expect(page.locator("body")).to_have_text("the agent's server")
            seen["agent_server_cookies"] = list(agent_server.cookies)

            # 9. The chat opened under 127.0.0.1 (as a browser that cannot resolve its own
            # name would): the cookie is the host's, but scoped to the chat's own path, so
            # the agent's server on 127.0.0.1 gets it with no link an agent can write.
            page.goto(loopback_url)
            expect(page.locator("h1").first).to_have_text("Conversations")
            seen["loopback_page"] = page.url
            page.goto(page.url + f"t/{thread}")
            expect(page.locator("#chat")).to_be_visible(timeout=TIMEOUT_MS)
            for path in ("/", f"/t/{thread}", "/s/"):
                page.goto(f"http://127.0.0.1:{agent_server.port}{path}")
                expect(page.locator("body")).to_have_text("the agent's server")
            seen["loopback_agent_cookies"] = agent_server.cookies[
                len(seen["agent_server_cookies"]) :
            ]
            seen["dialogs"] = dialogs
            seen["console_errors"] = errors
        finally:
            browser.close()
    return seen


async def test_the_web_chat_in_a_real_browser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shots = Path(os.environ.get("SPINDLE_SCREENSHOTS") or tmp_path)
    # Playwright's driver keeps the browser profile under TMPDIR: in a directory of this
    # test's own, removed at the end even when a crash left the profile behind. (Short:
    # under pytest's long tmp_path Chromium's socket path is too long to launch.)
    browser_tmp = tempfile.mkdtemp(prefix="spindle-web-")
    monkeypatch.setenv("TMPDIR", browser_tmp)
    work = tmp_path / "project"
    work.mkdir()
    web = WebSettings(
        token="browser-test-token",
        port=0,
        agents=("echo",),
        default_agent="echo",
        default_workdir=str(work),
        allowed_roots=(str(tmp_path),),
    )

    def echo(start: Any, thread_id: str) -> EchoAdapter:
        return EchoAdapter(AgentOptions(), word_delay_s=WORD_DELAY_S)

    with EventLog(tmp_path / "spindle.db") as log:
        async with trio.open_nursery() as nursery:
            app: PlatformsApp = await nursery.start(
                partial(
                    run_platforms,
                    web=web,
                    log=log,
                    adapter_factory=echo,
                    policy=Policy(allowed_roots=(str(tmp_path),)),
                )
            )
            assert app.web is not None
            token = trio.lowlevel.current_trio_token()

            def name_thread(thread: str, title: str) -> None:
                # What an adapter's TitleChanged becomes (the echo agent names nothing).
                event = A.AgentEventReceived(
                    thread_id=thread,
                    action_id="title-1",
                    at=time.time(),
                    run_id=None,
                    event=TitleChanged(title=title),
                )
                trio.from_thread.run(app.runtime.post, event, trio_token=token)

            # Under the chat's own name, as `spindle run` prints it.
            assert app.web.named_start_url is not None
            agent_server = _AgentServer()
            try:
                seen = await trio.to_thread.run_sync(
                    _browser_session,
                    app.web.named_start_url,
                    app.runtime.snapshot,
                    shots,
                    name_thread,
                    agent_server,
                    app.web.start_url,
                )
            finally:
                agent_server.close()
                app.stop()
                shutil.rmtree(browser_tmp, ignore_errors=True)
    assert len(seen["stream_lengths"]) >= 3, seen["stream_lengths"]  # it grew, not popped in
    assert seen["reload"][1] >= seen["reload"][0]
    assert seen["script_tags_in_messages"] == 0 and seen["img_tags_in_messages"] == 0
    assert seen["pwned"] is None and seen["dialogs"] == []
    assert any("<script>window.__pwned=1</script>" in t for t in seen["literal"])
    assert seen["attached"] == ["read my notes\n📎 notes.txt"], seen["attached"]
    outcomes = [c.split()[1] for c in seen["run_bars"]]
    assert outcomes.count("completed") >= 4 and outcomes.count("aborted") == 1, outcomes
    assert seen["waits"] == 1 and seen["tools"] == 1
    assert seen["played_width"] < 1000  # playback started from the beginning
    assert seen["console_errors"] == []  # no CSP violation, no script error
    # The agent's server was reached three times, never with the chat's cookie.
    assert len(seen["agent_server_cookies"]) >= 3, seen["agent_server_cookies"]
    assert not any("spindle_web_" in c for c in seen["agent_server_cookies"])
    # Under 127.0.0.1 too: the chat worked there, and the agent's server got no cookie.
    assert seen["loopback_page"].startswith(f"{app.web.url}/s/"), seen["loopback_page"]
    assert len(seen["loopback_agent_cookies"]) >= 3, seen["loopback_agent_cookies"]
    assert not any("spindle_web_" in c for c in seen["loopback_agent_cookies"])
    for name in ("web-chat.png", "web-timeline.png"):
        assert (shots / name).stat().st_size > 10_000
