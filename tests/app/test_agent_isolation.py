"""A hostile agent against the real ``spindle run`` (issue 19.3): the generic command agent
runs a script that goes after the Discord token, the process manager's operator token,
another thread's token, the database and another thread's processes.

The tests run as root here, and root with its capabilities reads any process's memory
whatever Spindle does. So ``spindle run`` itself is started with every capability dropped
(``setpriv --bounding-set -all``), and the agent inherits that: both keep uid 0 and have no
capability, which is exactly the position of Spindle and its agent running as one
unprivileged user (owner of the same files, no ``CAP_SYS_PTRACE``/``CAP_DAC_OVERRIDE``, and
the same, empty, capability set, so only the dumpable flag decides whether ``/proc/<pid>/
environ`` can be read). The sandboxed run keeps Spindle as plain root: the sandbox must hide
it from the agent all the same.

Two threads: "victim" (its own workdir) starts a managed process through its own thread
token; "main" runs the attacker, told every path and name the test knows.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BWRAP = ROOT / ".tools" / "bubblewrap" / "usr" / "bin" / "bwrap"
DISCORD_TOKEN = "MTIzNDU2Nzg5MDEyMzQ1Njc4.GhIjKl.the-secret-bot-token-value"
OPERATOR_TOKEN = "configured-operator-token-0123456789"

AGENT = ROOT / "testkit" / "hostile_agent.py"


def run_attack(tmp_path: Path, sandbox: bool) -> tuple[dict[str, object], Path]:
    root = tmp_path / "roots"
    main_work, victim_work = root / "main", root / "victim"
    main_work.mkdir(parents=True)
    victim_work.mkdir()
    home, data = tmp_path / "home", tmp_path / "data"
    home.mkdir()
    agent = AGENT
    config = tmp_path / "config.toml"
    from threadspindle.ingress.console import thread_id_for

    env_for_agent = {
        "ATTACK_DATA_DIR": str(data),
        "ATTACK_DB": str(data / "spindle.db"),
        "ATTACK_CONFIG": str(config),
        "ATTACK_OTHER_WORKDIR": str(victim_work),
        "ATTACK_VICTIM_THREAD": thread_id_for("victim"),
    }
    sandbox_lines = (
        f'agent_sandbox = "bwrap"\nagent_sandbox_binary = "{BWRAP}"\n' if sandbox else ""
    )
    operator = f'token = "{OPERATOR_TOKEN}"\n' if sandbox else ""
    config.write_text(
        f"""
[runtime]
allowed_roots = ["{root}"]
{sandbox_lines}
[mcp]
port = 0
{operator}
[agents.command]
binary = "{sys.executable} {agent}"
env = {{ {", ".join(f'{k} = "{v}"' for k, v in env_for_agent.items())} }}
"""
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "SPINDLE_DATA_DIR": str(data),
        "SPINDLE_CONFIG": str(config),
        "SPINDLE_DISCORD_TOKEN": DISCORD_TOKEN,
        "PYTHONPATH": str(ROOT),
    }
    script = "\n".join(
        [
            "/thread new victim",
            f"/workdir set {victim_work}",
            "/wait",  # the agent restarts in the new workdir
            "victim",
            "/wait",
            "/thread switch main",
            "attack",
            "/wait",
            "/quit",
            "",
        ]
    )
    # (Not with the sandbox: without CAP_SETFCAP uid 0 may not map itself into bubblewrap's
    # user namespace. There Spindle runs as plain root, and the sandbox must hold anyway.)
    capless = [] if sandbox else ["setpriv", "--bounding-set", "-all", "--inh-caps", "-all", "--"]
    out = subprocess.run(
        [
            *capless,
            sys.executable,
            "-m",
            "threadspindle.app.cli",
            "run",
            "--console",
            "--agent",
            "command",
        ],
        input=script,
        capture_output=True,
        text=True,
        cwd=main_work,
        env=env,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "victim started its server" in out.stdout, out.stdout + out.stderr
    assert "attack done" in out.stdout, out.stdout + out.stderr
    findings = json.loads((main_work / "findings.json").read_text())
    return findings, data


def threads_of_tokens(blob: str) -> set[str]:
    """The threads named by every thread token in ``blob`` (``spt1.<thread>.<mac>``)."""
    threads = set()
    for middle in re.findall(r"spt1\.([A-Za-z0-9_-]+)\.[A-Za-z0-9_-]{20,}", blob):
        threads.add(base64.urlsafe_b64decode(middle + "=" * (-len(middle) % 4)).decode())
    return threads


def assert_no_secret_and_no_reach(findings: dict[str, object]) -> None:
    from threadspindle.ingress.console import thread_id_for

    blob = json.dumps(findings)
    assert DISCORD_TOKEN not in blob
    assert "the-secret-bot-token-value" not in blob
    assert OPERATOR_TOKEN not in blob
    # Its own thread token (in its own environment) and no other thread's.
    assert threads_of_tokens(blob) == {thread_id_for("main")}
    assert "mcp-token" not in str(findings["data dir listing"])
    # The process manager, with the attacker's own thread token: nothing of the victim's.
    for key in ("list", "list as victim"):
        is_error, listing, _ = findings[key]  # type: ignore[misc]
        assert not is_error and listing == {"processes": []}
    for key in ("stop", "stop as victim"):
        is_error, _, text = findings[key]  # type: ignore[misc]
        assert is_error and "no process named 'victim-server'" in text


def heartbeat_goes_on(tmp_path: Path) -> None:
    # The victim's process was not stopped by the attack (it ran until Spindle quit).
    beats = (tmp_path / "roots" / "victim" / "heartbeat").read_text()
    assert len(beats) >= 3


def test_a_same_user_agent_reads_no_secret_and_reaches_no_other_thread(tmp_path):
    """Without the sandbox: Spindle is non-dumpable (its environ refused), the operator
    token lives in memory only, and thread tokens reach only their own thread. (The
    database stays readable to a same-user agent: only the sandbox hides it.)"""
    findings, data = run_attack(tmp_path, sandbox=False)
    ancestors = [v for k, v in findings.items() if k.startswith("environ ")]
    assert "<PermissionError>" in ancestors  # Spindle's own: refused by the kernel
    assert_no_secret_and_no_reach(findings)
    heartbeat_goes_on(tmp_path)
    for name in ("spindle.db", "spindle.log.jsonl", "mcp-processes.json"):
        assert oct((data / name).stat().st_mode & 0o777) == "0o600", name
    assert oct(data.stat().st_mode & 0o777) == "0o700"


def test_a_sandboxed_agent_sees_neither_spindles_files_nor_another_threads(tmp_path):
    """With ``agent_sandbox = "bwrap"``: no other process is visible, the data dir and the
    database are empty, the config file (holding the operator token) is empty, and the
    other thread's workdir is not there."""
    assert BWRAP.exists(), "run `make test` (it installs Debian's bubblewrap in .tools/)"
    findings, _ = run_attack(tmp_path, sandbox=True)
    assert_no_secret_and_no_reach(findings)
    assert findings["data dir listing"] == ""
    assert findings["database"] == "<FileNotFoundError>"
    # Covered by /dev/null, which the sandbox's nodev mount refuses to open: unreadable.
    assert findings["config"] in ("", "<PermissionError>")
    assert findings["other workdir"] in ("", "<none>")
    environs = [k for k in findings if k.startswith("/proc/")]
    assert environs and len(environs) <= 4  # the sandbox's own few processes only
    heartbeat_goes_on(tmp_path)
