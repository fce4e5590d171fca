"""Benchmarks: ``make bench`` (``python -m bench``) measures speed, memory and chat-API cost.

Each section is a module with ``run(quick: bool) -> dict``; ``__main__`` runs them, writes
``bench/results.json`` and ``docs/performance.md`` (with plots). ``--quick`` runs every
section on tiny sizes: the smoke test in ``tests/bench`` uses it so the benchmarks keep
working, but no timing is ever asserted in a test.
"""
