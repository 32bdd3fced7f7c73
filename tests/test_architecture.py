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
