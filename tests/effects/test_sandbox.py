"""effects/sandbox.py: what a process in the bubblewrap sandbox sees, with the real bwrap
(Debian's, unpacked under .tools/ by `make test`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from threadspindle.effects.sandbox import Sandbox, check_sandbox, sandbox_argv

ROOT = Path(__file__).resolve().parents[2]
BWRAP = ROOT / ".tools" / "bubblewrap" / "usr" / "bin" / "bwrap"


@pytest.fixture
def bwrap() -> str:
    assert BWRAP.exists(), "run `make test` (it unpacks Debian's bubblewrap in .tools/)"
    return str(BWRAP)


def layout(tmp_path: Path) -> dict[str, Path]:
    roots = tmp_path / "roots"
    places = {
        "roots": roots,
        "mine": roots / "mine",
        "other": roots / "other",
        "data": tmp_path / "data",
    }
    for path in places.values():
        path.mkdir(parents=True, exist_ok=True)
    (places["other"] / "secret.txt").write_text("other thread's file")
    (places["data"] / "spindle.db").write_text("the database")
    (places["mine"] / "mine.txt").write_text("my file")
    return places


def test_a_sandboxed_process_sees_its_workdir_and_not_the_rest(tmp_path, bwrap):
    p = layout(tmp_path)
    sandbox = Sandbox(binary=bwrap, hidden=(str(p["data"]),), roots=(str(p["roots"]),))
    check_sandbox(sandbox)
    script = (
        "import os\n"
        "print(open('mine.txt').read())\n"
        f"print(sorted(os.listdir({str(p['roots'])!r})))\n"
        f"print(os.listdir({str(p['data'])!r}))\n"
        "print(len([d for d in os.listdir('/proc') if d.isdigit()]))\n"
        "open('written.txt', 'w').write('ok')\n"
    )
    argv = sandbox_argv(sandbox, ["python3", "-c", script], workdir=str(p["mine"]))
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    mine, roots, data, processes = out.stdout.splitlines()
    assert mine == "my file"
    assert roots == "['mine']"  # the other thread's workdir is not there
    assert data == "[]"  # Spindle's data dir is empty
    assert int(processes) <= 3  # its own PID namespace: bwrap's init, python
    assert (p["mine"] / "written.txt").read_text() == "ok"  # the workdir is writable


def test_argv_order_puts_spindles_files_last(tmp_path):
    p = layout(tmp_path)
    roots, work, data = str(p["roots"]), str(p["mine"]), str(p["data"])
    sandbox = Sandbox(hidden=(data, data + "/spindle.db"), roots=(roots,))
    argv = sandbox_argv(sandbox, ["agent"], workdir=work, expose=("/tmp/x/mcp.json",))
    assert argv[-2:] == ["--", "agent"]
    assert argv.index(roots) < argv.index(work)  # roots emptied, then the workdir put back
    assert argv.index(work) < argv.index(data)  # then Spindle's files emptied on top
    assert data + "/spindle.db" not in argv  # inside an emptied dir: no mount point made
    at = argv.index("/tmp/x/mcp.json")
    assert argv[at - 1 : at + 2] == ["--ro-bind", "/tmp/x/mcp.json", "/tmp/x/mcp.json"]
