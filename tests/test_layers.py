"""The house's shape, read from the code: imports run down only (doors > agents > branches > operations >
the frame > kagent's data), no two modules import each other in a circle, and no class or function grows past
what a reader holds in mind. See docs/design.md, "The map"."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "service"

# Higher may import lower (and its own group); never the other way.
RANKS = {"doors": 6, "agents": 5, "branches": 4, "operations": 3, "frame": 2, "embedded": 2, "kagent": 1}
ROOTS = {"service.app", "service.__main__"}  # the application itself puts the house together
# None: the CLI's `serve` names the application to uvicorn ("service.app:app_from_env"), importing nothing of it.
ALLOWED_UP: set[tuple[str, str]] = set()
MAX_CLASS_LINES = 200
MAX_FUNCTION_LINES = 120


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _group(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in RANKS else "frame"


def _imports(module: str, path: Path) -> set[str]:
    """Every service module this one imports, at any depth of the file (TYPE_CHECKING and functions too)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: the package, up level - 1 steps, then the module named
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in MODULES else base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in MODULES and m != module and m != "service"}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def test_every_module_belongs_to_a_layer() -> None:
    strays = [m for m in MODULES if m not in ROOTS and m != "service" and _group(m) not in RANKS]
    assert not strays
    # the groups found are exactly the packages on disk, so a new package must be given a rank
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages <= set(RANKS), f"a package without a rank in tests/test_layers.py: {packages - set(RANKS)}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m not in ROOTS))
def test_imports_run_down(module: str) -> None:
    group = _group(module)
    up = [
        target
        for target in GRAPH[module]
        if (module, target) not in ALLOWED_UP
        and (target in ROOTS or (_group(target) != group and RANKS[_group(target)] >= RANKS[group]))
    ]
    assert not up, f"{module} ({group}) imports {up}: an arrow up or sideways between layers"


def test_no_import_circle() -> None:
    done: set[str] = set()

    def visit(node: str, stack: list[str]) -> None:
        if node in stack:
            raise AssertionError("import circle: " + " -> ".join([*stack[stack.index(node) :], node]))
        if node in done:
            return
        stack.append(node)
        for target in sorted(GRAPH[node]):
            visit(target, stack)
        stack.pop()
        done.add(node)

    for name in sorted(GRAPH):
        visit(name, [])


def test_no_package_shadows_the_standard_library() -> None:
    import sys

    names = {p.stem for p in PACKAGE.rglob("*.py")} | {p.name for p in PACKAGE.rglob("*") if p.is_dir()}
    assert not names & set(sys.stdlib_module_names)


def test_every_package_says_what_it_holds() -> None:
    for init in PACKAGE.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        where = init.relative_to(ROOT)
        assert doc and "import" in doc.lower(), f"{where} must say what it holds and what it may import"


def test_the_check_sees_an_arrow_up() -> None:
    """The rule itself can fail: a kagent module importing an operation would be caught."""
    assert RANKS[_group("service.kagent.store")] < RANKS[_group("service.operations.forking")]
    assert _group("service.identity") == "frame" and _group("service.doors.api") == "doors"


def test_classes_and_functions_stay_small() -> None:
    big = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            limit = (
                MAX_CLASS_LINES
                if isinstance(node, ast.ClassDef)
                else MAX_FUNCTION_LINES
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                else None
            )
            if limit is not None and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > limit:
                big.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1})")
    assert not big, big


MAX_REPLAY_MODULE_LINES = 450


def test_each_room_of_the_replay_stays_small() -> None:
    """The replay engine (issue 33) keeps each part in a room a reader holds in mind: no module over 450 lines."""
    rooms = sorted((PACKAGE / "agents" / "replay").glob("*.py"))
    assert len(rooms) > 5
    big = [f"{p.name} ({n})" for p in rooms if (n := len(p.read_text().splitlines())) > MAX_REPLAY_MODULE_LINES]
    assert not big, big
