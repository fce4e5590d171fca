"""The whole way through with the genuine ``codex app-server`` and real git: chat actions ->
the live runtime (checkpoints, the workspace port) -> codex -> the fake Responses API. After
two runs, /undo restores the files *and* drops the turn from codex's thread; a `!` command
runs in codex's own shell; the model's next request holds the first turn and the command,
not the undone turn."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from threadspindle.agents.codex import CodexAdapter
from threadspindle.effects.workspace_port import WorkspaceOptions, workspace_factory
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.effect_types import StartAgent
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.core.workspace_model import WorkspacePolicy
from threadspindle.runtime.live.log import EventLog
from threadspindle.runtime.live.registry import open_runtime
from threadspindle.testkit.fake_chat import RenderWorld
from threadspindle.testkit.fake_model.openai_responses import OpenAIResponsesFake
from threadspindle.testkit.genuine_clis import codex_options

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "effects"))
from git_repo import make_repo  # noqa: E402

pytestmark = pytest.mark.timeout(150)
THREAD = "t-codex-ws"


async def _until(predicate: Callable[[], bool], timeout: float = 45.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


async def test_undo_rolls_back_codex_and_a_shell_command_runs_in_its_shell(
    tmp_path: Path,
) -> None:
    fake = OpenAIResponsesFake()
    fake.start()
    repo = make_repo(tmp_path / "proj", {"a.txt": "a\n"})
    opts = codex_options(fake.base_url, tmp_path / "home")

    def factory(start: StartAgent, thread_id: str) -> CodexAdapter:
        return CodexAdapter(opts)

    ids = itertools.count(1)
    chat = RenderWorld()

    def base() -> dict[str, Any]:
        return {"thread_id": THREAD, "action_id": f"u{next(ids)}", "at": trio.current_time()}

    user = {"author_id": "u1", "author_name": "alice"}
    policy = Policy(
        allowed_roots=(str(tmp_path),),
        workspace=WorkspacePolicy(checkpoints=True, shell_users=("u1",), shell_via_agent=True),
    )
    try:
        with EventLog(tmp_path / "events.sqlite3") as log:
            async with open_runtime(
                log=log,
                renderer_factory=chat.renderer,
                adapter_factory=factory,
                policy=policy,
                clock=trio.current_time,
                workspace_factory=workspace_factory(WorkspaceOptions()),
            ) as rt:

                async def send(action: A.Action) -> None:
                    await (await rt.post(action)).durable()

                def state() -> Any:
                    return rt.snapshot(THREAD)

                def idle() -> bool:
                    s = state()
                    return s.run is None and s.workspace.job is None and s.workspace.shell is None

                await send(
                    A.ConversationStarted(
                        **base(),
                        agent="codex",
                        requested_workdir=str(repo),
                        resolved_workdir=str(repo),
                    )
                )
                for done, text in enumerate(("remember ALPHA-MARK", "remember BETA-MARK"), 1):
                    await send(A.UserMessage(**base(), **user, text=text, interrupt=True))
                    await _until(lambda n=done: state().counters.completed == n and idle())
                    if done == 2:
                        (repo / "a.txt").write_text("changed by the second run\n")
                assert [c.run_id for c in state().workspace.checkpoints] == ["r1", "r2"]

                await send(A.WorkspaceCommand(**base(), op="undo", author_id="u1"))
                await _until(lambda: any("no longer has" in t for t in chat.texts(THREAD)))
                assert (repo / "a.txt").read_text() == "a\n"

                await send(A.ShellRequested(**base(), author_id="u1", command="echo SHELL-MARK"))
                await _until(lambda: any("→ exit 0" in t for t in chat.texts(THREAD, "tool")))
                assert any("SHELL-MARK" in t for t in chat.texts(THREAD, "tool"))

                await send(A.UserMessage(**base(), **user, text="what now?", interrupt=True))
                await _until(lambda: state().counters.completed == 3 and idle())
                sent = json.dumps(
                    [r.body for r in fake.requests if r.path.endswith("/responses")][-1]
                )
                assert "ALPHA-MARK" in sent and "SHELL-MARK" in sent
                assert "BETA-MARK" not in sent  # the undone turn is gone from codex's thread
                assert "[Spindle: the user ran /undo" not in sent  # no note needed
    finally:
        fake.stop()
