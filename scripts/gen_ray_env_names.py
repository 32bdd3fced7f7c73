"""Write rtenv_cli/core/lint/rules/ray_env_names.json: every `RAY_*` environment variable name
the installed Ray reads, for RTE137 (did you mean ...?); ray_env_names.py loads it.

Sources: string literals `"RAY_..."` in Ray's Python sources (os.environ reads, env_integer /
env_bool / env_float / env_set_by_user calls, the constants that hold names; test directories and
vendored third-party code left out), and the `RAY_<config>` names compiled into `_raylet.so`
(RayConfig reads every `ray_config_def.h` entry from `RAY_<name>` in every Ray process).

Usage: `python scripts/gen_ray_env_names.py` with the Ray to describe installed (CI's: 2.60.0);
tests/core/lint/test_ray_env_names.py fails when the file differs from what it would write.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "rtenv_cli/core/lint/rules/ray_env_names.json"
SKIP_PARTS = frozenset({"tests", "thirdparty_files", "thirdparty", "_vendor", "vendor"})
LITERAL = re.compile(r"""["'](RAY_[A-Za-z0-9_]+)["']""")
COMPILED = re.compile(rb"(?<=\x00)(RAY_[A-Za-z0-9_]{3,})(?=\x00)")


def names(root: Path) -> set[str]:
    found: set[str] = set()
    for path in root.rglob("*.py"):
        if SKIP_PARTS & set(path.relative_to(root).parts):
            continue
        found.update(LITERAL.findall(path.read_text(encoding="utf-8", errors="replace")))
    for lib in root.glob("_raylet*.so"):
        found.update(m.decode() for m in COMPILED.findall(lib.read_bytes()))
    return {n for n in found if not n.endswith("_")}  # prefixes, not names


def render(version: str, found: set[str]) -> str:
    """The data file: Ray's version and the names, sorted, one a line."""
    return json.dumps({"ray_version": version, "names": sorted(found)}, indent=0) + "\n"


def current() -> str:
    """What the file should hold for the installed Ray."""
    import ray

    return render(ray.__version__, names(Path(ray.__file__).parent))


def main() -> int:
    text = current()
    OUT.write_text(text, encoding="utf-8")
    data = json.loads(text)
    print(f"{OUT}: {len(data['names'])} names from Ray {data['ray_version']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
