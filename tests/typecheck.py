"""``mypy --strict`` over the installed package, from the repository's folders.

The folders at the top of the repository are installed as ``threadspindle.<folder>``
(setup.py); mypy cannot follow setuptools' editable import hook, so this builds the
package as a tree of symbolic links in a temporary directory and checks that. Used by
``make lint`` and ``tests/test_typing.py``:

    python -m tests.typecheck [PACKAGE ...]     # default: the whole package
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "threadspindle"
LAYERS = ("runtime", "agents", "ingress", "effects", "app", "testkit")


def mypy(packages: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``mypy --strict`` on ``packages`` (dotted names under the namespace)."""
    with tempfile.TemporaryDirectory(prefix="spindle-typecheck-") as tmp:
        top = Path(tmp) / NAMESPACE
        top.mkdir()
        (top / "__init__.py").symlink_to(ROOT / "namespace" / "__init__.py")
        for layer in LAYERS:
            (top / layer).symlink_to(ROOT / layer, target_is_directory=True)
        args = [arg for package in packages for arg in ("-p", package)]
        return subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *args],
            cwd=tmp,
            env={**os.environ, "MYPYPATH": tmp},
            capture_output=True,
            text=True,
            timeout=600,
        )


def main() -> int:
    out = mypy(sys.argv[1:] or [NAMESPACE])
    sys.stdout.write(out.stdout + out.stderr)
    return out.returncode


if __name__ == "__main__":
    sys.exit(main())
