"""Scripted fake model servers on 127.0.0.1 that the genuine agent CLIs talk to.

``base.FakeModelServer`` is the HTTP plumbing (routes, SSE, request log); one module per
API (Anthropic Messages, OpenAI Responses, OpenAI Chat Completions, Gemini) adds the routes
and the scripted replies. Scenarios are picked from the last user text, as in the fixtures'
report: ``TOOLTEST`` (a shell tool call), ``TOUCHTEST`` (a tool call needing permission),
``SLOWTEST`` (40 chunks, slowly), anything else a short answer.
"""
