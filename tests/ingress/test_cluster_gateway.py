"""Discord over gateway nodes (``ingress/cluster_gateway.py``), as real processes: a NATS
JetStream server, the fake Discord with two guilds on the two shards of 2, two runners (one
workdir root each) and two ``spindle gateway`` processes holding one shard each; the first
also holds the Telegram bot (the fake Telegram), the second the Slack app (the fake Slack),
each picked with ``--platforms``.

- A message in the Telegram project group opens a topic, and one in the Slack project
  channel a thread, each answered through the gateway holding that platform.

- A prompt in each guild is answered, and every REST call made in a guild's thread comes
  from the gateway holding that guild's shard (by the client's TCP port).
- The shard-1 gateway is SIGKILLed while its thread streams a long answer, a prompt is sent
  in its thread while it is down (Discord never delivers it: a fresh session), and the
  other shard goes on answering meanwhile. Restarted, it finishes the streamed answer in the
  message it had posted, catches up on the prompt sent while it was away and answers it:
  nothing lost, and no message posted twice (every output of the thread is one message).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psutil
import pytest

from threadspindle.testkit.fake_discord import FakeDiscord
from threadspindle.testkit.fake_slack.server import APP_TOKEN, BOT_TOKEN, FakeSlack
from threadspindle.testkit.fake_telegram.server import FakeTelegram
from threadspindle.testkit.nats_cluster import nats_cluster

ROOT = Path(__file__).resolve().parents[2]
SPINDLE = [sys.executable, "-m", "threadspindle.app.cli"]
FOOTER = "echo (demo agent)"
TELEGRAM_TOKEN = "123456789:" + "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"  # shaped as @BotFather's
T = TypeVar("T")

pytestmark = pytest.mark.timeout(180)


def wait_for(read: Callable[[], T], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = read()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Proc:
    """A spindle process whose output lines are read in the background."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [*SPINDLE, *args],
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self.lines: list[str] = []
        # (local port, remote port) -> [first, last] times it was seen held, one pair per
        # stretch: the kernel hands a port closed by one process to the next that asks.
        self._held: dict[tuple[int, int], list[list[float]]] = {}
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._sample_ports, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, pattern: str, timeout: float = 60) -> None:
        wait_for(
            lambda: (
                any(re.search(pattern, line) for line in self.lines) or self.proc.poll() is not None
            ),
            timeout,
            pattern,
        )
        assert self.proc.poll() is None, "\n".join(self.lines[-40:])

    def held(self, port: int, remote: int, at: float, slack: float = 0.3) -> bool:
        """Whether this process held local ``port`` connected to ``remote`` around ``at``
        (``time.time()``). Sampled in the background (an idle keep-alive connection may be
        closed before it is asked), so with ``slack`` either side of a sample."""
        stretches = self._held.get((port, remote), ())
        return any(first - slack <= at <= last + slack for first, last in stretches)

    def _sample_ports(self) -> None:
        while self.proc.poll() is None:
            try:
                found = psutil.Process(self.proc.pid).net_connections(kind="tcp")
            except psutil.Error:
                return
            now = time.time()
            for c in found:
                if not c.raddr:
                    continue  # a listening socket
                stretches = self._held.setdefault((c.laddr.port, c.raddr.port), [])
                if stretches and now - stretches[-1][1] < 0.5:
                    stretches[-1][1] = now
                else:
                    stretches.append([now, now])
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def guilds_on_both_shards(fake: FakeDiscord) -> tuple[int, int]:
    """Two guilds, the first on shard 0 of 2 and the second on shard 1 (snowflakes carry
    their millisecond: guilds made a millisecond apart land on different shards)."""
    found: dict[int, int] = {}
    while len(found) < 2:
        guild = fake.add_guild(f"g{len(found)}")
        found.setdefault((guild >> 22) % 2, guild)
        time.sleep(0.002)
    return found[0], found[1]


def test_two_gateways_hold_one_shard_each_and_a_killed_one_loses_nothing(tmp_path: Path) -> None:
    roots = {name: tmp_path / name for name in ("root-a", "root-b")}
    for root in roots.values():
        root.mkdir()
    elsewhere = tmp_path / "elsewhere"  # allowed, but no runner serves it
    elsewhere.mkdir()
    with (
        nats_cluster(tmp_path / "nats", size=1) as cluster,
        FakeDiscord() as fake,
        FakeTelegram(token=TELEGRAM_TOKEN) as telegram,
        FakeSlack() as slack,
    ):
        sl_alice, sl_project = slack.add_user("alice"), slack.add_channel("proj")
        tg_alice = telegram.add_user("alice")
        tg_project = telegram.add_group("project")
        g0, g1 = guilds_on_both_shards(fake)
        project = {0: fake.add_channel(g0, "project"), 1: fake.add_channel(g1, "project")}
        unserved = fake.add_channel(g0, "unserved")
        alice = fake.add_user("alice")
        config = tmp_path / "spindle.toml"
        config.write_text(
            f"""
[runtime]
allowed_roots = ["{roots["root-a"]}", "{roots["root-b"]}", "{elsewhere}"]
default_agent = "echo"

[mcp]
enabled = false

[discord]
guild_ids = [{g0}, {g1}]
allowed_user_ids = [{alice}]
rest_base_url = "{fake.rest_base}"
gateway_url = "{fake.gateway_url}"

[discord.project_channels."{project[0]}"]
agent = "echo"
workdir = "{roots["root-a"]}"

[discord.project_channels."{project[1]}"]
agent = "echo"
workdir = "{roots["root-b"]}"

[discord.project_channels."{unserved}"]
agent = "echo"
workdir = "{elsewhere}"

[telegram]
base_url = "{telegram.base_url}"
allowed_user_ids = [{tg_alice}]
min_edit_interval_s = 0.3

[telegram.project_groups."{tg_project}"]
agent = "echo"
workdir = "{roots["root-a"]}"

[slack]
base_url = "{slack.base_url}"
allowed_user_ids = ["{sl_alice}"]
min_edit_interval_s = 0.3

[slack.project_channels."{sl_project}"]
agent = "echo"
workdir = "{roots["root-b"]}"
"""
        )
        urls = ",".join(cluster.urls)

        def env(name: str) -> dict[str, str]:
            return {
                "PATH": "/usr/bin:/bin",
                "HOME": str(tmp_path),
                "PYTHONPATH": str(ROOT),
                "SPINDLE_DATA_DIR": str(tmp_path / "data" / name),
                "SPINDLE_DISCORD_TOKEN": "fake-bot-token-for-tests.fake.token",
                "SPINDLE_TELEGRAM_TOKEN": TELEGRAM_TOKEN,
                "SPINDLE_SLACK_BOT_TOKEN": BOT_TOKEN,
                "SPINDLE_SLACK_APP_TOKEN": APP_TOKEN,
            }

        def runner(name: str, root: Path) -> Proc:
            args = ["--config", str(config), "runner", "--nats", urls, "--root", str(root)]
            return Proc([*args, "--name", name, "--lease-ttl", "2"], env(name), tmp_path)

        def gateway(shard: int) -> Proc:
            args = ["--config", str(config), "gateway", "--nats", urls, "--lease-ttl", "2"]
            args += ["--root", str(roots["root-a"]), "--root", str(roots["root-b"])]
            args += ["--shards", str(shard), "--shard-count", "2", "--ack-wait", "2"]
            args += ["--platforms", "discord,telegram" if shard == 0 else "discord,slack"]
            return Proc(args, env(f"gateway-{shard}"), tmp_path)

        procs = [runner("runner-a", roots["root-a"]), runner("runner-b", roots["root-b"])]
        passed = False
        try:
            for proc in procs:
                proc.wait_line(r"serving ")
            gateways = {0: gateway(0), 1: gateway(1)}
            procs += gateways.values()
            gateways[0].wait_line(r"gateway: serving discord-0, telegram$")
            gateways[1].wait_line(r"gateway: serving discord-1, slack$")
            assert fake.gateway_counts()["identifies"] == 2  # one session per shard

            def thread_of(shard: int) -> int:
                return wait_for(lambda: fake.threads(project[shard]), 30, "a thread")[0]

            def footers(thread: int) -> int:
                return fake.transcript(thread).count(FOOTER)

            # Telegram, held by the first gateway only.
            telegram.send_message(tg_project, tg_alice, "hello from telegram")
            slack_thread = slack.send_message(sl_project, sl_alice, "hello from slack")
            fake.send_message(project[0], alice, "hello shard zero")
            fake.send_message(project[1], alice, "hello shard one")
            threads = {shard: thread_of(shard) for shard in (0, 1)}
            for shard, thread in threads.items():
                wait_for(lambda t=thread: footers(t) == 1, 60, f"the answer on shard {shard}")
                assert f"spindle: hello shard {('zero', 'one')[shard]}" in fake.transcript(thread)
            topic = wait_for(lambda: list(telegram.topics(tg_project)), 30, "a topic")[0]
            wait_for(
                lambda: (
                    FOOTER in "\n".join(m.text for m in telegram.bot_messages(tg_project, topic))
                ),
                60,
                "the Telegram answer",
            )
            wait_for(
                lambda: (
                    FOOTER
                    in "\n".join(m.shown for m in slack.bot_messages(sl_project, slack_thread))
                ),
                60,
                "the Slack answer",
            )
            # A conversation in a folder no runner serves is refused in its thread, not
            # dropped in silence.
            fake.send_message(unserved, alice, "hello nowhere")
            (lost,) = wait_for(lambda: fake.threads(unserved), 30, "the unserved thread")
            wait_for(
                lambda: "Not started" in fake.transcript(lost), 30, "the refusal in the thread"
            )
            assert f"{str(elsewhere)!r} is under none of the folders" in fake.transcript(lost)
            # Each thread's posts and edits came from the gateway holding its guild's shard:
            # the process that held the call's port to the fake when it was made.
            for shard, thread in threads.items():
                path = f"/channels/{thread}/messages"
                calls = [c for c in fake.rest_calls() if c.path.startswith(path)]
                assert calls
                for c in calls:
                    holders = [gateways[k].held(c.peer_port, fake.port, c.at) for k in (0, 1)]
                    assert holders[shard] and not holders[1 - shard], (shard, c)

            # Shard 1's gateway dies while its thread streams a long answer.
            words = " ".join(f"w{i}" for i in range(40))
            fake.send_message(threads[1], alice, words)
            wait_for(lambda: "spindle: w0 w1 w2" in fake.transcript(threads[1]), 30, "streaming")
            gateways[1].proc.kill()
            gateways[1].proc.wait(10)
            fake.send_message(threads[1], alice, "sent while away queue")
            # The other shard is served meanwhile.
            fake.send_message(threads[0], alice, "still here")
            wait_for(lambda: footers(threads[0]) == 2, 60, "shard 0 while shard 1 is down")
            restarted = time.monotonic()
            gateways[1] = gateway(1)
            procs.append(gateways[1])
            gateways[1].wait_line(r"gateway: serving discord-1, slack$")
            serving = time.monotonic() - restarted
            wait_for(lambda: footers(threads[1]) == 3, 90, "both prompts answered after restart")
            answered = time.monotonic() - restarted
            print(
                f"restarted gateway: serving after {serving:.1f} s, answered the prompt "
                f"posted while it was down after {answered:.1f} s"
            )
            time.sleep(3)  # past the ack wait: anything redelivered would show now
            messages = [m for m in fake.messages(threads[1]) if m.author_id == fake.bot_user_id]
            contents = [m.content for m in messages]
            transcript = fake.transcript(threads[1])
            assert footers(threads[1]) == 3, transcript
            # The long answer is whole, in the one message it started in.
            streamed = [c for c in contents if "w0 w1" in c]
            assert len(streamed) == 1, transcript
            assert streamed[0].strip() == words, transcript
            # Nothing posted twice, nothing missing: exactly these messages (in an order
            # that depends on when the restart caught up; run times vary in footers).
            shown = Counter(FOOTER if c.endswith(FOOTER) else c.strip() for c in contents)
            base = [
                f"Started echo in {roots['root-b']}.",
                "hello shard one",
                words,
                "1 message sent while Spindle was offline is queued.",
                "sent while away",
                *[FOOTER] * 3,
            ]
            # The caught-up prompt waits behind the long run, or goes at once when that run
            # ended before the restarted gateway caught up.
            waited = Counter([*base, "Queued (position 1).", "» alice: sent while away"])
            assert shown in (waited, Counter([*base, "Sending now."])), transcript
            passed = True
        finally:
            for proc in reversed(procs):
                proc.stop()
            for proc in procs:
                # Every process's last lines when the test failed (the restart phase has
                # failed once under load: what each node did is what tells why).
                if not passed or proc.proc.returncode not in (0, -signal.SIGKILL, -signal.SIGTERM):
                    print(f"--- {proc.proc.args}\n" + "\n".join(proc.lines[-30:]))
    assert os.path.isdir(tmp_path)
