"""``spindle run --web`` as a process: the URL with the token printed once, a conversation
started and answered over HTTP, the token in no log, a restart that keeps the thread (a
new token, the old one refused), the thread's timeline from the log, and ``[web]
enabled`` doing what ``--web`` does."""

from __future__ import annotations

import queue
import re
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.app.cli_harness import SPINDLE, environment, make_place
from threadspindle.ingress.web.security import own_name, own_path

# Not on a terminal (here a pipe): the address is in a file of the data dir, not printed
# where a log would keep it. It is under the start's own name (its cookie kept from every
# other server on loopback); the server answers to the address as well.
SAID = re.compile(r"Web chat: its address, with this start's token, is in (\S+) \(")
URL = re.compile(r"http://(spindle-[0-9a-f]{12}\.localhost):(\d+)/\?token=([\w-]+)\n")


@contextmanager
def _running(place: dict[str, Path], *args: str, env: dict[str, str]) -> Iterator[tuple[str, str]]:
    proc = subprocess.Popen(
        [*SPINDLE, "run", "--no-mcp", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=place["work"],
        env=environment(place, env),
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True)  # type: ignore[union-attr]
    reader.start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 60
        found = None
        while found is None:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(f"no URL printed: {seen}") from None
            seen.append(line)
            found = SAID.search(line)
        address = Path(found.group(1))
        assert address == place["data"] / "web-chat-address"
        assert stat.S_IMODE(address.stat().st_mode) == 0o600
        written = URL.fullmatch(address.read_text())
        assert written is not None, address.read_text()
        name, port, token = written.groups()
        assert name == own_name(token)
        yield f"http://127.0.0.1:{port}", token
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=30) == 0, seen
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    reader.join(timeout=5)
    while not lines.empty():
        seen.append(lines.get())
    printed = "".join(seen)
    assert "token=" not in printed and ".localhost" not in printed


def _wait_page(client: httpx.Client, path: str, *needles: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        page = client.get(path).text
        if all(n in page for n in needles):
            return page
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never showed {needles}: {page[-2000:]}")
        time.sleep(0.2)


def test_spindle_run_web(tmp_path: Path) -> None:
    place = make_place(tmp_path)
    env = {
        "SPINDLE_WEB__PORT": "0",
        "SPINDLE_RUNTIME__ALLOWED_ROOTS": f'["{place["work"]}"]',
        "SPINDLE_RUNTIME__DEFAULT_AGENT": "echo",
    }
    with _running(place, "--web", env=env) as (url, token):
        with httpx.Client(base_url=url) as client:
            assert client.get("/").status_code == 401
            entered = client.get("/?token=" + token)
            # The pages are under a path of this start's own (its cookie goes only there).
            assert entered.status_code == 303
            base = entered.headers["location"].removesuffix("/")
            assert base == own_path(token)
            home = client.get(f"{base}/")
            assert home.status_code == 200 and 'value="echo" selected' in home.text
            started = client.post(
                f"{base}/threads",
                data={"agent": "echo", "workdir": str(place["work"])},
                headers={"origin": url},
            )
            assert started.status_code == 303
            thread_path = started.headers["location"]
            said = client.post(
                f"{thread_path}/say", json={"text": "hello over http"}, headers={"origin": url}
            )
            assert said.status_code == 204
            page = _wait_page(client, thread_path, "$0.0000", 'id="phase">idle')
            assert page.count("hello over http") >= 2  # the prompt, then the echo
        # The printed name is this server's (browsers resolve *.localhost to loopback).
        named = {"Host": url.removeprefix("http://").replace("127.0.0.1", own_name(token))}
        with httpx.Client(base_url=url, headers=named) as client:
            assert client.get("/?token=" + token).status_code == 303
            assert client.get(f"{own_path(token)}/").status_code == 200
        first_token = token
        thread_id = thread_path.rpartition("/t/")[2]
    logged = (place["data"] / "spindle.log.jsonl").read_text()
    assert first_token not in logged and "web chat on http://127.0.0.1:" in logged

    # Again, switched on by the config alone: the thread is still there, the token is new.
    with _running(place, env={**env, "SPINDLE_WEB__ENABLED": "true"}) as (url, token):
        assert token != first_token
        with httpx.Client(base_url=url) as client:
            assert client.get("/?token=" + first_token).status_code == 401
            client.get("/?token=" + token)
            assert client.get(f"{own_path(first_token)}/").status_code == 401
            home = client.get(f"{own_path(token)}/").text
            assert thread_id in home
            timeline = client.get(f"{own_path(token)}/t/{thread_id}/timeline")
            assert timeline.status_code == 200
            assert timeline.text.count('class="run completed"') == 1


def test_doctor_checks_the_web_chat_port(tmp_path: Path) -> None:
    import socket

    from tests.app.cli_harness import spindle

    place = make_place(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {"SPINDLE_WEB__ENABLED": "true", "SPINDLE_WEB__PORT": str(port)}
        busy = spindle(place, "doctor", env=env)
    assert f"127.0.0.1:{port} cannot be listened on" in busy.stdout
    free = spindle(place, "doctor", env={**env, "SPINDLE_WEB__PORT": "0"})
    assert "http://127.0.0.1:0 (spindle run serves it)" in free.stdout
    off = spindle(place, "doctor")
    assert "web chat" not in off.stdout
