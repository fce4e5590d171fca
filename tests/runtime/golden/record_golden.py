"""Record the golden logs: run scenarios through the live runtime, export each thread's log
as JSONL and write what its replay gives next to it (``<name>.effects.jsonl``,
``<name>.transcript.txt``). Run by hand to add a scenario (existing golden logs are kept
as they were recorded):

    .venv/bin/python tests/runtime/golden/record_golden.py [--all]

When the core changes on purpose, regenerate only the expected files of the old logs
(``--expected``: replays each recorded log, leaves the logs alone) and review the diff
before committing.
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path

import trio
import trio.testing

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[2]))

from runtime_harness import Chat, running, until  # noqa: E402

from threadspindle.runtime.live.replay import export_thread, replay_file  # noqa: E402


async def scenarios(tmp: Path) -> dict[str, str]:
    """Run every scenario on its own thread; returns name -> thread id."""
    names = {}
    async with running(tmp) as rt:
        # text, a tool card, and a footer
        chat = Chat(rt, "g-text-tool", str(tmp))
        await chat.start()
        await chat.say("hello")
        await until(lambda: rt.snapshot(chat.thread_id).counters.completed == 1)
        await chat.say("TOOL please")
        await until(lambda: rt.snapshot(chat.thread_id).counters.completed == 2)
        names["text_tool"] = chat.thread_id

        # a slow stream interrupted by a plain message, a /queue item, an /abort
        chat = Chat(rt, "g-interrupt-queue", str(tmp))
        await chat.start()
        await chat.say("SLOW one")
        await until(lambda: "chunk2" in "".join(rt.chat.texts(chat.thread_id, "text")))
        await chat.queue("queued two")
        await chat.say("SLOW plain three")
        await until(
            lambda: (
                rt.snapshot(chat.thread_id).counters.runs == 2
                and "chunk1" in "".join(rt.chat.texts(chat.thread_id, "text"))
            )
        )
        await chat.abort()
        await until(
            lambda: (
                rt.snapshot(chat.thread_id).counters.runs == 3
                and rt.snapshot(chat.thread_id).run is None
            )
        )
        names["interrupt_queue"] = chat.thread_id

        # a permission prompt answered, then an agent crash and the respawn
        chat = Chat(rt, "g-permission-crash", str(tmp))
        await chat.start()
        await chat.say("PERMISSION please")
        await until(lambda: bool(rt.snapshot(chat.thread_id).blockers))
        await chat.allow("perm1")
        await until(lambda: rt.snapshot(chat.thread_id).counters.completed == 1)
        await chat.say("CRASH now")
        await until(lambda: rt.snapshot(chat.thread_id).counters.listener_starts == 2)
        await chat.say("after the crash")
        await until(lambda: rt.snapshot(chat.thread_id).counters.completed == 2)
        names["permission_crash"] = chat.thread_id

        # a long run and a queued prompt when the runtime shuts down (parked) ...
        chat = Chat(rt, "g-park-recover", str(tmp))
        await chat.start()
        await chat.say("TOOL that outlives the process")
        await until(lambda: rt.chat.texts(chat.thread_id, "tool") != [])
        await chat.queue("queued across the restart")
        await rt.wait_quiet(chat.thread_id)
    # ... and the next runtime on the same log takes the queue up again.
    async with running(tmp) as rt:
        await until(lambda: rt.snapshot("g-park-recover").counters.completed == 1)
        names["park_recover"] = "g-park-recover"
    return names


def write_expected(log: Path) -> None:
    """What replaying ``log`` gives, next to it: effects and transcript."""
    (HERE / f"{log.stem}.effects.jsonl").write_text("\n".join(replay_file(log)) + "\n")
    (HERE / f"{log.stem}.transcript.txt").write_text(
        "\n".join(replay_file(log, transcript=True)) + "\n"
    )


def main() -> None:
    """Record the scenarios that have no golden file yet (``--all``: every one). Existing
    golden logs stay as they were recorded: old logs must keep replaying. ``--expected``:
    only replay the recorded logs again."""
    if "--expected" in sys.argv:
        for log in sorted(HERE.glob("*.jsonl")):
            if not log.name.endswith(".effects.jsonl"):
                write_expected(log)
                print(f"replayed {log.stem}")
        return
    everything = "--all" in sys.argv
    with tempfile.TemporaryDirectory() as tmp:
        names = trio.run(scenarios, Path(tmp), clock=trio.testing.MockClock(autojump_threshold=0))
        for name, thread_id in names.items():
            if (HERE / f"{name}.jsonl").exists() and not everything:
                continue
            buf = io.StringIO()
            export_thread(Path(tmp) / "events.sqlite3", thread_id, buf)
            log = HERE / f"{name}.jsonl"
            log.write_text(buf.getvalue())
            write_expected(log)
            print(f"recorded {name}: {buf.getvalue().count(chr(10))} actions")


if __name__ == "__main__":
    main()
