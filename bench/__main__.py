"""``python -m bench [--quick] [--only SECTION ...]``: run the benchmarks, write the report.

Writes ``bench/results.json`` (every number) and ``docs/performance.md`` (tables, the exact
command, Python/OS/CPU, plots under ``docs/perf/``). ``--quick`` runs tiny sizes and writes
into ``bench/out/`` instead, so the smoke test never overwrites the real report; ``--out
DIR`` writes both the results and the page into ``DIR``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = [
    "core",
    "render_cost",
    "durability",
    "memory",
    "latency",
    "chat_budget",
    "parsers",
    "pipe_reads",
    "wake_floor",
    "agents",
    "jetstream",
]


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "cpu": cpu,
        "cores": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _run_section(name: str, quick: bool) -> dict:
    """The section's results, measured in a fresh process (``bench/_section.py`` says why)."""
    command = [sys.executable, "-m", "bench._section", name] + (["--quick"] if quick else [])
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"section {name} exited with {done.returncode}")
    sys.stdout.write("\n".join(lines[:-1]) + ("\n" if len(lines) > 1 else ""))
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--only", nargs="*", choices=SECTIONS, help="run only these sections")
    parser.add_argument(
        "--out",
        type=Path,
        help="directory for results.json and its page (default: bench/ and docs/)",
    )
    args = parser.parse_args(argv)
    out_dir = args.out or (ROOT / "bench" / "out" if args.quick else ROOT / "bench")
    out_dir.mkdir(parents=True, exist_ok=True)
    command = "python -m bench" + (" --quick" if args.quick else "")
    command += f" --only {' '.join(args.only)}" if args.only else ""
    results: dict = {
        "machine": machine(),
        "quick": args.quick,
        "command": "make bench" if command == "python -m bench" else command,
    }
    previous = out_dir / "results.json"
    if args.only and previous.exists():
        # The page's header names the full run the other sections come from; the sections
        # run again since are listed beside it, each with when and how.
        earlier = json.loads(previous.read_text())
        rerun = {
            "sections": list(args.only),
            "date": results["machine"]["date"],
            "command": command,
        }
        results = {
            **earlier,
            "quick": args.quick,
            "machine": earlier.get("machine", results["machine"]),
            "command": earlier.get("command", results["command"]),
            "reruns": [*earlier.get("reruns", []), rerun],
        }
    else:
        results["reruns"] = []
    for name in args.only or SECTIONS:
        started = time.perf_counter()
        print(f"== {name}", flush=True)
        try:
            results[name] = _run_section(name, args.quick)
        except Exception as exc:  # one broken section must not hide the others' numbers
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"   failed: {exc}", file=sys.stderr, flush=True)
        results.setdefault("section_seconds", {})[name] = round(time.perf_counter() - started, 1)
        print(f"   {results['section_seconds'][name]} s", flush=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    from bench.report import write_report

    # The page in docs/ is the repository's: a quick run, or one written elsewhere (--out),
    # gets its own page beside its results and leaves the repository's alone.
    doc_dir = out_dir if args.quick or args.out else ROOT / "docs"
    write_report(results, doc_dir / "performance.md", doc_dir / "perf")
    errors = [n for n in SECTIONS if isinstance(results.get(n), dict) and "error" in results[n]]
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
