"""The import graph keeps its layers and has no cycle (issue 12), and the check bites.

The rules are import-linter contracts in ``pyproject.toml`` (``[tool.importlinter]``,
explained in docs/architecture.md, "Layers"): each layer imports only the layers below it
(``app | testkit`` > ``ingress`` > ``agents`` > ``effects`` > ``runtime.live`` >
``runtime.core``; ``app`` and ``testkit`` never import each other), and no two modules or
packages import each other, directly or round a longer circle, at any depth. An import
inside a function counts like one at the top of a module; one under
``if TYPE_CHECKING:`` (never run) does not.
"""

from __future__ import annotations

from pathlib import Path

from tests.import_layers import lint_imports
from tests.package_tree import package_tree


def _plant(tree: Path, relative: str, code: str) -> None:
    path = tree / "threadspindle" / relative
    path.write_text(path.read_text() + "\n" + code if path.exists() else code)


def test_the_package_keeps_its_layers_and_has_no_cycle() -> None:
    with package_tree() as tree:
        out = lint_imports(tree)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Contracts: 2 kept, 0 broken." in out.stdout


def test_a_runtime_module_importing_an_agent_is_caught() -> None:
    with package_tree(copied=("runtime",)) as tree:
        _plant(tree, "runtime/live/planted.py", "from threadspindle.agents import base\n")
        out = lint_imports(tree)
    assert out.returncode != 0
    assert "threadspindle.runtime.live.planted -> threadspindle.agents" in out.stdout


def test_the_core_importing_the_live_runtime_is_caught() -> None:
    with package_tree(copied=("runtime",)) as tree:
        _plant(tree, "runtime/core/planted.py", "import threadspindle.runtime.live.store\n")
        out = lint_imports(tree)
    assert out.returncode != 0
    assert "threadspindle.runtime.core.planted -> threadspindle.runtime.live.store" in out.stdout


def test_production_code_importing_the_testkit_is_caught() -> None:
    with package_tree(copied=("effects",)) as tree:
        _plant(tree, "effects/planted.py", "def f():\n    import threadspindle.testkit.fake_chat\n")
        out = lint_imports(tree)
    assert out.returncode != 0
    assert "threadspindle.effects.planted -> threadspindle.testkit.fake_chat" in out.stdout


def test_a_cycle_through_a_function_level_import_is_caught() -> None:
    """app.cli imports app.exit_codes; an import of app.cli inside a function of
    app.exit_codes closes a circle (the kind issue 12 found between app, cli and
    commands_cli)."""
    with package_tree(copied=("app",)) as tree:
        _plant(tree, "app/exit_codes.py", "def f():\n    from threadspindle.app import cli\n")
        out = lint_imports(tree)
    assert out.returncode != 0
    assert "No cycles are allowed in threadspindle.app" in out.stdout


def test_a_type_checking_import_is_no_cycle() -> None:
    with package_tree(copied=("app",)) as tree:
        _plant(
            tree,
            "app/exit_codes.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from threadspindle.app import cli\n",
        )
        out = lint_imports(tree)
    assert out.returncode == 0, out.stdout + out.stderr
