"""py_modules wheels, installed the way Ray's py_modules plugin installs them.

Ray 2.60 runs `pip install <wheel> --target=<module dir>` on the node (the wheel's dependencies
come along) and puts the module dir on PYTHONPATH. The agent does the same with uv (`uv pip
install --target`), sharing the store's uv cache, so a wheel's entry is that target directory.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rtenv_cli.core.store import builders


def install_wheel(wheel: Path, target: Path, *, cache_dir: Path) -> None:
    """Install `wheel` (a file whose name is the wheel's own) into the directory `target`."""
    target.mkdir(parents=True, exist_ok=True)
    builders.run_uv([builders.uv_bin(), "pip", "install", "--quiet", "--python", sys.executable,
                     "--target", str(target), str(wheel)], builders.uv_env(cache_dir),
                    f"installing the py_modules wheel {wheel.name}")
