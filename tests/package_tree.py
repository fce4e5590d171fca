"""The installed package's shape, built from the repository's folders for static tools.

The folders at the top of the repository are installed as ``threadspindle.<folder>``
(setup.py's package-dir mapping). Tools that read source files rather than import them
(mypy, import-linter's grimp) cannot follow setuptools' editable import hook, so
``package_tree`` lays the package out as symbolic links in a temporary directory:
``<tmp>/threadspindle/__init__.py`` -> ``namespace/__init__.py`` and
``<tmp>/threadspindle/<layer>`` -> ``<layer>/``. Put ``<tmp>`` first on the tool's path.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "threadspindle"
LAYERS = ("runtime", "agents", "ingress", "effects", "app", "testkit")


@contextmanager
def package_tree(*, copied: tuple[str, ...] = ()) -> Iterator[Path]:
    """A temporary directory holding ``threadspindle`` as links to the repository's
    folders; the layers in ``copied`` are real copies instead (a test may change them)."""
    with tempfile.TemporaryDirectory(prefix="spindle-tree-") as tmp:
        top = Path(tmp) / NAMESPACE
        top.mkdir()
        (top / "__init__.py").symlink_to(ROOT / "namespace" / "__init__.py")
        for layer in LAYERS:
            if layer in copied:
                shutil.copytree(
                    ROOT / layer, top / layer, ignore=shutil.ignore_patterns("__pycache__")
                )
            else:
                (top / layer).symlink_to(ROOT / layer, target_is_directory=True)
        yield Path(tmp)
