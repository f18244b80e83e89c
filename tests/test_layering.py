"""The import rules of docs/design.md's layering, read from the source (every import, function-level too).

Every import of the package runs down its layers (:data:`LAYERS`), so none needs to hide inside a
function; a model imports no compiled kernel or ONNX; deploy/ wraps the models and imports only them
and ops; the core's config modules import no task family (families register their own checks and
resolvers); no module of the package reaches itself through its imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "recurrent_attention"
COMPILED_KERNELS = ("ops.native",)
"""What no model imports though it is below them: the compiled kernels, reached through ops."""
BELOW_DEPLOY = ("models", "ops", "deploy")
"""What deploy/ may import of the package."""
LAYERS = (
    ("errors",),
    ("ops", "data", "migration"),
    ("models",),
    ("deploy",),
    ("runs",),
    ("results",),
    ("config",),
    ("config_checks",),
    ("tasks",),
    ("finished_run", "bench", "device"),
    ("train",),
    ("cli",),
)
"""The package's top-level parts from the bottom up: a part imports its own modules and those of the
layers below it, never one beside it or above it (docs/design.md, "Layers and the one import
direction"). ``results`` reads the records ``runs`` writes; ``finished_run`` reads a run folder back
with ``config``'s and the families' resolvers."""


def import_statements(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import in ``path`` at any depth (relative imports resolved):
    ``import a.b`` is ``("a.b", [])``, ``from a import b, c`` is ``("a", ["b", "c"])``."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    statements = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            statements.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            statements.append((module, [alias.name for alias in node.names]))
    return statements


def imported_modules(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports, and of every name imported from one."""
    names = set()
    for module, imported in import_statements(path):
        names.add(module)
        names.update(f"{module}.{name}" for name in imported)
    return names


def forbidden(path: Path, layers: tuple[str, ...]) -> list[str]:
    """The modules of ``layers`` (packages or anything in them) that ``path`` imports."""
    roots = [f"recurrent_attention.{layer}" for layer in layers]
    return sorted(n for n in imported_modules(path) if any(n == r or n.startswith(f"{r}.") for r in roots))


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the part that holds ``module`` (``recurrent_attention.<part>...``)."""
    part = module.split(".")[1]
    return next(i for i, parts in enumerate(LAYERS) if part in parts)


def package_imports(modules: dict[str, Path]) -> dict[str, list[str]]:
    """The package modules (or packages) each module imports: ``from recurrent_attention import x``
    counts as ``recurrent_attention.x``; the package's own ``__init__`` is left out."""
    imports = {}
    for name, path in modules.items():
        if name == "recurrent_attention":
            continue
        targets = []
        for module, names in import_statements(path):
            if module == "recurrent_attention":
                targets.extend(f"{module}.{n}" for n in names)
            elif module.startswith("recurrent_attention."):
                targets.append(module)
        imports[name] = targets
    return imports


def upward_imports(imports: dict[str, list[str]]) -> list[str]:
    """``"a imports b"`` for every import of another part that is not in a layer below ``a``'s."""
    return [
        f"{name} imports {module}"
        for name, targets in sorted(imports.items())
        for module in targets
        if module.split(".")[1] != name.split(".")[1] and layer_of(module) >= layer_of(name)
    ]


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {name.split(".")[1] for name in package_imports(package_modules())}
    placed = {part for layer in LAYERS for part in layer}
    assert parts == placed, (
        f"parts without a layer {sorted(parts - placed)}, layers of no part {sorted(placed - parts)}"
    )


def test_every_import_runs_down_the_layers() -> None:
    found = upward_imports(package_imports(package_modules()))
    assert not found, f"{found}: import only from the layers below (LAYERS here); move what both need down"


def test_upward_imports_on_hand_made_imports() -> None:
    imports = {
        "recurrent_attention.runs.a": ["recurrent_attention.errors", "recurrent_attention.runs.b"],
        "recurrent_attention.data.c": ["recurrent_attention.tasks"],
        "recurrent_attention.ops.e": ["recurrent_attention.migration"],
        "recurrent_attention.cli.f": ["recurrent_attention.train", "recurrent_attention.bench.g"],
    }
    assert upward_imports(imports) == [
        "recurrent_attention.data.c imports recurrent_attention.tasks",
        "recurrent_attention.ops.e imports recurrent_attention.migration",
    ]


@pytest.mark.parametrize("path", sorted((PACKAGE / "models").glob("*.py")), ids=lambda p: p.name)
def test_no_model_imports_the_compiled_kernels(path: Path) -> None:
    found = forbidden(path, COMPILED_KERNELS)
    assert not found, f"models/{path.name} imports {found}"


@pytest.mark.parametrize("path", sorted((PACKAGE / "models").glob("*.py")), ids=lambda p: p.name)
def test_no_model_imports_onnx(path: Path) -> None:
    found = sorted(
        n for n in imported_modules(path) if n.split(".")[0] in ("onnx", "onnxruntime", "onnxscript")
    )
    found += [n for n in imported_modules(path) if n.startswith("torch.onnx")]
    assert not found, f"models/{path.name} imports {found}"


@pytest.mark.parametrize("path", sorted((PACKAGE / "deploy").glob("*.py")), ids=lambda p: p.name)
def test_deploy_imports_only_models_and_ops(path: Path) -> None:
    ours = {n for n in imported_modules(path) if n.startswith("recurrent_attention.")}
    found = sorted(n for n in ours if n.split(".")[1] not in BELOW_DEPLOY)
    assert not found, f"deploy/{path.name} imports {found}"


@pytest.mark.parametrize("name", ["config.py", "config_checks.py"])
def test_the_config_core_imports_no_task_family(name: str) -> None:
    found = forbidden(PACKAGE / name, ("tasks",))
    assert not found, f"{name} imports {found}"


def package_modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its ``__init__.py``)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Which package modules each module imports. ``from a import b`` where ``a.b`` is a module
    is an import of ``a.b``; the parent packages Python initialises on the way are not counted
    (every submodule would otherwise form a circle with its package's ``__init__``)."""
    graph = {}
    for name, path in modules.items():
        targets = set()
        for module, imported in import_statements(path):
            submodules = {f"{module}.{item}" for item in imported} & modules.keys()
            targets |= submodules
            if module in modules and len(submodules) < max(len(imported), 1):  # names from the module
                targets.add(module)
        graph[name] = targets - {name}
    return graph


def find_circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` as ``[a, b, ..., a]``, or ``[]`` where there is none."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str]:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return []
        for target in sorted(graph.get(node, ())):
            circle = visit(target, [*path, node])
            if circle:
                return circle
        done.add(node)
        return []

    for start in sorted(graph):
        circle = visit(start, [])
        if circle:
            return circle
    return []


def test_find_circle_on_hand_made_graphs() -> None:
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_package_has_no_import_circle() -> None:
    circle = find_circle(import_graph(package_modules()))
    assert not circle, f"import circle {' -> '.join(circle)}: move what both need to a module below them"
