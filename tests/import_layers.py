"""The import graph's rules (``[tool.importlinter]`` in pyproject.toml), checked by
import-linter over the package as ``tests/package_tree.py`` lays it out. Used by
``make lint`` and ``tests/test_import_layers.py``:

    python -m tests.import_layers
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.package_tree import ROOT, package_tree


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """Run ``lint-imports`` with the repository's contracts over the package in ``tree``."""
    # The console script sits beside the interpreter (the venv's bin/).
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(lint), "--config", str(ROOT / "pyproject.toml"), "--no-cache", "--no-logo"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def main() -> int:
    with package_tree() as tree:
        out = lint_imports(tree)
    sys.stdout.write(out.stdout + out.stderr)
    return out.returncode


if __name__ == "__main__":
    sys.exit(main())
