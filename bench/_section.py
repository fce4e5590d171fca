"""One bench section in a process of its own: ``python -m bench._section NAME [--quick]``
prints the section's results as JSON on its last stdout line.

``python -m bench`` runs every section this way, so what one section leaves behind (a
heap of 10,000 threads' objects, the GC thresholds the runtime tunes, a trio run's
leftovers) cannot slow the next one: a parser measured after the latency section ran
~35% slower in the same process than alone.
"""

from __future__ import annotations

import importlib
import json
import sys


def main(argv: list[str]) -> None:
    name, quick = argv[0], "--quick" in argv[1:]
    module = importlib.import_module(f"bench.{name}")
    result = module.run(quick)
    sys.stdout.flush()
    print("\n" + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
