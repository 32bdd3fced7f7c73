"""The core knows nothing about the terminal; heavy modules are imported lazily."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import rtenv_cli

PKG = Path(rtenv_cli.__file__).parent
TERMINAL_MODULES = {"typer", "rich", "click"}
# modules that must never be imported at module level anywhere in rtenv_cli (startup budget)
HEAVY = {"requests", "watchdog", "pynvml", "rich", "httpx", "uvicorn", "starlette", "ray"}


def _imports(path: Path, *, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_core_never_imports_terminal_libraries() -> None:
    offenders = {
        str(path.relative_to(PKG)): sorted(_imports(path, top_level_only=False) & TERMINAL_MODULES)
        for path in (PKG / "core").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_only_render_imports_rich_and_only_cli_imports_typer() -> None:
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).parts
        names = _imports(path, top_level_only=False)
        if "rich" in names:
            assert rel[0] == "render", f"{path} imports rich outside render/"
        if "typer" in names:
            assert rel[0] == "cli", f"{path} imports typer outside cli/"


def test_no_heavy_module_level_imports() -> None:
    offenders = {
        str(path.relative_to(PKG)): sorted(_imports(path, top_level_only=True) & HEAVY)
        for path in PKG.rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_help_does_not_import_heavy_modules() -> None:
    code = (
        "import sys\nfrom rtenv_cli.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {sorted(HEAVY)!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()[-1]
    assert out == "[]"


def _rtenv_imports(path: Path, modules: set[str]) -> set[str]:
    """The rtenv_cli modules `path` imports, at module level or inside functions (a lazy import
    is a dependency all the same)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.startswith("rtenv_cli"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("rtenv_cli"))
    return found & modules


def _module_graph() -> dict[str, set[str]]:
    paths = {".".join(p.relative_to(PKG.parent).with_suffix("").parts).removesuffix(".__init__"):
             p for p in PKG.rglob("*.py")}
    return {name: _rtenv_imports(path, set(paths)) - {name} for name, path in paths.items()}


def test_no_import_cycles_between_modules() -> None:
    graph = _module_graph()
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep):], dep])
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


# Which core package may import which: the direction of the core's layers, lowest first.
# `errors`, `paths`, `units`, `fsutil` and `config` are the ground every package stands on. The
# store (packages, blobs, environments on disk) sits below the transports (the local-store target
# writes into it; the agent's wire protocol lives beside its client), cache listing/gc reads both,
# and the agent's HTTP server (`agent`) stands on all three. No upward edge is allowed.
BASE = {"errors", "paths", "units", "fsutil", "config"}
ALLOWED = {
    "packaging": BASE,
    # Ray's submit path replayed (spec/pipeline.py) packages local dirs as Ray does: its URIs
    # are packaging's, so packaging sits below spec and never imports it
    "spec": BASE | {"packaging"},
    "store": BASE | {"spec", "packaging"},
    "transport": BASE | {"store"},
    "trees": BASE | {"store", "transport"},
    "cache": BASE | {"store", "transport", "trees"},
    "agent": BASE | {"store", "transport", "cache"},
    "rayplugin": BASE | {"spec", "store", "transport", "cache", "trees"},
    "explain": BASE | {"spec", "packaging", "transport", "rayplugin"},
    "lint": BASE | {"spec", "packaging", "explain", "rayplugin"},
    "push": BASE | {"spec", "packaging", "transport", "lint", "rayplugin", "trees"},
    # a Serve config or KubeRay manifest pushed whole: each runtime_env by `push`, written back
    "push_carrier": BASE | {"spec", "transport", "rayplugin", "push"},
    "watch": BASE | {"spec", "packaging", "transport", "push", "trees"},
    "run": BASE | {"spec", "packaging", "transport", "push", "lint", "explain", "store",
                   "cache"},
    # the top: checks what every other package needs (uv, cgroups, NVML, the store, clusters;
    # rtenv's Ray plugin on each node by rayplugin's verdict, the one `ray-env --check` shows)
    "doctor": BASE | {"spec", "packaging", "transport", "push", "explain", "store", "cache",
                      "watch", "run", "rayplugin"},
}


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "core" else None


def test_core_packages_depend_in_one_direction() -> None:
    edges = {(_package(a), _package(b)) for a, deps in _module_graph().items() for b in deps}
    edges = {(a, b) for a, b in edges if a and b and a != b}
    outside = {(a, b) for a, b in edges if b not in ALLOWED.get(a, BASE) | BASE}
    assert outside == set(), "a core package imports one it may not: extend ALLOWED only " \
        "in the downward direction"
    for low in BASE:  # the ground imports nothing above it
        assert not {b for a, b in edges if a == low} - BASE, low
