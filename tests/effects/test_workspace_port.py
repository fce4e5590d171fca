"""The workspace port's /diff job (``effects.workspace_port``) with real git: the whole patch
goes with the result for the file attachment, the text version is cut at
``diff_max_chars``, and a huge patch is cut at ``diff_file_max_bytes`` with a clear note."""

from __future__ import annotations

import itertools
import re
import tracemalloc

import trio
from git_repo import make_repo

from threadspindle.effects import git_workspace as gw
from threadspindle.effects.workspace_port import GitWorkspace, WorkspaceOptions, cut_patch
from threadspindle.runtime.core import actions as A
from threadspindle.runtime.core.effect_types import WorkspaceJob


def run_diff(repo, options: WorkspaceOptions | None = None) -> A.WorkspaceJobFinished:
    """The one action a /diff job of ``repo`` posts (checked to be a finished job)."""
    posted: list[A.Action] = []
    ids = itertools.count()
    port = GitWorkspace(
        "t1", posted.append, lambda: 0.0, lambda: f"a{next(ids)}", options or WorkspaceOptions()
    )

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await port.apply(WorkspaceJob(job_id="j1", op="diff", workdir=str(repo)), nursery)

    trio.run(main)
    [result] = posted
    assert isinstance(result, A.WorkspaceJobFinished) and result.ok
    return result


def test_a_diff_result_carries_the_patch_bounded_for_text_and_for_the_file(tmp_path):
    repo = make_repo(tmp_path / "proj", {"a.txt": "a\n"})
    (repo / "big.txt").write_text("".join(f"line {i} é\n" for i in range(20_000)))
    result = run_diff(repo, WorkspaceOptions(diff_max_chars=1000, diff_file_max_bytes=64 * 1024))
    assert "1 file +20000" in result.text.replace("files", "file")
    # The patch (~270 KB) is read no further than what is shown and attached: how much
    # more there was is not known, and the notes say so.
    assert len(result.detail) < 1100 and "(the rest not shown)" in result.detail
    patch = result.patch
    assert len(patch.encode()) <= 64 * 1024
    assert patch.startswith("diff --git a/big.txt b/big.txt")
    last = patch.splitlines()[-1]
    assert last.startswith("# … patch cut here: ") and "the rest not included" in last
    assert all(
        line.startswith(("+line", "diff", "new file", "index", "---", "+++", "@@", "#"))
        for line in patch.splitlines()
    )  # cut at a line end, no half line
    small = "diff --git a/x b/x\n+x\n"
    assert cut_patch(small, 1000) == small


def test_a_patch_read_whole_says_how_much_was_left_out(tmp_path):
    # Under what is read (4× the text shown, or the file's size), the notes count exactly.
    repo = make_repo(tmp_path / "proj", {"a.txt": "a\n"})
    (repo / "mid.txt").write_text("".join(f"line {i}\n" for i in range(1_000)))
    result = run_diff(repo, WorkspaceOptions(diff_max_chars=3000, diff_file_max_bytes=4096))
    whole = trio.run(gw.diff, str(repo), None)
    assert not whole.patch_cut and 4096 < len(whole.patch) < 12_000
    shown = re.search(r"… \((\d+) more chars not shown\)", result.detail)
    assert shown is not None and int(shown.group(1)) == len(whole.patch) - 3000
    filed = re.search(r"# … patch cut here: (\d+) more bytes not included", result.patch)
    assert filed is not None
    kept = result.patch[: result.patch.index("# … patch cut here")]
    assert int(filed.group(1)) == len(whole.patch.encode()) - len(kept.encode())


def test_a_huge_file_in_the_workdir_is_never_read_whole_for_a_diff(tmp_path):
    # An agent can write a file of gigabytes; /diff read the whole patch into memory
    # (a 300 MB file: 621 MB of RSS) to show 20,000 characters of it.
    repo = make_repo(tmp_path / "proj", {"a.txt": "a\n"})
    with open(repo / "huge.txt", "w") as f:
        line = "x" * 99 + "\n"
        for _ in range(64):
            f.write(line * 10_000)  # 64 MB in all
    tracemalloc.start()
    try:
        result = run_diff(repo)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "1 file +640000 −0" in result.text
    assert peak < 8 * 1024 * 1024, f"{peak:,} bytes at the peak"
    assert len(result.patch.encode()) <= WorkspaceOptions().diff_file_max_bytes
    assert result.patch.rstrip().endswith("the rest not included (workspaces.diff_file_max_bytes)")


def test_a_file_name_that_is_not_utf8_is_reported_storably(tmp_path):
    # Git names files as bytes; decoded with surrogateescape, a name with a byte like 0xff
    # gave a result no log could write (a seq gap on JetStream, a failed row on SQLite).
    import os

    repo = make_repo(tmp_path / "proj", {"a.txt": "a\n"})
    with open(os.path.join(os.fsencode(repo), b"bad\xff.txt"), "w") as f:
        f.write("x\n")
    result = run_diff(repo)
    result.model_dump_json()  # would raise on a lone surrogate
    assert any("\ufffd" in name for name in result.files)
