"""The lint engine's shape (code review §2.7): no import cycles in lint/ and spec/, even through
function-level imports, and no state shared through module globals or ad-hoc attributes."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import rtenv_cli

ROOT = Path(rtenv_cli.__file__).parent
PACKAGES = ("rtenv_cli.core.lint", "rtenv_cli.core.spec")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(tree: ast.AST, package: str) -> set[str]:
    """Every module imported anywhere in `tree` (functions too), except `if TYPE_CHECKING:`."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def _graph() -> dict[str, set[str]]:
    modules = {}
    for package in PACKAGES:
        folder = ROOT.parent / package.replace(".", "/")
        for path in folder.rglob("*.py"):
            modules[_module_name(path)] = path
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = _imports(ast.parse(path.read_text()), package)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycles_in_lint_and_spec() -> None:
    graph = _graph()
    assert "rtenv_cli.core.lint.context" in graph
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_rules_depend_on_context_not_engine() -> None:
    graph = _graph()
    rules = [m for m in graph if m.startswith("rtenv_cli.core.lint.rules.")]
    assert rules
    for module in rules:
        assert "rtenv_cli.core.lint.engine" not in graph[module], module


def test_no_private_imports_across_modules() -> None:
    for package in PACKAGES:
        for path in (ROOT.parent / package.replace(".", "/")).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rtenv"):
                    private = [a.name for a in node.names if a.name.startswith("_")]
                    assert not private, f"{path.name} imports {private} from {node.module}"
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                        and node.value.id == "n" and node.attr.startswith("_"):
                    raise AssertionError(f"{path.name} uses normalize.{node.attr}")


def test_walk_cache_lives_on_the_context() -> None:
    from rtenv_cli.core.lint.context import Context, FileCache, RunCache
    from rtenv_cli.core.packaging import packscan

    assert not hasattr(packscan, "forget")
    assert not hasattr(packscan, "_cache")
    assert "cache" in {f.name for f in fields(Context)}
    assert {f.name for f in fields(FileCache)} >= {"run", "scans"}
    assert {f.name for f in fields(RunCache)} >= {"walks", "uris"}  # one per validate run
    source = (ROOT / "core" / "lint" / "engine.py").read_text()
    assert "sys.modules" not in source
