"""Spindle: one long-lived actor per chat thread, driving a coding-agent CLI.

Installed as ``threadspindle``; its layers are folders at the top of the repository:
``runtime`` (the pure core and the live trio runtime, with the ports it drives), ``agents``
(the agent CLIs behind the agent port), ``ingress`` (chat platforms and the console),
``effects`` (rendering, processes, the MCP process manager), ``app`` (the composition root
and the command line) and ``testkit`` (the fakes tests and benchmarks share).
"""
