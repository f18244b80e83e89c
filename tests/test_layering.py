"""The import rules of DESIGN.md's layering, read from the source (every import, function-level too).

A model never imports bench, tasks, results or runs (models/export.py once reached into bench and
runs from inside functions); the core's config modules import no task family (families register
their own checks and resolvers).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "recurrent_attention"
ABOVE_MODELS = ("bench", "tasks", "results", "runs")


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports, at any depth (relative imports resolved)."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def forbidden(path: Path, layers: tuple[str, ...]) -> list[str]:
    """The modules of ``layers`` (packages or anything in them) that ``path`` imports."""
    roots = [f"recurrent_attention.{layer}" for layer in layers]
    return sorted(n for n in imported_modules(path) if any(n == r or n.startswith(f"{r}.") for r in roots))


@pytest.mark.parametrize("path", sorted((PACKAGE / "models").glob("*.py")), ids=lambda p: p.name)
def test_no_model_imports_a_layer_above_or_beside_it(path: Path) -> None:
    found = forbidden(path, ABOVE_MODELS)
    assert not found, f"models/{path.name} imports {found}"


@pytest.mark.parametrize("name", ["config.py", "config_checks.py"])
def test_the_config_core_imports_no_task_family(name: str) -> None:
    found = forbidden(PACKAGE / name, ("tasks",))
    assert not found, f"{name} imports {found}"
