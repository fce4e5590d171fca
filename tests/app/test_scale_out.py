"""``spindle cluster dev``: a 3-node JetStream cluster, two runners of one root and the
console gateway, run as the real command. A conversation started and prompted through the
gateway is answered by the echo agent on the serving runner (whichever took the root);
after that runner is killed (SIGKILL), the standby takes the root and the thread over and
answers the next prompt. The runners host the MCP process manager as ``spindle run`` does: a
``command`` agent started on the runner reaches its tools with its thread's token, and the
process it starts runs in the thread's workdir under the runner's root."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cli_harness import SPINDLE, environment, make_place


class Lines:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.seen: list[str] = []
        self.used: set[int] = set()
        self.queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.queue.put(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 60) -> str:
        """The first line matching ``pattern`` not matched before (lines of several
        processes interleave: one already read counts)."""
        for i, line in enumerate(self.seen):
            if i not in self.used and re.search(pattern, line):
                self.used.add(i)
                return line
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.queue.get(timeout=0.1)
            except queue.Empty:
                continue
            self.seen.append(line)
            if re.search(pattern, line):
                self.used.add(len(self.seen) - 1)
                return line
        raise AssertionError(f"no line matching {pattern!r} in:\n" + "\n".join(self.seen))

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()


# The ``command`` agent of the MCP check: lists the process manager's tools and starts a
# process through it, with what the runner gave it (SPINDLE_MCP_SERVERS).
MCP_AGENT = """
import json, os, sys
import anyio, httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.stdin.read()
servers = json.loads(os.environ.get("SPINDLE_MCP_SERVERS") or "[]")
[server] = [s for s in servers if s["name"] == "process-manager"]

async def main():
    headers = {"Authorization": "Bearer " + server["bearer_token"]}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http:
        async with Client(streamable_http_client(server["url"], http_client=http)) as client:
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            started = await client.call_tool(
                "start_process", {"name": "p", "command": sys.executable, "args": ["-c", "pass"]}
            )
    print("mcp-tools " + " ".join(tools), flush=True)
    print("mcp-cwd " + started.structured_content["cwd"], flush=True)

anyio.run(main)
"""


@pytest.mark.timeout(240)
def test_cluster_dev_serves_a_thread_and_the_standby_takes_it_over(tmp_path: Path) -> None:
    place = make_place(tmp_path)
    agent = tmp_path / "mcp_agent.py"
    agent.write_text(MCP_AGENT)
    place["config"].write_text(
        f'[agents.command]\ncommand = ["{sys.executable}", "{agent}"]\n'
        f'[runtime]\nallowed_roots = ["{place["work"]}"]\n'
    )
    proc = subprocess.Popen(
        [*SPINDLE, "cluster", "dev", "--root", str(place["work"]), "--dir", str(tmp_path / "c")]
        + ["--lease-ttl", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        cwd=place["work"],
        env=environment(place),
        start_new_session=True,  # its servers and runners too: one group to kill
    )
    out = Lines(proc)
    try:
        pids = {
            line.split(":")[0]: int(line.split()[-1])
            for line in (out.wait_for(r"^runner-a: pid \d+"), out.wait_for(r"^runner-b: pid \d+"))
        }
        serving = out.wait_for(r"^runner-[ab]: serving ").split(":")[0]
        standby = "runner-b" if serving == "runner-a" else "runner-a"
        out.wait_for(r"^gateway: ")
        # The servers let in only the cluster's nodes: the password is in a file only its
        # owner reads, and given to the nodes through the environment, not the command line.
        urls = out.wait_for(r"^NATS JetStream cluster").rsplit(": ", 1)[1].split(",")
        assert all("@" not in url for url in urls), urls
        secret = tmp_path / "c" / "nats" / "password"
        assert secret.stat().st_mode & 0o777 == 0o600
        assert _refused(urls[0], None) and _refused(urls[0], "wrong")
        assert not _refused(urls[0], secret.read_text().strip())
        out.send("/start t1")
        out.wait_for(r"^\[t1\] reply: Started echo")
        out.send("t1: first words")
        out.wait_for(r"^\[t1\] .*first")
        # Bad console input is said and skipped: a line past the limit (a JetStream message
        # holds 1 MiB), a thread never started; bytes that are not UTF-8 are replaced.
        out.send("t1: " + "x" * 2_000_000)
        out.wait_for(r"^\? a line may hold at most 400,000 bytes: not sent")
        out.send("nowhere: hello")
        out.wait_for(r"^\? not sent: thread nowhere has no root")
        assert proc.stdin is not None
        proc.stdin.buffer.write(b"t1: caf\xe9 ok\n")  # (Latin-1, not UTF-8)
        proc.stdin.flush()
        # (The echo agent streams word by word: "ok" may come in an edit of its own, as
        # "first words" did above.)
        out.wait_for(r"^\[t1\] .*caf\ufffd( ok)?$")
        os.kill(pids[serving], signal.SIGKILL)
        out.wait_for(rf"^{standby}: serving ")
        out.send("t1: second words")
        out.wait_for(r"^\[t1\] .*second")
        # An agent on the runner reaches the runner's MCP process manager.
        out.wait_for(rf"^{standby}: MCP process manager on http://127\.0\.0\.1:\d+")
        out.send(f"/start t2 {place['work']} command")
        out.wait_for(r"^\[t2\] reply: Started command")
        out.send("t2: use your tools")
        # (deltas may come joined in one effect: a line may lack the "[t2]" prefix)
        tools = out.wait_for(r"mcp-tools ")
        assert "start_process" in tools and "list_processes" in tools, tools
        out.wait_for(rf"mcp-cwd {re.escape(str(place['work'].resolve()))}$")
        assert proc.stdin is not None
        proc.stdin.close()
        code = proc.wait(60)
        time.sleep(0.2)
        while not out.queue.empty():
            out.seen.append(out.queue.get())
        assert code == 0, "\n".join(out.seen)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of the group is left
        except ProcessLookupError:
            pass
        proc.wait(10)


def _refused(url: str, password: str | None) -> bool:
    """Whether the NATS server at ``url`` refuses a client with this password (or none)."""
    import trio

    from threadspindle.effects.jetstream.connection import SignInRefused, open_jetstream

    async def sign_in() -> bool:
        try:
            with trio.fail_after(20):
                async with open_jetstream([url], replicas=3, password=password):
                    return False
        except SignInRefused:
            return True

    return trio.run(sign_in)


@pytest.mark.timeout(180)
def test_cluster_dev_holds_discord_when_a_token_is_configured(tmp_path: Path) -> None:
    """With a Discord token configured, ``spindle cluster dev`` also starts a chat gateway:
    a message in a project channel of the fake Discord is answered by a runner, and the
    console gateway leaves the Discord thread's effects to the chat gateway (it reads only
    the console's home: two gateways applying one effect once crashed on the duplicate
    report)."""
    from threadspindle.testkit.fake_discord import FakeDiscord

    place = make_place(tmp_path)
    with FakeDiscord() as fake:
        guild = fake.add_guild("g")
        project = fake.add_channel(guild, "project")
        alice = fake.add_user("alice")
        place["config"].write_text(
            f'[runtime]\nallowed_roots = ["{place["work"]}"]\ndefault_agent = "echo"\n'
            f"[discord]\nguild_ids = [{guild}]\nallowed_user_ids = [{alice}]\n"
            f'rest_base_url = "{fake.rest_base}"\ngateway_url = "{fake.gateway_url}"\n'
            f'[discord.project_channels."{project}"]\nagent = "echo"\n'
            f'workdir = "{place["work"]}"\n'
        )
        env = environment(place, {"SPINDLE_DISCORD_TOKEN": "fake-bot-token-for-tests.fake.token"})
        proc = subprocess.Popen(
            [*SPINDLE, "cluster", "dev", "--root", str(place["work"])]
            + ["--dir", str(tmp_path / "c"), "--lease-ttl", "1"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            cwd=place["work"],
            env=env,
            start_new_session=True,
        )
        out = Lines(proc)
        try:
            out.wait_for(r"^chat gateway \(discord\): pid \d+")
            out.wait_for(r"^gateway: serving discord-0$")
            fake.send_message(project, alice, "hello cluster")
            deadline = time.monotonic() + 60
            transcript = ""
            while time.monotonic() < deadline and "echo (demo agent)" not in transcript:
                threads = fake.threads(project)
                transcript = fake.transcript(threads[0]) if threads else ""
                time.sleep(0.1)
            if "spindle: hello cluster" not in transcript:
                # Once seen in a full run ("hello", then the footer), never alone nor in
                # 40 runs under load: say what the thread showed a moment later and what
                # the processes logged, to tell a late final edit from a lost one.
                time.sleep(3)
                later = fake.transcript(threads[0]) if threads else ""
                while not out.queue.empty():
                    out.seen.append(out.queue.get())
                logged = "\n".join(out.seen)
                raise AssertionError(f"{transcript}\n-- 3 s later:\n{later}\n-- logged:\n{logged}")
            assert transcript.count("echo (demo agent)") == 1, transcript
            assert proc.stdin is not None
            proc.stdin.close()
            code = proc.wait(60)
            while not out.queue.empty():
                out.seen.append(out.queue.get())
            assert code == 0, "\n".join(out.seen)
            # The console printed none of the Discord thread's effects.
            assert not any(line.startswith(f"[{threads[0]}]") for line in out.seen)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(10)


def test_log_export_reads_a_thread_from_jetstream(tmp_path: Path) -> None:
    """``spindle log export THREAD --nats URL`` writes the same JSONL as from SQLite, read
    from the start of the thread's subject; ``spindle replay``'s reader reads it back."""
    import trio

    from threadspindle.effects.jetstream.connection import open_jetstream
    from threadspindle.effects.jetstream.log import open_jetstream_log
    from threadspindle.runtime.core.actions import StatusRequested
    from threadspindle.runtime.live.replay import read_jsonl
    from threadspindle.testkit.nats_cluster import nats_cluster

    async def write(urls: list[str]) -> None:
        async with open_jetstream(urls) as conn, open_jetstream_log(conn, "w") as log:
            await log.claim("t9")
            async with trio.open_nursery() as nursery:
                await nursery.start(log.run_flusher)
                for n in range(1, 6):
                    ticket = log.append(
                        StatusRequested(thread_id="t9", action_id=f"s{n}", at=float(n))
                    )
                await log.wait_durable(ticket)
                nursery.cancel_scope.cancel()

    place = make_place(tmp_path)
    out = tmp_path / "t9.jsonl"
    with nats_cluster(tmp_path / "nats") as cluster:
        trio.run(write, cluster.urls)
        done = subprocess.run(
            [*SPINDLE, "log", "export", "t9", "--nats", cluster.urls[0], "-o", str(out)],
            capture_output=True,
            text=True,
            cwd=place["work"],
            env=environment(place),
            timeout=60,
        )
        missing = subprocess.run(
            [*SPINDLE, "log", "export", "nope", "--nats", cluster.urls[0]],
            capture_output=True,
            text=True,
            cwd=place["work"],
            env=environment(place),
            timeout=60,
        )
        # Signed in through the settings (the environment), not the URL; without the
        # password the servers refuse, and the command says so instead of waiting.
        plain = cluster.plain_urls[0]
        signed_in = subprocess.run(
            [*SPINDLE, "log", "export", "t9", "--nats", plain],
            capture_output=True,
            text=True,
            cwd=place["work"],
            env=environment(place, {"SPINDLE_CLUSTER__PASSWORD": str(cluster.password)}),
            timeout=60,
        )
        refused = subprocess.run(
            [*SPINDLE, "log", "export", "t9", "--nats", plain],
            capture_output=True,
            text=True,
            cwd=place["work"],
            env=environment(place),
            timeout=60,
        )
    assert signed_in.returncode == 0, signed_in.stderr
    assert signed_in.stdout == out.read_text()
    assert refused.returncode == 2 and refused.stdout == ""
    assert "no NATS password" in refused.stderr  # the warning
    # A password on the command line works, and is warned about: any local process reads it.
    assert "password in a --nats URL" in done.stderr
    assert "password in a --nats URL" not in signed_in.stderr + refused.stderr
    assert "refused user 'spindle' (without a password)" in refused.stderr, refused.stderr
    assert done.returncode == 0, done.stderr
    actions = [a for _, a in read_jsonl(out.read_text().splitlines())]
    assert [a.action_id for a in actions] == ["s1", "s2", "s3", "s4", "s5"]
    assert missing.returncode == 1 and "No thread 'nope'" in missing.stderr
