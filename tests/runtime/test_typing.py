"""The pure core type-checks under ``mypy --strict`` (the style guide's bar for runtime/)."""

from __future__ import annotations

from tests.typecheck import mypy


def test_pure_core_is_strictly_typed():
    out = mypy(["threadspindle.runtime.core"])
    assert out.returncode == 0, out.stdout + out.stderr
