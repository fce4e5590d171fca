"""One `!` shell command: run it in the workdir under the process guard, stream its output
in bounded pieces, stop its whole process tree on a time limit or when asked.

Output (stdout and stderr, interleaved as they come) is reported every ``flush_s`` as one
piece holding at most ``piece_chars`` of the newest text: a command printing megabytes
costs a few actions a second, not one per line. Output that is not UTF-8 text (a NUL
byte, an invalid sequence) is binary: from then on only its size is reported.
"""

from __future__ import annotations

import codecs
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from threadspindle.effects.process import ManagedProcess
from threadspindle.effects.sandbox import Sandbox
from threadspindle.runtime.live.ports import AgentShell

__all__ = ["ShellLimits", "ShellOutcome", "run_in_agent", "run_shell"]


@dataclass(frozen=True)
class ShellLimits:
    timeout_s: float = 120.0
    flush_s: float = 0.5
    piece_chars: int = 2000
    stop_grace_s: float = 2.0
    shell: str = "/bin/sh"
    # The agents' sandbox (runtime.agent_sandbox): a `!` command sees what an agent sees.
    sandbox: Sandbox | None = None


@dataclass
class ShellOutcome:
    outcome: str  # "exited" | "timed_out" | "aborted" | "failed"
    exit_code: int | None
    duration_s: float
    detail: str = ""


class _Output:
    """What came in since the last report: text (bounded) and binary byte counts."""

    def __init__(self, limit: int) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self._limit = limit
        self.text = ""
        self.skipped = 0
        self.binary = False
        self.binary_bytes = 0

    def feed(self, chunk: bytes) -> None:
        if not self.binary:
            try:
                if b"\0" in chunk:
                    raise UnicodeDecodeError("utf-8", chunk, 0, 1, "NUL byte")
                self.text += self._decoder.decode(chunk)
            except UnicodeDecodeError:
                self.binary = True
        if self.binary:
            self.binary_bytes += len(chunk)
            return
        if len(self.text) > self._limit:
            self.skipped += len(self.text) - self._limit
            self.text = self.text[-self._limit :]

    def take(self) -> tuple[str, int]:
        text, binary = self.text, self.binary_bytes
        if self.skipped:
            text = f"… ({self.skipped} chars skipped)\n" + text
        self.text, self.skipped, self.binary_bytes = "", 0, 0
        return text, binary


async def run_shell(
    command: str,
    workdir: str,
    *,
    limits: ShellLimits,
    report: Callable[[str, int], Awaitable[None] | None],
    cancel: trio.CancelScope,
) -> ShellOutcome:
    """Run ``command`` with ``sh -c`` in ``workdir``; ``report(text, binary_bytes)`` gets
    the output in pieces. Cancelling ``cancel`` aborts it; the time limit stops it. Either
    way the whole process tree is stopped before this returns."""
    started = time.monotonic()
    try:
        proc = await ManagedProcess.spawn(
            [limits.shell, "-c", command], cwd=workdir, stdin=False, sandbox=limits.sandbox
        )
    except OSError as exc:
        return ShellOutcome("failed", None, 0.0, f"{type(exc).__name__}: {exc}")
    output = _Output(limits.piece_chars)

    async def flush() -> None:
        text, binary = output.take()
        if text or binary:
            result = report(text, binary)
            if result is not None:
                await result

    async def pump(stream: trio.abc.ReceiveStream | None) -> None:
        if stream is None:
            return
        while True:
            try:
                chunk = await stream.receive_some(65536)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return
            if not chunk:
                return
            output.feed(bytes(chunk))

    async def ticker() -> None:
        while True:
            await trio.sleep(limits.flush_s)
            await flush()

    outcome = "exited"
    code: int | None = None
    try:
        with cancel:
            with trio.move_on_after(limits.timeout_s) as limit:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(ticker)
                    async with trio.open_nursery() as pumps:
                        pumps.start_soon(pump, proc.proc.stdout)
                        pumps.start_soon(pump, proc.proc.stderr)
                    code = await proc.wait()
                    nursery.cancel_scope.cancel()
            if limit.cancelled_caught:
                outcome = "timed_out"
        if cancel.cancelled_caught:
            outcome = "aborted"
    finally:
        if code is None:
            with trio.CancelScope(shield=True):
                await proc.stop(grace=limits.stop_grace_s, interrupt_first=True)
                code = proc.returncode
    with trio.CancelScope(shield=True):
        await flush()
    return ShellOutcome(outcome, code if outcome == "exited" else None, time.monotonic() - started)


async def run_in_agent(
    command: str,
    agent_shell: AgentShell,
    *,
    limits: ShellLimits,
    report: Callable[[str, int], Awaitable[None] | None],
    cancel: trio.CancelScope,
) -> ShellOutcome:
    """Run ``command`` in the agent's own shell (``AgentPort.shell``) under the same rules
    as ``run_shell``: output in bounded pieces (binary counted, not shown), the time limit,
    ``cancel`` to abort; the agent stops the command when its call is cancelled."""
    started = time.monotonic()
    output = _Output(limits.piece_chars)

    async def flush() -> None:
        text, binary = output.take()
        if text or binary:
            result = report(text, binary)
            if result is not None:
                await result

    async def ticker() -> None:
        while True:
            await trio.sleep(limits.flush_s)
            await flush()

    outcome, code, detail = "exited", None, ""
    try:
        with cancel:
            with trio.move_on_after(limits.timeout_s) as limit:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(ticker)
                    code = await agent_shell(command, lambda text: output.feed(text.encode()))
                    nursery.cancel_scope.cancel()
            if limit.cancelled_caught:
                outcome = "timed_out"
        if cancel.cancelled_caught:
            outcome = "aborted"
    except Exception as exc:  # the agent refused or went away: said on the card
        outcome, detail = "failed", f"{type(exc).__name__}: {exc}"
    with trio.CancelScope(shield=True):
        await flush()
    duration = time.monotonic() - started
    return ShellOutcome(outcome, code if outcome == "exited" else None, duration, detail)
