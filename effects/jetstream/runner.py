"""A runner node: hosts the thread actors of its workdir roots on the JetStream log.

``serve_runner`` does, in order:

1. takes the lease of each declared root (``spindle_root_leases``): a standby runner with
   the same roots waits here until the active one stops renewing (dies) or lets go;
2. claims every thread routed to its roots (``spindle_routes``), waiting out the previous
   owner's thread leases, and starts the runtime on the JetStream log, so start-up rebuilds
   those threads and reports an interrupted run as it does after a crash of ``spindle run``;
3. reads each root's actions from its durable consumer: a thread not held yet is claimed
   and adopted (``Runtime.adopt``); an action whose id the thread's log already has (a
   redelivery after the previous runner stored it but died before acking) is acked and
   dropped; every other is posted, and acked once it is durable, or refused with a reply
   (no quorum): a message not acked (its runner died with it, or lost the root while
   the message was on its way) is redelivered after ``INBOX_ACK_WAIT_S``; a copy that comes
   again while the first is still being stored waits for that append;
4. renders through ``RemoteRenderer`` (effects to the gateway) behind ``FencedRenderer``;
   ``/fork`` and ``/btw`` ask the gateway of the thread's home to open the new thread
   (``Transport.open_thread``) and seed it through the new thread's root (``forward``);
5. stops a thread's actor and agent when its gateway asks (``spindle.dispose.<root>``:
   the chat thread was archived or deleted).

Losing a root lease ends ``serve_runner`` with ``RootLost``: the runner's supervisor starts
it again, as a standby.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import trio
from nats.aio.msg import Msg

from threadspindle.effects.jetstream.connection import JetStream
from threadspindle.effects.jetstream.fencing import FencedRenderer, fenced_agents
from threadspindle.effects.jetstream.lease import Leases
from threadspindle.effects.jetstream.log import JetStreamLog, open_jetstream_log
from threadspindle.effects.jetstream.transport import (
    CHANNEL_HEADER,
    DISPOSE_SUBJECT,
    HOME_HEADER,
    Inbox,
    RemoteRenderer,
    Transport,
    answer_requests,
    decode_action,
    open_transport,
    root_token,
)
from threadspindle.runtime.core.model import Policy
from threadspindle.runtime.live.actor import Receipt
from threadspindle.runtime.live.ports import AdapterFactory
from threadspindle.runtime.live.registry import Runtime, open_runtime

__all__ = ["RootLost", "serve_runner", "thread_of_token"]

logger = logging.getLogger("spindle.runner")

SEEN_PER_THREAD = 10_000  # action ids remembered per thread against redeliveries


class RootLost(RuntimeError):
    """Another runner serves one of this runner's roots now."""


class _Runner:
    def __init__(
        self, conn: JetStream, transport: Transport, log: JetStreamLog, roots: Sequence[str]
    ) -> None:
        self.conn = conn
        self.transport = transport
        self.log = log
        self.roots = list(roots)
        self.seen: dict[str, deque[str]] = {}
        self.settling: set[tuple[str, str]] = set()  # (thread, action id) posted, not acked
        self.acked = 0
        self.redelivered_dropped = 0

    def remember(self, thread_id: str) -> None:
        """The action ids the thread's log holds (the tail read at claim)."""
        snapshot = self.log.snapshots().get(thread_id)
        after = snapshot[0] if snapshot is not None else 0
        ids = deque((e.action.action_id for e in self.log.read(thread_id, after)), SEEN_PER_THREAD)
        self.seen[thread_id] = ids

    async def routed_threads(self) -> list[str]:
        tokens = {root_token(root) for root in self.roots}
        entries = await self.transport.entries(self.transport.routes)
        return [
            thread_of_token(key)
            for key, root in entries.items()
            if root_token(root.decode()) in tokens
        ]

    async def consume(self, rt: Runtime, inbox: Inbox) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                for msg in await inbox.fetch(batch=64, timeout_s=1.0):
                    action = decode_action(msg)
                    thread_id = action.thread_id
                    # Where the thread's effects go: the gateway that sent this.
                    self.transport.note_home(thread_id, (msg.headers or {}).get(HOME_HEADER))
                    if not self.log.holds(thread_id):
                        # Fenced (another runner wrote it) or never held: whatever actor it
                        # has here works from a stale state; stop it, then read it afresh.
                        await rt.dispose(thread_id, "taken over by another runner")
                        await self.log.claim(thread_id)
                        rt.adopt(thread_id)
                        self.remember(thread_id)
                    mark = (thread_id, action.action_id)
                    if mark in self.settling:
                        # Redelivered (ack wait passed) while the first copy is still being
                        # stored: which of the two gets acked waits for that append.
                        await inbox.nak(msg, delay_s=1.0)
                        continue
                    seen = self.seen.setdefault(thread_id, deque(maxlen=SEEN_PER_THREAD))
                    if action.action_id in seen:
                        self.redelivered_dropped += 1
                        await inbox.ack(msg)
                        continue
                    seen.append(action.action_id)
                    self.settling.add(mark)
                    channel = (msg.headers or {}).get(CHANNEL_HEADER)
                    receipt = await rt.post(action, channel_id=channel)
                    nursery.start_soon(self.settle, inbox, msg, receipt, mark)

    async def serve_disposals(
        self, rt: Runtime, *, task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Answer ``spindle.dispose.<root>`` for each root until cancelled (started once
        subscribed): the thread's actor and agent are stopped, as ``spindle run`` stops them
        when a chat thread is archived or deleted. The actor comes back with the thread's
        next action, from its log."""

        async def dispose(subject: str, data: bytes) -> dict[str, Any]:
            thread_id = data.decode(errors="replace")
            reason = "its chat thread was archived or deleted"
            return {"disposed": await rt.dispose(thread_id, reason)}

        subjects = [DISPOSE_SUBJECT.format(root=root_token(root)) for root in self.roots]
        await answer_requests(self.conn, subjects, "runners", dispose, task_status=task_status)

    async def settle(self, inbox: Inbox, msg: Msg, receipt: Receipt, mark: tuple[str, str]) -> None:
        """Ack once the action is durable, or was refused with a reply to the user; else
        nak it. Its id stays seen: not durable means buffered until JetStream has a quorum
        again (stored then, so a later copy is rightly dropped) or fenced (the thread is
        claimed afresh on the next copy, and ``remember`` reads its ids from the log)."""
        try:
            durable = await receipt.durable()
            if durable or (receipt.note or "").startswith("refused"):
                await inbox.ack(msg)
                self.acked += 1
            else:
                await inbox.nak(msg, delay_s=1.0)
        finally:
            self.settling.discard(mark)


def thread_of_token(token: str) -> str:
    """The thread id a token stands for (``connection.thread_token`` undone)."""
    import base64

    if not token.startswith("="):
        return token
    raw = token[1:]
    return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()


async def serve_runner(
    conn: JetStream,
    *,
    name: str,
    roots: Sequence[str],
    adapter_factory: AdapterFactory,
    policy: Policy | None = None,
    ready: Callable[[Runtime], Any] | None = None,
    claim_limit: int = 32,
    **runtime_kwargs: Any,
) -> None:
    """Serve the roots until cancelled (or ``RootLost``); see the module doc.
    ``runtime_kwargs`` go to ``open_runtime`` (the MCP process manager's hooks, say)."""
    transport = await open_transport(conn)
    lost = trio.Event()
    root_leases = Leases(
        conn,
        name,
        bucket=transport.root_leases,
        key=lambda root: f"root.{root_token(root)}",
        on_lost=lambda root: lost.set(),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(root_leases.run_renewer)
        for root in roots:
            await root_leases.acquire(root)  # a standby waits here
        logger.info("runner %s serves %s", name, ", ".join(roots))
        async with open_jetstream_log(conn, name) as log:
            runner = _Runner(conn, transport, log, roots)
            limiter = trio.CapacityLimiter(claim_limit)

            async def claim(thread_id: str) -> None:
                async with limiter:
                    await log.claim(thread_id)

            async with trio.open_nursery() as claims:
                for thread_id in await runner.routed_threads():
                    claims.start_soon(claim, thread_id)
            for thread_id in log.thread_ids():
                runner.remember(thread_id)
            # /fork and /btw: the thread is opened by the gateway holding the source's
            # home, and seeded through its root's inbox, like a thread a gateway started.
            runtime_kwargs.setdefault("thread_opener", transport.open_thread)
            runtime_kwargs.setdefault("post_elsewhere", transport.forward)
            async with open_runtime(
                log=log,
                renderer_factory=lambda tid: FencedRenderer(
                    RemoteRenderer(transport, tid), log, tid
                ),
                # A runner resumed after another took over sets no agent to work.
                adapter_factory=fenced_agents(adapter_factory, log),
                policy=policy or Policy(allowed_roots=tuple(roots)),
                **runtime_kwargs,
            ) as rt:
                async with trio.open_nursery() as work:
                    await work.start(runner.serve_disposals, rt)
                    for root in roots:
                        work.start_soon(runner.consume, rt, await transport.inbox(root))
                    if ready is not None:
                        ready(rt)
                    await lost.wait()
                    work.cancel_scope.cancel()
        nursery.cancel_scope.cancel()
    raise RootLost(f"runner {name}: another runner serves one of {', '.join(roots)} now")
