"""The core's workspace rules (``runtime.core.transitions_workspace``), action by action:
checkpoints before prompts, undo/redo and the agent's note, jobs holding the queue, shell
commands as tool cards, worktrees moving the conversation, restarts and parking."""

from __future__ import annotations

from workspace_script import WorkspaceScript

from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core import effect_types as F
from threadspindle.runtime.core.model import Policy, ThreadState
from threadspindle.runtime.core.transitions import transition
from threadspindle.runtime.core.workspace_model import WorkspacePolicy

ROOTS = ("/work",)


def new_state(**workspace: object) -> ThreadState:
    policy = Policy(allowed_roots=ROOTS, workspace=WorkspacePolicy(**workspace))  # type: ignore[arg-type]
    return ThreadState.new("t1", policy)


class Driver:
    def __init__(self, **workspace: object) -> None:
        self.s = WorkspaceScript("t1")
        self.state = new_state(**workspace)
        self.effects: list[F.Effect] = []

    def __call__(self, action):
        result = transition(self.state, action)
        self.state = result.state
        self.effects = list(result.effects)
        return self.effects

    def of(self, kind):
        return [e for e in self.effects if isinstance(e, kind)]

    def run_once(self, run_id: str, text: str = "hi") -> None:
        self(self.s.user(text))
        self(self.s.checkpoint(run_id))
        self(self.s.done(run_id))


def started(**workspace: object) -> Driver:
    d = Driver(**workspace)
    d(d.s.start())
    d(d.s.connected("s1"))
    return d


def test_a_checkpoint_goes_before_each_prompt_only_when_configured():
    d = started(checkpoints=True)
    effects = d(d.s.user("hi"))
    types = [type(e) for e in effects]
    assert types.index(F.CheckpointWorkdir) == types.index(F.PromptAgent) - 1
    [cp] = d.of(F.CheckpointWorkdir)
    assert cp == F.CheckpointWorkdir(run_id="r1", workdir="/work/app")
    off = started()
    assert not [e for e in off(off.s.user("hi")) if isinstance(e, F.CheckpointWorkdir)]


def test_undo_restores_the_last_run_holds_the_queue_and_tells_the_agent():
    d = started(checkpoints=True)
    d.run_once("r1")
    d.run_once("r2")
    assert [c.run_id for c in d.state.workspace.checkpoints] == ["r1", "r2"]
    assert d.state.workspace.base_commit == "c-r1"
    undo = d.s.ws("undo")
    d(undo)
    [job] = d.of(F.WorkspaceJob)
    assert (job.op, job.commit, job.run_id, job.job_id) == ("undo", "c-r2", "r2", undo.action_id)
    # A prompt sent while the files are being restored waits.
    d(d.s.user("next"))
    assert not d.of(F.PromptAgent) and d.state.run is None and len(d.state.queue) == 1
    d(d.s.job_done(undo.action_id, "undo", commit="saved-r2", run_id="r2", files=("a.py",)))
    [prompt] = d.of(F.PromptAgent)
    assert prompt.text.startswith("[Spindle: the user ran /undo.")
    assert "r2" in prompt.text and "a.py" in prompt.text and prompt.text.endswith("\n\nnext")
    assert d.state.workspace.agent_note is None
    assert d.state.workspace.checkpoints[-1].undone == "saved-r2"


def test_undo_twice_then_redo_in_order_and_a_new_run_drops_the_redo():
    d = started(checkpoints=True)
    d.run_once("r1")
    d.run_once("r2")
    for run_id in ("r2", "r1"):
        cmd = d.s.ws("undo")
        d(cmd)
        assert d.of(F.WorkspaceJob)[0].run_id == run_id
        d(d.s.job_done(cmd.action_id, "undo", commit=f"saved-{run_id}", run_id=run_id))
    nothing = d(d.s.ws("undo"))
    assert [e.text for e in nothing if isinstance(e, F.ReplyToCommand)] == [
        "Nothing to undo: no run was checkpointed here."
    ]
    redo = d.s.ws("redo")
    d(redo)
    [job] = d.of(F.WorkspaceJob)
    assert (job.run_id, job.commit) == ("r1", "saved-r1")
    d(d.s.job_done(redo.action_id, "redo", commit="x", run_id="r1"))
    assert [c.undone for c in d.state.workspace.checkpoints] == [None, "saved-r2"]
    d(d.s.user("new work"))
    d(d.s.checkpoint("r3"))
    assert [c.run_id for c in d.state.workspace.checkpoints] == ["r1", "r3"]
    d(d.s.done("r3"))
    d(d.s.ws("redo"))
    assert d.state.last_note == "nothing to redo"


def test_undo_is_refused_while_a_run_is_active_or_a_job_runs():
    d = started(checkpoints=True)
    d.run_once("r1")
    d(d.s.user("busy"))
    d(d.s.ws("undo"))
    assert d.state.last_note == "undo while busy" and not d.of(F.WorkspaceJob)
    d(d.s.done("r2"))
    d(d.s.ws("worktree_new", name="x"))
    d(d.s.ws("undo"))
    assert d.state.last_note == "undo while a workspace job runs"


def test_a_failed_job_frees_the_queue_and_says_why():
    d = started(checkpoints=True)
    cmd = d.s.ws("worktree_new", name="x")
    d(cmd)
    d(d.s.user("waits"))
    assert d.state.queue
    d(d.s.job_done(cmd.action_id, "worktree_new", ok=False, text="boom"))
    assert d.state.workspace.job is None
    assert [e.text for e in d.of(F.PostOutput) if e.kind == "notice"] == ["⚠ boom"]
    assert d.of(F.PromptAgent)[0].workdir == "/work/app"


def test_worktree_new_moves_the_conversation_and_restarts_the_agent():
    for agent, keeps in (("claude", False), ("codex", True)):
        d = Driver()
        d(d.s.start(agent=agent))
        d(d.s.connected("s1"))
        cmd = d.s.ws("worktree_new", name="feat")
        d(cmd)
        d(d.s.user("work there"))
        d(
            d.s.job_done(
                cmd.action_id,
                "worktree_new",
                path="/work/app.worktrees/feat",
                branch="spindle/feat",
                base="main",
            )
        )
        conv = d.state.conversation
        assert conv.workdir == "/work/app.worktrees/feat"
        assert conv.session_id == ("s1" if keeps else None)
        types = [type(e) for e in d.effects]
        assert F.StopAgent in types and F.StartAgent in types
        assert d.of(F.PromptAgent)[0].workdir == "/work/app.worktrees/feat"
        wt = d.state.workspace.worktree
        assert (wt.name, wt.base) == ("feat", "main")
        merge = d.s.ws("worktree_merge")
        d(d.s.done("r1"))
        d(merge)
        assert d.of(F.WorkspaceJob)[0].ref == "main"  # the default target: its base


def test_a_worktree_outside_the_allowed_roots_does_not_move_the_conversation():
    d = started()
    cmd = d.s.ws("worktree_new", name="feat")
    d(cmd)
    d(d.s.job_done(cmd.action_id, "worktree_new", path="/elsewhere/feat", branch="spindle/feat"))
    assert d.state.conversation.workdir == "/work/app"
    assert "outside the allowed roots" in d.of(F.PostOutput)[0].text


def test_shell_is_refused_unless_allowed_and_streams_as_a_tool_card():
    d = started(shell_users=("u1",))
    d(d.s.shell("ls", author="u2"))
    assert d.state.last_note == "shell command from a user not allowed"
    assert "not enabled for you" in d.of(F.ReplyToCommand)[0].text
    cmd = d.s.shell("make test")
    d(cmd)
    [card] = d.of(F.PostOutput)
    assert card.kind == "tool" and card.text.startswith("$ make test")
    assert d.of(F.RunShell) == [
        F.RunShell(shell_id=cmd.action_id, command="make test", workdir="/work/app")
    ]
    d(d.s.shell("ls"))
    assert d.state.last_note == "shell while one runs"
    d(d.s.shell_out(cmd.action_id, "line 1\n"))
    d(d.s.shell_out(cmd.action_id, "x" * 3000, binary=10))
    [edit] = d.of(F.EditOutput)
    assert edit.key == card.key and "line 1" not in edit.text and "10 bytes of binary" in edit.text
    d(d.s.shell_out("other", "stale"))
    assert d.state.last_note.startswith("output of shell other")
    d(d.s.shell_end(cmd.action_id, code=2))
    assert d.of(F.EditOutput)[0].text.endswith("✗ exit 2 · 0.5s")
    assert d.state.workspace.shell is None


def test_abort_stops_the_shell_and_the_run():
    d = started(shell_users=("u1",))
    cmd = d.s.shell("sleep 100")
    d(cmd)
    d(d.s.abort())
    assert d.of(F.StopShell) == [F.StopShell(shell_id=cmd.action_id)]
    assert [e.text for e in d.of(F.ReplyToCommand)] == ["Stopping the shell command."]
    d(d.s.shell_end(cmd.action_id, outcome="aborted", code=None))
    assert "■ aborted" in d.of(F.EditOutput)[0].text
    cmd = d.s.shell("sleep 100")
    d(cmd)
    d(d.s.user("and a prompt"))
    d(d.s.abort())
    assert d.of(F.StopShell) and d.of(F.InterruptAgent)


def test_a_restart_or_park_gives_up_jobs_and_shells():
    d = started(shell_users=("u1",))
    d(d.s.ws("worktree_new", name="x"))
    d(d.s.shell("sleep 100"))
    d(d.s.recovered())
    assert d.state.workspace.job is None and d.state.workspace.shell is None
    assert any("interrupted" in e.text for e in d.of(F.PostOutput))
    cmd = d.s.shell("sleep 100")
    d(cmd)
    d(d.s.parked())
    assert d.of(F.StopShell) == [F.StopShell(shell_id=cmd.action_id)]
    assert d.state.workspace.shell is None


def test_the_footer_gets_the_run_change_summary():
    d = started(checkpoints=True, footer_changes=True)
    d(d.s.user("hi"))
    d(d.s.checkpoint("r1"))
    d(d.s.done("r1"))
    [footer] = [e for e in d.of(F.PostOutput) if e.kind == "footer"]
    [job] = d.of(F.WorkspaceJob)
    assert (job.op, job.commit, job.key, job.text) == ("changes", "c-r1", footer.key, footer.text)
    d(
        d.s.job_done(
            job.job_id, "changes", text=f"{footer.text} · 3 files +40 −12", edit_key=footer.key
        )
    )
    assert d.of(F.EditOutput) == [
        F.EditOutput(key=footer.key, text=f"{footer.text} · 3 files +40 −12")
    ]


def test_a_worktree_removal_holds_the_queue_and_a_restart_says_it_was_cut_short():
    """Removing a worktree changes files: like worktree_new it is the thread's job until it
    answers, so a prompt waits for it, and one lost to a restart is reported (before, it
    was not tracked: /wait did not wait for it, and a quit lost it without a word)."""
    d = started()
    d(d.s.ws("worktree_remove", name="old"))
    assert d.state.workspace.job is not None and d.state.workspace.job.op == "worktree_remove"
    d(d.s.recovered())
    assert d.state.workspace.job is None
    texts = [e.text for e in d.of(F.PostOutput)]
    assert any("worktree_remove was interrupted" in t for t in texts), texts


def test_commands_need_a_conversation_and_diff_does_not_hold_the_queue():
    d = Driver(checkpoints=True)
    d(d.s.ws("diff"))
    assert d.state.last_note == "diff without a conversation"
    d = started(checkpoints=True)
    d.run_once("r1")
    d(d.s.ws("diff"))
    [job] = d.of(F.WorkspaceJob)
    assert job.commit == "c-r1" and d.state.workspace.job is None
    d(d.s.ws("diff", ref="base"))
    assert d.of(F.WorkspaceJob)[0].ref == "HEAD"


def test_a_diff_is_awaited_without_holding_the_queue_and_one_cut_short_is_told():
    """/diff and /worktree list are the thread's until they answer (``Workspace.reads``:
    the console's /wait waits for them) but hold no queue; a restart says they got none."""
    d = started(checkpoints=True)
    diff, listing = d.s.ws("diff"), d.s.ws("worktree_list")
    d(diff)
    d(listing)
    assert [r.op for r in d.state.workspace.reads] == ["diff", "worktree_list"]
    d(d.s.user("go on meanwhile"))
    assert d.of(F.PromptAgent)  # not held: the prompt went out
    d(d.s.job_done(diff.action_id, "diff", text="No changes since the start."))
    assert [r.op for r in d.state.workspace.reads] == ["worktree_list"]
    d(d.s.recovered())
    assert d.state.workspace.reads == ()
    texts = [e.text for e in d.of(F.PostOutput)]
    assert "⚠ /worktree list got no answer (Spindle restarted): ask again." in texts, texts


def _rolled(d: Driver, cmd, run_id: str, *, ok: bool = True, restorable: bool = False):
    return d(
        A.ConversationRolledBack(
            **d.s._base(),
            job_id=cmd.action_id,
            op=cmd.op,
            run_id=run_id,
            ok=ok,
            restorable=restorable,
            detail="" if ok else "refused",
        )
    )


def _rollback_native(**caps: bool) -> Driver:
    d = Driver(checkpoints=True)
    d(d.s.start(agent="codex"))
    d(d.s.connected("s1", steer=True, **caps))
    d.run_once("r1")
    d.run_once("r2")
    return d


def test_undo_rolls_back_the_conversation_natively_before_the_files_no_note():
    """Codex-like: rollback, no restore. The RollbackAgent goes before the job; once it is
    done the agent gets no note for the undo, but one for the redo it cannot restore."""
    d = _rollback_native(rollback=True)
    undo = d.s.ws("undo")
    effects = d(undo)
    kinds = [type(e) for e in effects]
    assert kinds.index(F.RollbackAgent) < kinds.index(F.WorkspaceJob)
    [rb] = d.of(F.RollbackAgent)
    assert (rb.op, rb.run_id, rb.turns, rb.job_id) == ("undo", "r2", 1, undo.action_id)
    assert rb.start.agent == "codex" and rb.start.session_id == "s1"
    _rolled(d, undo, "r2")
    d(d.s.job_done(undo.action_id, "undo", commit="saved-r2", run_id="r2", files=("a.py",)))
    shown = [e.text for e in d.effects if isinstance(e, F.PostOutput)]
    assert any("no longer has that turn" in t for t in shown), shown
    assert d.state.workspace.agent_note is None
    assert [c.conversation for c in d.state.workspace.checkpoints] == ["in", "gone"]
    # Redo: codex cannot bring the turn back, so nothing is asked of it; the note says it.
    redo = d.s.ws("redo")
    d(redo)
    assert not d.of(F.RollbackAgent)
    d(d.s.job_done(redo.action_id, "redo", commit="x", run_id="r2", files=("a.py",)))
    assert "the user ran /redo" in (d.state.workspace.agent_note or "")
    # Undo of r2 again: its turn is gone from the conversation: files and a note only.
    again = d.s.ws("undo")
    d(again)
    assert not d.of(F.RollbackAgent)


def test_undo_and_redo_with_an_agent_that_restores_turns():
    """OpenCode-like: two undos hide r2 then r1; the redos bring r1 back with r2 still
    hidden, then r2; no note at all."""
    d = _rollback_native(rollback=True, restore=True)
    for run_id in ("r2", "r1"):
        cmd = d.s.ws("undo")
        d(cmd)
        assert [(e.op, e.run_id, e.turns) for e in d.of(F.RollbackAgent)] == [("undo", run_id, 1)]
        _rolled(d, cmd, run_id, restorable=True)
        d(d.s.job_done(cmd.action_id, "undo", commit=f"saved-{run_id}", run_id=run_id))
    assert [c.conversation for c in d.state.workspace.checkpoints] == ["hidden", "hidden"]
    for run_id, stay_hidden in (("r1", 1), ("r2", 0)):
        cmd = d.s.ws("redo")
        d(cmd)
        assert [(e.op, e.run_id, e.turns) for e in d.of(F.RollbackAgent)] == [
            ("redo", run_id, stay_hidden)
        ]
        _rolled(d, cmd, run_id, restorable=True)
        d(d.s.job_done(cmd.action_id, "redo", commit="x", run_id=run_id))
    assert [c.conversation for c in d.state.workspace.checkpoints] == ["in", "in"]
    assert d.state.workspace.agent_note is None


def test_a_refused_rollback_or_an_agent_that_cannot_falls_back_to_the_note():
    d = _rollback_native(rollback=True)
    undo = d.s.ws("undo")
    d(undo)
    _rolled(d, undo, "r2", ok=False)
    d(d.s.job_done(undo.action_id, "undo", commit="saved-r2", run_id="r2"))
    assert "the user ran /undo" in (d.state.workspace.agent_note or "")
    assert d.state.workspace.checkpoints[-1].conversation == "in"
    claude = _rollback_native()  # declares no rollback: not even asked
    claude(claude.s.ws("undo"))
    assert not claude.of(F.RollbackAgent) and claude.of(F.WorkspaceJob)


def test_turns_before_a_compaction_or_of_another_session_are_not_rolled_back():
    d = _rollback_native(rollback=True, compact=True)
    d(d.s.compact())
    assert [e.command for e in d.of(F.PromptAgent)] == ["compact"]
    d(d.s.checkpoint("r3"))
    d(d.s.done("r3"))
    d.run_once("r4")
    assert [c.conversation for c in d.state.workspace.checkpoints] == ["gone"] * 3 + ["in"]
    undo = d.s.ws("undo")
    d(undo)
    assert [(e.run_id, e.turns) for e in d.of(F.RollbackAgent)] == [("r4", 1)]
    _rolled(d, undo, "r4")
    d(d.s.job_done(undo.action_id, "undo", commit="saved-r4", run_id="r4"))
    d(d.s.ws("undo"))  # the compaction's own run: files only
    assert not d.of(F.RollbackAgent) and d.of(F.WorkspaceJob)[0].run_id == "r3"
    other = _rollback_native(rollback=True)
    other(other.s.resume(agent="codex", session_id="s9"))
    assert {c.conversation for c in other.state.workspace.checkpoints} == {"gone"}
    assert other.state.workspace.agent_session == "s9"


def test_a_shell_command_goes_to_the_agent_shell_only_when_asked_and_able():
    def shell_of(d: Driver, **action: object) -> F.RunShell:
        d(A.ShellRequested(**d.s._base(), author_id="u1", command="ls", **action))
        [run] = d.of(F.RunShell)
        return run

    d = Driver(checkpoints=True, shell_users=("u1",), shell_via_agent=True)
    d(d.s.start(agent="codex"))
    d(d.s.connected("s1", steer=True, shell=True))
    d.run_once("r1")
    run = shell_of(d)
    assert run.via_agent is not None and run.via_agent.agent == "codex"
    assert d.state.workspace.shell.via_agent
    assert d.state.workspace.checkpoints[0].conversation == "gone"  # its shell adds a turn
    d(d.s.user("meanwhile"))
    assert not d.of(F.PromptAgent) and len(d.state.queue) == 1  # the agent is busy
    d(d.s.shell_end(run.shell_id))
    assert d.of(F.PromptAgent)
    # The channel can say otherwise; an agent without a shell gets none.
    d(d.s.done("r2"))
    assert shell_of(d, via_agent=False).via_agent is None
    d(d.s.shell_end(d.state.workspace.shell.id))
    plain = Driver(shell_users=("u1",), shell_via_agent=True)
    plain(plain.s.start())
    plain(plain.s.connected("s1", steer=False))
    assert shell_of(plain).via_agent is None
    off = Driver(shell_users=("u1",))
    off(off.s.start(agent="codex"))
    off(off.s.connected("s1", steer=True, shell=True))
    assert shell_of(off).via_agent is None
    off(off.s.shell_end(off.state.workspace.shell.id))
    assert shell_of(off, via_agent=True).via_agent is not None  # the channel asks for it
