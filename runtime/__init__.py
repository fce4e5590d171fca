"""The thread actor: pure state model, actions, effects, transitions, and the live runtime.

Modules whose names start with ``model``, ``actions``, ``agent_events``, ``effects``,
``guards`` and ``transitions`` are the pure core: no I/O, no clock, no randomness.
"""
