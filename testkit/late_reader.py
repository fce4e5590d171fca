"""A child's stdout read only once the child has exited: how a reader far behind looks to a
CLI that says its last events and exits (the tests of ``TURN_STDOUT_BYTES``). Patched in for
``ManagedProcess.stdout_lines``."""

from __future__ import annotations

from collections.abc import AsyncIterator

from threadspindle.effects.process import LineReader, ManagedProcess

__all__ = ["lines_after_exit"]


async def lines_after_exit(proc: ManagedProcess) -> AsyncIterator[str]:
    """``proc``'s stdout lines, none read before it exited: what it said is what its pipe
    took, since a Node or Bun CLI drops the rest at exit."""
    await proc.wait()
    assert proc.proc.stdout is not None
    async for line in LineReader(proc.proc.stdout):
        yield line
