"""Workspaces through the live runtime, with real git in temporary repositories: a
checkpoint before each run, /undo and /redo (also across a restart), /diff, the footer's
change summary, `!` shell commands (streaming, refusal, /abort) and /worktree new moving
the conversation while prompts wait."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import psutil
import trio
from runtime_harness import running, until

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "effects"))
from git_repo import git, make_repo, tree_of  # noqa: E402

from threadspindle.effects.shell_command import ShellLimits  # noqa: E402
from threadspindle.effects.workspace_port import WorkspaceOptions, workspace_factory  # noqa: E402
from threadspindle.runtime.core import actions as A  # noqa: E402
from threadspindle.runtime.core.effect_types import PromptAgent  # noqa: E402
from threadspindle.runtime.core.model import Policy  # noqa: E402
from threadspindle.runtime.core.workspace_model import WorkspacePolicy  # noqa: E402
from threadspindle.testkit.fake_agent import FakeAgentWorld  # noqa: E402

_ids = itertools.count(1)


def policy(tmp_path: Path, **workspace: object) -> Policy:
    return Policy(
        allowed_roots=(str(tmp_path),),
        workspace=WorkspacePolicy(checkpoints=True, **workspace),  # type: ignore[arg-type]
    )


def base(thread: str) -> dict[str, object]:
    return {"thread_id": thread, "action_id": f"w{next(_ids)}", "at": trio.current_time()}


class Thread:
    def __init__(self, runtime, thread: str, workdir: Path) -> None:
        self.runtime, self.thread, self.workdir = runtime, thread, workdir

    async def send(self, action: A.Action) -> None:
        receipt = await self.runtime.post(action)
        await receipt.durable()

    async def start(self) -> None:
        await self.send(
            A.ConversationStarted(
                **base(self.thread),
                agent="fake",
                requested_workdir=str(self.workdir),
                resolved_workdir=str(self.workdir),
            )
        )

    async def say(self, text: str) -> None:
        await self.send(
            A.UserMessage(**base(self.thread), author_id="u1", author_name="alice", text=text)
        )

    async def command(self, op: str, **fields: object) -> None:
        await self.send(A.WorkspaceCommand(**base(self.thread), op=op, author_id="u1", **fields))

    async def shell(self, command: str, author: str = "u1") -> None:
        await self.send(A.ShellRequested(**base(self.thread), author_id=author, command=command))

    @property
    def state(self):
        return self.runtime.snapshot(self.thread)

    async def settled(self, completed: int | None = None) -> None:
        def done() -> bool:
            s = self.state
            ws = s.workspace
            ok = s.run is None and not s.queue and ws.job is None and ws.shell is None
            return ok and (completed is None or s.counters.completed >= completed)

        await until(done, timeout=30)
        await self.runtime.wait_quiet(self.thread)

    def texts(self, kind: str | None = None) -> list[str]:
        return self.runtime.chat.texts(self.thread, kind)


def agent_edits(world: FakeAgentWorld, edits) -> None:
    """The fake agent changes files of its workdir when it gets a prompt."""

    def on_prompt(prompt: PromptAgent) -> None:
        for step in edits.get(prompt.run_id, ()):
            step(Path(prompt.workdir))

    world.on_prompt = on_prompt


def write(name: str, text: str):
    return lambda root: (
        (root / name).parent.mkdir(parents=True, exist_ok=True) or (root / name).write_text(text)
    )


def delete(name: str):
    return lambda root: (root / name).unlink()


def test_undo_and_redo_a_run_that_created_edited_and_deleted_files(tmp_path):
    repo = make_repo(tmp_path / "proj", {"keep.txt": "keep\n", "gone.txt": "old\n"})
    (repo / "keep.txt").write_text("the user's uncommitted edit\n")
    (repo / "wip.txt").write_text("untracked work in progress\n")
    before = tree_of(repo)
    index_before = git(repo, "write-tree")
    world = FakeAgentWorld()
    agent_edits(
        world,
        {
            "r1": [
                write("src/new.py", "print(1)\n"),
                write("keep.txt", "the agent rewrote it\n"),
                delete("gone.txt"),
                delete("wip.txt"),
            ]
        },
    )

    async def main() -> None:
        opts = WorkspaceOptions()
        async with running(
            tmp_path,
            agents=world,
            policy=policy(tmp_path),
            workspace_factory=workspace_factory(opts),
        ) as runtime:
            t = Thread(runtime, "t1", repo)
            await t.start()
            await t.say("make changes")
            await t.settled(completed=1)
            after = tree_of(repo)
            assert "gone.txt" not in after and "src/new.py" in after
            [checkpoint] = t.state.workspace.checkpoints
            assert checkpoint.run_id == "r1" and checkpoint.ref.startswith("refs/spindle/t1/")

            await t.command("undo")
            await t.settled()
            assert tree_of(repo) == before  # the user's uncommitted edit and file are back
            assert git(repo, "write-tree") == index_before  # the index was not touched
            assert any("Undid run r1" in x for x in t.texts("notice"))

            await t.command("redo")
            await t.settled()
            assert tree_of(repo) == after

            await t.command("undo")
            await t.settled()
            assert tree_of(repo) == before
            # The agent is told what was undone with its next prompt.
            await t.say("go on")
            await t.settled(completed=2)
            delivered = dict(world.delivered)["r2"]
            assert delivered.startswith("[Spindle: the user ran /undo.")
            assert "gone.txt" in delivered and delivered.endswith("go on")
            # A new run after an undo: nothing to redo any more (its state stays on a ref).
            await t.command("redo")
            await t.settled()
            assert "Nothing to redo." in t.texts("reply")
            assert git(repo, "rev-parse", "--verify", "refs/spindle/t1/r1-undone")

    trio.run(main)


def test_undo_works_across_a_restart(tmp_path):
    repo = make_repo(tmp_path / "proj", {"a.txt": "a\n"})
    world = FakeAgentWorld()
    agent_edits(world, {"r1": [write("a.txt", "changed\n"), write("b.txt", "new\n")]})
    factory = workspace_factory(WorkspaceOptions())

    async def first() -> None:
        async with running(
            tmp_path, agents=world, policy=policy(tmp_path), workspace_factory=factory
        ) as runtime:
            t = Thread(runtime, "t1", repo)
            await t.start()
            await t.say("change a")
            await t.settled(completed=1)

    async def second() -> None:
        async with running(
            tmp_path, agents=world, policy=policy(tmp_path), workspace_factory=factory
        ) as runtime:
            t = Thread(runtime, "t1", repo)
            assert [c.run_id for c in t.state.workspace.checkpoints] == ["r1"]
            await t.command("undo")
            await t.settled()
            assert (repo / "a.txt").read_text() == "a\n"
            assert not (repo / "b.txt").exists()

    trio.run(first)
    assert (repo / "b.txt").exists()
    trio.run(second)


def test_undo_and_redo_roll_the_agent_conversation_where_it_can(tmp_path):
    """An agent that rolls back and restores turns is asked to (before the files are
    restored), also after a restart (the agent started for it); it gets no note."""
    repo = make_repo(tmp_path / "proj", {"a.txt": "a\n"})
    world = FakeAgentWorld(can_rollback=True)
    agent_edits(world, {"r2": [write("a.txt", "changed\n")]})
    factory = workspace_factory(WorkspaceOptions())

    async def first() -> None:
        async with running(
            tmp_path, agents=world, policy=policy(tmp_path), workspace_factory=factory
        ) as runtime:
            t = Thread(runtime, "t1", repo)
            await t.start()
            await t.say("one")
            await t.settled(completed=1)
            await t.say("two")
            await t.settled(completed=2)
            await t.command("undo")
            await t.settled()
            assert world.rollbacks == [("undo", "r2", 1)]
            assert (repo / "a.txt").read_text() == "a\n"
            assert any("no longer has that turn" in x for x in t.texts("notice"))

    async def second() -> None:
        async with running(
            tmp_path, agents=world, policy=policy(tmp_path), workspace_factory=factory
        ) as runtime:
            t = Thread(runtime, "t1", repo)
            await t.command("redo")
            await t.settled()
            assert world.rollbacks[-1] == ("redo", "r2", 0)
            assert (repo / "a.txt").read_text() == "changed\n"
            await t.say("three")
            await t.settled(completed=3)
            assert dict(world.delivered)["r3"] == "three"  # no note: the agent has the turn

    trio.run(first)
    trio.run(second)


def test_diff_and_the_footer_change_summary(tmp_path):
    repo = make_repo(tmp_path / "proj", {"a.txt": "1\n2\n3\n"})
    world = FakeAgentWorld()
    agent_edits(world, {"r1": [write("a.txt", "1\nTWO\n3\n4\n"), write("b.txt", "b\n")]})

    async def main() -> None:
        async with running(
            tmp_path,
            agents=world,
            policy=policy(tmp_path, footer_changes=True),
            workspace_factory=workspace_factory(WorkspaceOptions()),
        ) as runtime:
            t = Thread(runtime, "t1", repo)
            await t.start()
            await t.say("edit")
            await t.settled(completed=1)
            await until(lambda: any("files" in x for x in t.texts("footer")), timeout=10)
            [footer] = t.texts("footer")
            assert footer.endswith(" · 2 files +3 −1")
            await t.command("diff")
            await until(lambda: t.texts("post_file"), timeout=10)
            notices = t.texts("notice")
            assert any(
                x.startswith("Changes since the conversation started: 2 files +3 −1")
                for x in notices
            )
            # The patch as a file (the platform shows it as text where it takes no files).
            [patch] = t.texts("post_file")
            assert patch.startswith("changes.diff: The whole patch (")
            assert "+TWO" in patch and "diff --git a/b.txt b/b.txt" in patch

    trio.run(main)


def test_shell_commands_stream_refuse_and_abort(tmp_path):
    repo = make_repo(tmp_path / "proj")
    opts = WorkspaceOptions(shell=ShellLimits(flush_s=0.05, timeout_s=30))

    async def main() -> None:
        async with running(
            tmp_path,
            policy=policy(tmp_path, shell_users=("u1",)),
            workspace_factory=workspace_factory(opts),
        ) as runtime:
            t = Thread(runtime, "t1", repo)
            await t.start()
            await t.shell("echo hello; ls", author="stranger")
            await t.settled()
            assert any("not enabled for you" in x for x in t.texts("reply"))

            await t.shell("echo one; sleep 0.5; echo two; exit 4")
            await until(lambda: any("one" in x for x in t.texts("tool")), timeout=10)
            assert t.state.workspace.shell is not None  # still running: output streamed
            await t.settled()
            [card] = t.texts("tool")
            assert "one\ntwo" in card and "✗ exit 4" in card

            await t.shell("sleep 300 & echo $! > pid; echo started; wait")
            await until(lambda: (repo / "pid").exists() and (repo / "pid").read_text(), 10)
            pid = int((repo / "pid").read_text())
            await t.send(A.AbortRequested(**base("t1"), author_id="u1"))
            await t.settled()
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
            assert any("■ aborted" in x for x in t.texts("tool"))

    trio.run(main)


def test_shell_through_the_agent_holds_prompts_and_falls_back_to_direct(tmp_path):
    repo = make_repo(tmp_path / "proj")
    opts = WorkspaceOptions(shell=ShellLimits(flush_s=0.05, timeout_s=30))
    world = FakeAgentWorld(can_shell=True)

    async def main() -> None:
        async with running(
            tmp_path,
            agents=world,
            policy=policy(tmp_path, shell_users=("u1",), shell_via_agent=True),
            workspace_factory=workspace_factory(opts),
        ) as runtime:
            t = Thread(runtime, "t1", repo)
            await t.start()
            await t.say("hello")  # the agent is connected: its capabilities are known
            await t.settled(completed=1)
            await t.shell("echo in-agent; sleep 0.5")
            await t.say("after the shell")
            await until(lambda: world.shell_commands, timeout=10)
            assert t.state.run is None and len(t.state.queue) == 1  # the prompt waits
            await t.settled(completed=2)
            assert world.shell_commands == ["echo in-agent; sleep 0.5"]
            card = t.texts("tool")[-1]
            assert "agent shell ran: echo in-agent" in card and "→ exit 0" in card
            await t.shell("sleep 30")
            await until(lambda: len(world.shell_commands) == 2, timeout=10)
            await t.send(A.AbortRequested(**base("t1"), author_id="u1"))
            await t.settled()
            assert "■ aborted" in t.texts("tool")[-1]
            # An agent without a shell of its own: Spindle runs the command itself.
            world.can_shell = False
            world.crash_all()
            await t.say("restart")  # (that prompt may meet the dying agent: not looked at)
            await until(lambda: not t.state.capabilities.shell, timeout=10)
            await t.shell("echo direct > direct.txt; echo done")
            await t.settled()
            assert (repo / "direct.txt").read_text() == "direct\n"
            assert len(world.shell_commands) == 2

    trio.run(main)


def test_worktree_new_moves_the_conversation_and_prompts_wait(tmp_path):
    repo = make_repo(tmp_path / "proj", {"shared.txt": "base\n"})
    world = FakeAgentWorld()
    seen: list[tuple[str, str]] = []

    def on_prompt(prompt: PromptAgent) -> None:
        seen.append((prompt.run_id, prompt.workdir))
        name = Path(prompt.workdir).name
        Path(prompt.workdir, "shared.txt").write_text(f"edited in {name}\n")

    world.on_prompt = on_prompt

    async def main() -> None:
        async with running(
            tmp_path,
            agents=world,
            policy=policy(tmp_path),
            workspace_factory=workspace_factory(WorkspaceOptions()),
        ) as runtime:
            one = Thread(runtime, "t1", repo)
            two = Thread(runtime, "t2", repo)
            await one.start()
            await two.start()
            await one.command("worktree_new", name="one")
            await one.say("edit while the worktree is made")  # waits in the queue
            await two.command("worktree_new", name="two")
            await two.say("edit too")
            await one.settled(completed=1)
            await two.settled(completed=1)
            wt_one = str(tmp_path / "proj.worktrees" / "one")
            wt_two = str(tmp_path / "proj.worktrees" / "two")
            assert one.state.conversation.workdir == wt_one
            assert two.state.conversation.workdir == wt_two
            assert sorted(seen) == [("r1", wt_one), ("r1", wt_two)] or set(seen) == {
                ("r1", wt_one),
                ("r1", wt_two),
            }
            assert (repo / "shared.txt").read_text() == "base\n"
            assert Path(wt_one, "shared.txt").read_text() == "edited in one\n"
            assert Path(wt_two, "shared.txt").read_text() == "edited in two\n"
            assert git(wt_one, "branch", "--show-current") == "spindle/one"
            assert one.state.workspace.worktree.base == "main"

            await one.command("worktree_merge")
            await one.settled()
            assert (repo / "shared.txt").read_text() == "edited in one\n"
            await two.command("worktree_merge")
            await two.settled()
            assert any("conflicts in shared.txt" in x for x in two.texts("notice"))
            assert (repo / "shared.txt").read_text() == "edited in one\n"
            assert Path(wt_two, "shared.txt").read_text() == "edited in two\n"

            Path(wt_two, "scratch.txt").write_text("uncommitted\n")
            await one.command("worktree_remove", name="two")
            await until(lambda: any("uncommitted changes" in x for x in one.texts("notice")), 10)
            assert Path(wt_two).exists()
            await two.command("worktree_remove", name="two")
            await until(lambda: any("works in worktree two" in x for x in two.texts("reply")), 10)
            await two.command("worktree_remove", name="one", force=True)
            await until(lambda: not Path(wt_one).exists(), timeout=10)
            # The thread whose workdir went away is told so by its next command.
            await one.command("diff")
            await until(lambda: any("/diff failed" in x for x in one.texts("notice")), 10)

    trio.run(main)
