"""Every adapter's one way to start its CLI: ``spawn_agent(spec)``.

The process runs under the guard (``effects/process_guard.py``: it dies with Spindle, by
SIGKILL too, and is recorded in the child registry) in a session of its own, and in the
bubblewrap sandbox when one is configured, seeing its working directory, the agent's home and
the private paths the spec exposes. Stopping, line reading and the stderr tail are
``effects.process.ManagedProcess``'s.
"""

from __future__ import annotations

from threadspindle.agents.base.launch import LaunchSpec
from threadspindle.effects.process import ManagedProcess

__all__ = ["spawn_agent"]


async def spawn_agent(
    spec: LaunchSpec, *, stdin: bool = True, stdout_bytes: int | None = None
) -> ManagedProcess:
    """Start ``spec`` (``OSError`` when it cannot: a missing binary or working directory);
    ``stdout_bytes``: room for a burst it is known to say (``launch.TURN_STDOUT_BYTES``)."""
    return await ManagedProcess.spawn(
        spec.argv,
        env=spec.env,
        cwd=spec.cwd,
        stdin=stdin,
        sandbox=spec.sandbox,
        home=spec.home,
        expose=spec.expose,
        expose_writable=spec.expose_writable,
        stdout_bytes=stdout_bytes,
    )
