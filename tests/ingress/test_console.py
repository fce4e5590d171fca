"""``spindle run`` in console mode, driven through a pipe like a script would drive it.

Each test runs the real command in a subprocess with its own data dir, config and HOME, and
the built-in echo agent (no genuine CLI is installed in that HOME's PATH).
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def environment(place: dict[str, Path], extra: dict[str, str] | None = None) -> dict[str, str]:
    return {
        **(extra or {}),
        "PATH": "/usr/bin:/bin",  # no agent CLI on it: the echo demo is offered
        "HOME": str(place["home"]),
        "SPINDLE_DATA_DIR": str(place["data"]),
        "SPINDLE_CONFIG": str(place["config"]),
        "PYTHONPATH": str(ROOT),
    }


def spindle(
    place: dict[str, Path],
    *args: str,
    stdin: str = "",
    timeout: float = 60,
    env: dict[str, str] | None = None,
):
    env = environment(place, env)
    return subprocess.run(
        [sys.executable, "-m", "threadspindle.app.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=place["work"],
        env=env,
        timeout=timeout,
    )


def lines(*items: str) -> str:
    return "\n".join(items) + "\n"


def echo_console(place: dict[str, Path], *, stdin: str, args: tuple[str, ...] = (), **kw):
    """``spindle run`` with the echo agent and no process manager, fed ``stdin``."""
    return spindle(place, "run", "--no-mcp", "--agent", "echo", *args, stdin=stdin, **kw)


def echo_console_process(place: dict[str, Path]) -> subprocess.Popen[str]:
    """``echo_console`` left running, its pipes the caller's (to signal it mid-run)."""
    return subprocess.Popen(
        [sys.executable, "-m", "threadspindle.app.cli", "run", "--no-mcp", "--agent", "echo"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=place["work"],
        env=environment(place),
    )


def test_without_any_agent_cli_it_says_so_and_offers_the_echo_demo(place):
    out = spindle(place, "run", "--no-mcp", stdin=lines("hello world", "/wait", "/quit"))
    assert out.returncode == 0, out.stderr
    assert "No agent CLI is ready" in out.stderr and "echo" in out.stderr
    assert "claude (not installed)" in out.stderr
    assert f"Started echo in {place['work']}." in out.stdout
    assert "hello world" in out.stdout
    assert "echo (demo agent)" in out.stdout  # the footer names the demo


def test_a_script_in_a_file_is_read_to_its_end(place):
    # `spindle run < script`: stdin is a file, not a pipe (epoll refuses a file: it is
    # read, never waited on).
    script = place["work"] / "script.txt"
    script.write_text(lines("hello from a file", "/wait", "/quit"))
    with script.open("rb") as stdin:
        out = subprocess.run(
            [sys.executable, "-m", "threadspindle.app.cli", "run", "--no-mcp", "--agent", "echo"],
            stdin=stdin,
            capture_output=True,
            text=True,
            cwd=place["work"],
            env=environment(place, None),
            timeout=60,
        )
    assert out.returncode == 0, out.stderr
    assert "hello from a file" in out.stdout  # the echo agent answered it


def test_an_over_long_line_is_refused_whole_and_a_control_only_line_is_answered(place):
    # Past the reader's cut (4 bytes a character) the rest of the line ends in a command:
    # it must not run, nor any piece of the line go to the agent.
    long_line = "a" * 500_000 + "/thread new injected"
    out = echo_console(
        place,
        stdin=lines("x" * 100_001, long_line, "\x01\x02\x1b", "/threads", "short one", "/wait"),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("Not sent: a line may hold at most 100,000 characters.") == 2
    assert "Not sent: the line has no text, only control characters." in out.stdout
    assert "injected" not in out.stdout and "aaaa" not in out.stdout and "xxxx" not in out.stdout
    assert "short one" in out.stdout  # the chat goes on


def test_queue_interrupt_and_order(place):
    out = echo_console(
        place,
        stdin=lines(
            "first prompt one two three four five six seven eight nine ten",
            "/queue alpha",
            "/queue beta",
            "interrupting message",
            "/wait",
            "/status",
            "/quit",
        ),
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Queued (position 1)." in text and "Queued (position 2)." in text
    # the plain message ran before the /queue items, which kept their order
    order = [text.index(f"» you: {m}") for m in ("interrupting message", "alpha", "beta")]
    assert order == sorted(order)
    # three completed runs get a footer each; the interrupted first run gets none
    assert text.count("echo (demo agent)") == 3
    assert "Runs: 4 (completed 3, failed 0, interrupted 1, aborted 0)" in text
    assert "Queue: 0/50" in text


def test_abort_then_a_new_message_runs_normally(place):
    out = echo_console(
        place,
        stdin=lines(
            "tool a long prompt that will be aborted one two three four five",
            "/abort",
            "/wait",
            "after the abort",
            "/wait",
            "/status",
            "/quit",
        ),
    )
    assert out.returncode == 0, out.stderr
    assert "Aborted the current run." in out.stdout
    assert "after the abort" in out.stdout
    assert "aborted 1" in out.stdout and "completed 1" in out.stdout


def test_quit_and_restart_keeps_the_queue(place):
    first = echo_console(
        place,
        stdin=lines(
            "a slow prompt one two three four five six seven",
            "/queue alpha",
            "/queue beta",
            "/quit",
        ),
    )
    assert first.returncode == 0, first.stderr
    assert "2 queued prompt(s) will run when it is back" in first.stdout
    assert "» you: alpha" not in first.stdout  # nothing was dispatched while stopping
    status = spindle(place, "status")
    assert "console:main" in status.stdout
    second = echo_console(place, stdin=lines("/wait", "/status", "/quit"))
    assert second.returncode == 0, second.stderr
    out = second.stdout
    assert out.index("» you: alpha") < out.index("» you: beta")
    assert "Queue: 0/50" in out


def test_a_conversation_kept_from_another_directory_is_named_and_warned_about(place, tmp_path):
    """The console's thread keeps its conversation across runs, workdir included: started
    again elsewhere, it says where the prompts would run, and how to move them here."""
    first = echo_console(place, stdin=lines("hi", "/wait"))
    assert first.returncode == 0, first.stderr
    assert f"Started echo in {place['work']}." in first.stdout
    again = echo_console(place, stdin=lines("/quit"))
    assert f"Resumed thread main: echo in {place['work']} (1 runs so far)." in again.stdout
    assert "⚠" not in again.stdout  # the same directory: nothing to warn about
    other = tmp_path / "other"
    other.mkdir()
    elsewhere = echo_console(
        place,
        args=(
            "--workdir",
            str(other),
        ),
        stdin=lines(f"/workdir set {other}", "/wait", "/status", "/quit"),
    )
    assert elsewhere.returncode == 0, elsewhere.stderr
    out = elsewhere.stdout
    assert f"Resumed thread main: echo in {place['work']}" in out
    assert f"⚠ That is not {other}, where you started: /workdir set {other}" in out
    assert re.search(rf"Agent: echo \(\w+\) in {re.escape(str(other))}\n", out)


def test_threads_are_separate(place):
    out = echo_console(
        place,
        stdin=lines(
            "in main",
            "/wait",
            "/thread new side",
            "in side",
            "/wait",
            "/threads",
            "/thread switch main",
            "/status",
            "/quit",
        ),
    )
    assert out.returncode == 0, out.stderr
    assert "Now in thread side." in out.stdout
    assert "* side: idle, queue 0" in out.stdout and "  main: idle, queue 0" in out.stdout
    assert "Runs: 1 (completed 1" in out.stdout  # main's own status
    # Started again, the console knows the threads of its earlier run.
    again = echo_console(
        place,
        stdin=lines("/threads", "/thread switch side", "/status", "/quit"),
    )
    assert again.returncode == 0, again.stderr
    assert "  side: idle, queue 0" in again.stdout
    assert "Now in thread side." in again.stdout and "No thread side" not in again.stdout
    assert "Runs: 1 (completed 1" in again.stdout  # side's own status


def test_two_threads_answering_at_once_print_each_line_once_with_its_threads_name(place):
    words = " ".join(f"w{i}" for i in range(30))
    out = echo_console(
        place,
        stdin=lines(
            f"main says {words}",
            "/thread new side",
            f"side says {words}",
            "/wait",
            "/thread switch main",
            "/wait",
            "/quit",
        ),
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    # A second thread in use: every message says whose it is, from then on.
    assert "[main] main says" in text and "[side] side says" in text
    assert "✎" not in text  # no message printed again whole as the other streamed
    assert text.count("w29") == 2  # each answer's last word, once each


def test_a_thread_name_whose_checkpoints_would_mix_with_anothers_is_refused(place):
    # Git refs cannot hold ':', so a:b's checkpoints would go where a_b's are.
    out = echo_console(
        place, stdin=lines("/thread new a:b", "/thread new a_b", "/thread new a-b", "/quit")
    )
    assert out.returncode == 0, out.stderr
    assert "Now in thread a:b." in out.stdout and "Now in thread a-b." in out.stdout
    assert "Thread a_b would share its checkpoints with thread a:b" in out.stdout
    assert "Now in thread a_b." not in out.stdout


def test_a_worktree_of_the_start_directory_is_within_reach(place):
    """`/worktree new` puts the worktree beside the repository (``<repo>.worktrees``): the
    console allows that folder as it allows the one it started in (before, the worktree
    was made and the conversation refused there, outside the roots)."""
    work = place["work"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(
            ["git", "-c", "user.email=a@b", "-c", "user.name=a", *args], cwd=work, check=True
        )
    out = echo_console(
        place,
        stdin=lines("/worktree new feat", "/wait", "/status", "/quit"),
    )
    assert out.returncode == 0, out.stderr
    folder = f"{work}.worktrees/feat"
    assert f"Worktree feat is ready at {folder}" in out.stdout, out.stdout
    assert "outside the allowed roots" not in out.stdout
    assert re.search(rf"Agent: echo \(\w+\) in {re.escape(folder)}\n", out.stdout)


def test_a_piped_wait_waits_for_the_answer_of_a_diff_and_a_worktree_list(place):
    """/diff and /worktree list change nothing and hold no queue, but /wait waits for their
    answer (before, a piped script's /wait returned at once and the quit after it dropped
    the answer)."""
    work = place["work"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(
            ["git", "-c", "user.email=a@b", "-c", "user.name=a", *args], cwd=work, check=True
        )
    out = echo_console(place, stdin=lines("/worktree list", "/diff", "/wait", "/quit"))
    assert out.returncode == 0, out.stderr
    assert "Computing the diff" in out.stdout
    assert "Worktrees (* Spindle's):" in out.stdout, out.stdout
    assert re.search(r"No changes|Changes since", out.stdout), out.stdout


def test_a_known_command_without_what_it_takes_gets_its_usage(place):
    out = echo_console(place, stdin=lines("/queue", "/steer", "/remove", "/model", "/nosuch"))
    assert out.returncode == 0, out.stderr
    for usage in ("/queue <prompt>", "/steer <text>", "/remove <queue item id>", "/model <name>"):
        assert f"usage: {usage}" in out.stdout
    assert out.stdout.count("Unknown command") == 1  # /nosuch alone


def test_a_workdir_that_does_not_exist_is_a_usage_error(place, tmp_path):
    out = echo_console(place, stdin="/quit\n", args=("--workdir", str(tmp_path / "nowhere")))
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"--workdir {tmp_path / 'nowhere'}: no such directory." in out.stderr


def test_workdir_outside_the_allowed_roots_is_refused(place, tmp_path):
    out = echo_console(
        place,
        stdin=lines("/workdir set /etc", "/workdir set missing-dir", "/quit"),
    )
    assert "is outside the allowed roots" in out.stdout
    assert "does not exist" in out.stdout


def test_doctor_reports_and_exits_zero_without_failures(place):
    out = spindle(place, "doctor")
    assert out.returncode == 0, out.stdout + out.stderr
    for row in (
        "agent claude",
        "agent codex",
        "agent gemini",
        "agent opencode",
        "database",
        "discord token",
    ):
        assert row in out.stdout


def test_doctor_fails_on_a_corrupt_database(place):
    place["data"].mkdir()
    (place["data"] / "spindle.db").write_bytes(b"this is not sqlite at all" * 100)
    out = spindle(place, "doctor")
    assert out.returncode == 3
    assert "FAIL" in out.stdout and "spindle.db" in out.stdout


def test_run_refuses_a_corrupt_database_and_names_it(place):
    place["data"].mkdir()
    db = place["data"] / "spindle.db"
    db.write_bytes(b"garbage" * 1000)
    out = echo_console(place, stdin="/quit\n")
    assert out.returncode == 4
    assert str(db) in out.stderr
    assert db.read_bytes() == b"garbage" * 1000  # nothing overwritten


def test_run_refuses_a_database_another_process_holds_locked(place):
    # Exit 4 and what to do, not the full disk's advice (exit 5, "free some space").
    place["data"].mkdir()
    db = place["data"] / "spindle.db"
    assert echo_console(place, stdin="/quit\n").returncode == 0  # a log made
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        out = echo_console(place, stdin="/quit\n")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert out.returncode == 4, out.stderr
    assert "locked by another process" in out.stderr and str(db) in out.stderr
    assert "Free some space" not in out.stderr and "doctor" not in out.stderr


def test_a_wrong_config_value_names_the_key(place):
    place["config"].write_text("[runtime]\nqueue_limit = 0\nallowed_rots = ['~']\n")
    out = spindle(place, "run", "--no-mcp")
    assert out.returncode == 2
    assert "runtime.queue_limit" in out.stderr and "greater than or equal to 1" in out.stderr
    assert "runtime.allowed_rots: unknown key" in out.stderr


def test_init_writes_a_config_that_loads(place):
    out = spindle(place, "init")
    assert out.returncode == 0 and place["config"].exists()
    again = spindle(place, "init")
    assert again.returncode == 2 and "already exists" in again.stderr
    assert spindle(place, "doctor").returncode == 0


def test_help_on_every_command(place):
    for command in ("run", "status", "doctor", "init", "replay", "log", "mcp"):
        out = spindle(place, command, "--help")
        assert out.returncode == 0 and "usage: spindle" in out.stdout


def test_run_hosts_the_process_manager_and_logs_json_lines(place):
    import json

    out = spindle(
        place,
        "run",
        "--agent",
        "echo",
        stdin=lines("hi", "/wait", "/quit"),
        env={"SPINDLE_MCP__PORT": "0"},
    )
    assert out.returncode == 0, out.stderr
    records = [
        json.loads(line) for line in (place["data"] / "spindle.log.jsonl").read_text().splitlines()
    ]
    assert any(r["msg"].startswith("MCP process manager on http://127.0.0.1:") for r in records)
    for record in records:
        assert {"ts", "level", "logger", "msg", "thread_id", "run", "action"} <= set(record)
    assert any(r["thread_id"] == "console:main" for r in records)


def test_sigterm_mid_run_stops_cleanly_and_keeps_the_queue(place):
    import time

    proc = echo_console_process(place)
    assert proc.stdin is not None
    proc.stdin.write(lines("a b c d e f g h i j k l m n o p q r s t u v w x y z", "/queue later"))
    proc.stdin.flush()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = spindle(place, "status")
        if " running " in status.stdout or "dispatching" in status.stdout:
            break
        time.sleep(0.2)
    proc.terminate()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "1 queued prompt(s) will run when it is back" in out
    status = spindle(place, "status")
    assert "console:main" in status.stdout and " 1 " in status.stdout.splitlines()[-1]


def test_a_permission_prompt_is_answered_with_allow_and_deny(place):
    out = echo_console(
        place,
        stdin=lines(
            "please ask first",
            "/wait",
            "/allow",
            "/wait",
            "ask again please",
            "/wait",
            "/deny",
            "/wait",
            "/status",
            "/quit",
        ),
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "May I echo this?" in text
    assert "please ask first" in text.split("Allowed", 1)[1]  # echoed once allowed
    assert "(permission denied: not echoing)" in text
    assert "(empty prompt)" not in text  # the refusal is the answer, not an empty prompt
    assert "No permission is waiting" not in text
    # Discord markup is shown as a terminal can: the commands instead of buttons, plain
    # mentions and subtext (issue 11.7).
    assert "→ Accept: /allow " in text and "Deny: /deny " in text
    assert "Allowed by @you." in text
    assert "<@" not in text and "-# " not in text and "[Accept]" not in text


def test_the_console_drives_the_genuine_claude_cli(place):
    """`spindle run` through a pipe with the genuine Claude Code CLI (installed by `make test`)
    against the fake Anthropic server: a turn, a queued one, and the footer of each."""
    from threadspindle.testkit.fake_model.anthropic import FakeAnthropic

    claude = ROOT / ".agents" / "node_modules" / ".bin" / "claude"
    assert claude.exists(), "run `make agents` first"
    fake = FakeAnthropic(slow_chunks=5, slow_delay=0.1)
    fake.start()
    try:
        home = place["home"]
        place["config"].write_text(
            f"""
[agents.claude]
binary = "{claude}"
home = "{home}"
env = {{ ANTHROPIC_BASE_URL = "{fake.base_url}", ANTHROPIC_API_KEY = "sk-ant-fake-key" }}
"""
        )
        out = spindle(
            place,
            "run",
            "--no-mcp",
            "--agent",
            "claude",
            stdin=lines("say hello", "/wait", "/queue and again", "/wait", "/status", "/quit"),
            timeout=180,
        )
    finally:
        fake.stop()
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"Started claude in {place['work']}." in text
    assert text.count("Hello from fake model.") >= 2
    assert "Runs: 2 (completed 2, failed 0" in text
    assert any(r.path.startswith("/v1/messages") for r in fake.requests)


def test_console_agents_get_the_process_manager_bound_to_their_workdir(place):
    """Issue 11.7: the console's agent factory is given the runtime, so an agent's
    ``start_process`` without a ``cwd`` runs in the conversation's workdir (genuine Claude
    Code CLI, the real MCP process manager, the fake Anthropic server)."""
    from threadspindle.testkit.fake_model.anthropic import FakeAnthropic

    claude = ROOT / ".agents" / "node_modules" / ".bin" / "claude"
    assert claude.exists(), "run `make agents` first"
    fake = FakeAnthropic()
    fake.start()
    try:
        place["config"].write_text(
            f"""
[agents.claude]
binary = "{claude}"
home = "{place["home"]}"
env = {{ ANTHROPIC_BASE_URL = "{fake.base_url}", ANTHROPIC_API_KEY = "sk-ant-fake-key" }}
"""
        )
        start = 'MCPTEST start_process {"name": "where", "command": "pwd"}'
        out = spindle(
            place,
            "run",
            "--agent",
            "claude",
            stdin=lines(start, "/wait", "/allow", "/wait", "/quit"),
            env={"SPINDLE_MCP__PORT": "0"},
            timeout=180,
        )
    finally:
        fake.stop()
    assert out.returncode == 0, out.stderr
    said = [line for line in out.stdout.splitlines() if line.startswith("Tool said:")]
    assert said, out.stdout
    assert "cwd is required" not in out.stdout
    assert f'"cwd":"{os.path.realpath(place["work"])}"' in said[0].replace(" ", ""), said[0]


def test_a_prompt_left_open_by_a_killed_console_is_closed_in_the_next_one(place):
    """The next run edits what an earlier one printed (a permission prompt to close): the
    ids were ``c1``, ``c2`` ... in every run, so an earlier run's ``c3`` was unknown (an
    error, and a warning in the chat, twice) or, worse, this run's own ``c3``."""
    import signal
    import time

    first = echo_console_process(place)
    try:
        assert first.stdin is not None and first.stdout is not None
        first.stdin.write("please ask me now\n/queue after it\n/wait\n")
        first.stdin.flush()
        seen = ""
        deadline = time.monotonic() + 60
        while "/allow" not in seen and time.monotonic() < deadline:
            seen += first.stdout.readline()
        assert "/allow" in seen, seen
        # Killed once the prompt's message id is logged (just after it is printed).
        while time.monotonic() < deadline:
            with sqlite3.connect(place["data"] / "spindle.db") as db:
                keys = [
                    row[0]
                    for row in db.execute("SELECT action FROM actions WHERE kind = 'output_posted'")
                ]
            if any('"key":"console:main/r1/0"' in key for key in keys):
                break
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    out = echo_console(place, stdin=lines("/wait", "/status", "/quit"))
    assert out.returncode == 0, out.stderr
    both = out.stdout + out.stderr
    assert "unknown message" not in both and "dismiss_prompt failed" not in both, both
    assert "✎" in out.stdout, out.stdout  # the prompt, closed, printed as an edit
    assert "Spindle restarted while this run was active" in out.stdout
