"""The process the SIGKILL test kills: a Spindle runtime on a real log with the scripted
fake agent, driven over stdin. Not a test by itself.

    crash_child.py DB POSTED_FILE DELIVERED_FILE

stdin lines: ``start <id> <thread>`` (start the thread's conversation), ``msg <id>
<thread>`` / ``queue <id> <thread>`` (a plain or /queue prompt whose text names the id),
``drain`` (print ``idle`` once every prompt of every thread is done), ``quit``. Each prompt
is acknowledged with ``ack <id>`` on stdout once its action is durable. Every chat output
key the renderer posts is appended to POSTED_FILE and every prompt the agent receives to
DELIVERED_FILE, each with one unbuffered write, so what the outside world saw survives the
kill.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from threadspindle.runtime.core import actions as A  # noqa: E402
from threadspindle.runtime.core.agent_events import TextDelta  # noqa: E402
from threadspindle.runtime.core.model import Policy  # noqa: E402
from threadspindle.runtime.live.log import EventLog  # noqa: E402
from threadspindle.runtime.live.registry import open_runtime  # noqa: E402
from threadspindle.testkit.fake_agent import FakeAgentWorld, Step  # noqa: E402
from threadspindle.testkit.fake_chat import RenderWorld  # noqa: E402

THREADS = ("t1", "t2")


def script(text: str) -> list[Step]:
    """A few chunks with short pauses: kills land mid-run as often as between runs."""
    steps: list[Step] = []
    for i in range(4):
        steps += [Step("event", TextDelta(text=f"{text} part{i} ")), Step("sleep", seconds=0.015)]
    return steps


def _settled(rt, thread_id: str) -> bool:
    state, actor = rt.snapshot(thread_id), rt.get(thread_id)
    idle = state is None or (state.run is None and not state.queue)
    return idle and (actor is None or actor.is_quiet())


def appender(path: str):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def append(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    return append


async def main(db: str, posted_path: str, delivered_path: str) -> None:
    post_line, deliver_line = appender(posted_path), appender(delivered_path)
    agents = FakeAgentWorld(script=script)
    agents.on_prompt = lambda p: deliver_line(f"{p.run_id}\t{p.text}")
    chat = RenderWorld()
    chat.on_post = lambda thread, key: post_line(key)
    workdir = str(Path(db).parent)
    stdin = trio.lowlevel.FdStream(os.dup(0))
    with EventLog(db) as log:
        async with open_runtime(
            log=log,
            renderer_factory=chat.renderer,
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
                    base = {"thread_id": thread_id, "action_id": ident, "at": trio.current_time()}
                    if verb == "quit":
                        return
                    if verb == "drain":
                        while not all(_settled(rt, t) for t in THREADS):
                            await trio.sleep(0.02)
                        print("idle", flush=True)
                        continue
                    if verb == "start":
                        action: A.Action = A.ConversationStarted(
                            **base,
                            agent="fake",
                            requested_workdir=workdir,
                            resolved_workdir=workdir,
                        )
                    elif verb == "msg":
                        action = A.UserMessage(**base, author_id="u", text=f"prompt {ident}")
                    else:
                        action = A.QueueCommand(**base, author_id="u", text=f"prompt {ident}")
                    receipt = await rt.post(action)
                    await receipt.durable()
                    print(f"ack {ident}", flush=True)


if __name__ == "__main__":
    trio.run(main, *sys.argv[1:4])
