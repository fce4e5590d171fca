"""The workspace port's /diff job (``effects.workspace_port``) with real git: the whole patch
goes with the result for the file attachment, the text version is cut at
``diff_max_chars``, and a huge patch is cut at ``diff_file_max_bytes`` with a clear note."""

from __future__ import annotations

import itertools

import trio
from git_repo import make_repo

from threadspindle.effects.workspace_port import GitWorkspace, WorkspaceOptions, cut_patch
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.effect_types import WorkspaceJob


def test_a_diff_result_carries_the_patch_bounded_for_text_and_for_the_file(tmp_path):
    repo = make_repo(tmp_path / "proj", {"a.txt": "a\n"})
    (repo / "big.txt").write_text("".join(f"line {i} é\n" for i in range(20_000)))
    posted: list[A.Action] = []
    ids = itertools.count()
    options = WorkspaceOptions(diff_max_chars=1000, diff_file_max_bytes=64 * 1024)
    port = GitWorkspace("t1", posted.append, lambda: 0.0, lambda: f"a{next(ids)}", options)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            job = WorkspaceJob(job_id="j1", op="diff", workdir=str(repo))
            await port.apply(job, nursery)

    trio.run(main)
    [result] = posted
    assert isinstance(result, A.WorkspaceJobFinished) and result.ok
    assert "1 file +20000" in result.text.replace("files", "file")
    assert len(result.detail) < 1100 and "more chars not shown" in result.detail
    patch = result.patch
    assert len(patch.encode()) <= 64 * 1024
    assert patch.startswith("diff --git a/big.txt b/big.txt")
    last = patch.splitlines()[-1]
    assert last.startswith("# … patch cut here: ") and "more bytes not included" in last
    assert all(
        line.startswith(("+line", "diff", "new file", "index", "---", "+++", "@@", "#"))
        for line in patch.splitlines()
    )  # cut at a line end, no half line
    small = "diff --git a/x b/x\n+x\n"
    assert cut_patch(small, 1000) == small


def test_a_file_name_that_is_not_utf8_is_reported_storably(tmp_path):
    # Git names files as bytes; decoded with surrogateescape, a name with a byte like 0xff
    # gave a result no log could write (a seq gap on JetStream, a failed row on SQLite).
    import os

    repo = make_repo(tmp_path / "proj", {"a.txt": "a\n"})
    with open(os.path.join(os.fsencode(repo), b"bad\xff.txt"), "w") as f:
        f.write("x\n")
    posted: list[A.Action] = []
    ids = itertools.count()
    port = GitWorkspace("t1", posted.append, lambda: 0.0, lambda: f"a{next(ids)}")

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await port.apply(WorkspaceJob(job_id="j1", op="diff", workdir=str(repo)), nursery)

    trio.run(main)
    [result] = posted
    assert isinstance(result, A.WorkspaceJobFinished) and result.ok
    result.model_dump_json()  # would raise on a lone surrogate
    assert any("\ufffd" in name for name in result.files)
