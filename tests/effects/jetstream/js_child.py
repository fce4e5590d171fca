"""A runner process for the JetStream failure tests: a Spindle runtime on the JetStream log
(the fake agent, a recording chat), driven over stdin. Not a test by itself.

    js_child.py URLS HOLDER POSTED_FILE LEASE_TTL

URLS is a comma-separated server list. The child claims THREADS (waiting out another
holder's lease), prints ``ready``, then reads lines: ``start <id> <thread>``, ``msg <id>
<thread>``, ``quit``. Each is answered ``ack <id>`` once durable, or ``refused <id>`` when
the log would not store it. Every output key the renderer posts is appended to POSTED_FILE
(one unbuffered write each, so it survives SIGKILL and shows what a paused child posts).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import trio

from threadspindle.effects.jetstream.connection import open_jetstream
from threadspindle.effects.jetstream.fencing import FencedRenderer
from threadspindle.effects.jetstream.log import open_jetstream_log
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.agent_events import TextDelta
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.live.registry import open_runtime
from threadspindle.testkit.fake_agent import FakeAgentWorld, Step
from threadspindle.testkit.fake_chat import RenderWorld

THREADS = ("t1", "t2")


def script(text: str) -> list[Step]:
    """Long enough runs (about 1 s) that a pause lands mid-run."""
    steps: list[Step] = []
    for i in range(20):
        steps += [Step("event", TextDelta(text=f"{text} part{i} ")), Step("sleep", seconds=0.05)]
    return steps


async def main(urls: str, holder: str, posted_path: str, ttl: str) -> None:
    fd = os.open(posted_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    agents = FakeAgentWorld(script=script)
    chat = RenderWorld()
    chat.on_post = lambda thread, key: os.write(fd, f"{holder}\t{key}\n".encode())
    workdir = str(Path(posted_path).parent)
    servers = urls.split(",")
    stdin = trio.lowlevel.FdStream(os.dup(0))
    async with open_jetstream(servers, replicas=len(servers), lease_ttl_s=float(ttl)) as conn:
        async with open_jetstream_log(conn, holder, publish_timeout_s=2.0) as log:
            for thread_id in THREADS:
                await log.claim(thread_id)
            async with open_runtime(
                log=log,
                renderer_factory=lambda tid: FencedRenderer(chat.renderer(tid), log, tid),
                adapter_factory=agents.factory,
                policy=Policy(allowed_roots=(workdir,)),
            ) as rt:
                print("ready", flush=True)
                buf = b""
                while True:
                    chunk = await stdin.receive_some(4096)
                    if not chunk:
                        return
                    buf += chunk
                    while b"\n" in buf:
                        raw, buf = buf.split(b"\n", 1)
                        verb, ident, thread_id = (raw.decode().split() + ["", "", THREADS[0]])[:3]
                        if verb == "quit":
                            return
                        base = {
                            "thread_id": thread_id,
                            "action_id": ident,
                            "at": trio.current_time(),
                        }
                        action: A.Action
                        if verb == "start":
                            action = A.ConversationStarted(
                                **base,
                                agent="fake",
                                requested_workdir=workdir,
                                resolved_workdir=workdir,
                            )
                        else:
                            action = A.UserMessage(**base, author_id="u", text=f"prompt {ident}")
                        receipt = await rt.post(action)
                        # A refusal (JetStream cannot store) is committed with no ticket.
                        ok = await receipt.durable()
                        ok = ok and not (receipt.note or "").startswith("refused")
                        print(f"{'ack' if ok else 'refused'} {ident}", flush=True)


if __name__ == "__main__":
    trio.run(main, *sys.argv[1:5])
