"""A thread's session on the shared ``opencode serve``, set up: opened (new, resumed or
forked) with its permission ruleset, and the thread's MCP servers registered on the server.

``SessionSetupMixin`` is that part of ``OpencodeAdapter`` (``adapter.py``, which keeps the
state). Each thread registers its MCP servers on the shared server (``POST /mcp``, named
``<name>-<tag of url+token>``, counted in ``server.mcp_refs`` so the last thread using one
disconnects it), and its session's ruleset denies every other thread's registration of
that name: threads with different bearer tokens share one server and each sees only its own
tools. A resumed or forked session keeps its ruleset with its MCP rules swapped for this
thread's. Problems that do not stop the thread are returned (or kept in ``_problems``) and
told to the thread once it is ready.
"""

from __future__ import annotations

from typing import Any

import trio

from threadspindle.agents.base.adapter import AgentAdapter, AgentStartError
from threadspindle.agents.opencode.launch import (
    McpRegistration,
    mcp_registrations,
    session_rules,
)
from threadspindle.agents.opencode.server import OpencodeServer

__all__ = ["SessionSetupMixin"]


class SessionSetupMixin(AgentAdapter):
    """The session-setup half of ``OpencodeAdapter``. What it uses of the adapter is
    declared here and kept by the adapter (``__init__``)."""

    permission: str | None
    _mcp_names: list[str]
    _problems: list[str]

    async def _open_session(
        self, server: OpencodeServer, resume: str | None, *, fork: bool = False
    ) -> str:
        mcp = mcp_registrations(self.options)
        rules = session_rules(self.permission, mcp)
        if resume and fork:
            # /fork, /btw: a new session with a copy of the old one's messages.
            response = await server.request("POST", f"/session/{resume}/fork", json_body={})
            forked = response.json() if response.status_code == 200 else None
            if isinstance(forked, dict) and isinstance(forked.get("id"), str):
                if mcp:
                    await self._update_rules(server, forked["id"], forked, mcp)
                return str(forked["id"])
            raise AgentStartError(
                f"opencode: could not fork session {resume}: "
                f"{response.status_code} {response.text[:300]}"
            )
        if resume:
            response = await server.request("GET", f"/session/{resume}")
            if response.status_code == 200:
                if mcp:
                    await self._update_rules(server, resume, response.json(), mcp)
                return resume
        body: dict[str, Any] = {"permission": rules} if rules else {}
        response = await server.request("POST", "/session", json_body=body)
        if response.status_code != 200:
            raise AgentStartError(
                f"opencode: POST /session answered {response.status_code}: {response.text[:300]}"
            )
        session = response.json()
        if not isinstance(session, dict) or not isinstance(session.get("id"), str):
            raise AgentStartError(f"opencode: unexpected session reply {str(session)[:200]}")
        return str(session["id"])

    async def _update_rules(
        self, server: OpencodeServer, session_id: str, session: Any, mcp: list[McpRegistration]
    ) -> None:
        """A resumed session keeps its ruleset; swap its MCP rules for this thread's."""
        old = session.get("permission") if isinstance(session, dict) else None
        bases = tuple(f"{reg.base}-" for reg in mcp)
        kept = [
            r
            for r in (old if isinstance(old, list) else [])
            if isinstance(r, dict) and not str(r.get("permission", "")).startswith(bases)
        ]
        rules = kept + session_rules(None, mcp)
        response = await server.request(
            "PATCH", f"/session/{session_id}", json_body={"permission": rules}
        )
        if response.status_code != 200:
            # Not fatal: the thread goes on, told that its MCP tools may be missing.
            self._problems.append(
                f"could not give resumed session {session_id} this thread's MCP tools "
                f"({response.status_code})"
            )

    async def _register_mcp(self, server: OpencodeServer) -> list[str]:
        """Register this thread's MCP servers on the shared server; the problems, if any."""
        problems = []
        for reg in mcp_registrations(self.options):
            server.mcp_refs[reg.name] = server.mcp_refs.get(reg.name, 0) + 1
            self._mcp_names.append(reg.name)
            try:
                response = await server.request(
                    "POST", "/mcp", json_body={"name": reg.name, "config": reg.config}
                )
                status = response.json().get(reg.name) if response.status_code == 200 else None
            except Exception as exc:  # noqa: BLE001 - reported, the thread goes on without it
                problems.append(f"MCP server {reg.base!r} could not be added: {exc!r}")
                continue
            state = status.get("status") if isinstance(status, dict) else None
            if state != "connected":
                detail = status.get("error") if isinstance(status, dict) else response.text
                problems.append(f"MCP server {reg.base!r} is {state or 'unknown'}: {detail}")
        return problems

    async def _unregister_mcp(self, server: OpencodeServer) -> None:
        for name in self._mcp_names:
            server.mcp_refs[name] = server.mcp_refs.get(name, 1) - 1
            if server.mcp_refs[name] <= 0 and server.alive:
                server.mcp_refs.pop(name, None)
                with trio.move_on_after(5):
                    try:
                        await server.request("POST", f"/mcp/{name}/disconnect")
                    except Exception:  # noqa: BLE001 - the server may be going away
                        pass
        self._mcp_names = []
