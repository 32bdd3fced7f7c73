"""py_modules wheels: installed into the module dir as Ray's py_modules plugin does (real uv)."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

from rtenv_cli.core.run import RunRequest, run_command
from rtenv_cli.core.store.envs import Environments
from rtenv_cli.core.store.store import Store


def make_wheel(out_dir: Path, name: str = "tinywheel", version: str = "0.1") -> Path:
    """A real, minimal pure-Python wheel (PEP 427 layout, RECORD with hashes)."""
    files = {
        f"{name}/__init__.py": f"VALUE = 'from the {name} wheel'\n",
        f"{name}-{version}.dist-info/METADATA":
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{name}-{version}.dist-info/WHEEL":
            "Wheel-Version: 1.0\nGenerator: rtenv-tests\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{name}-{version}.dist-info/RECORD,,")
    files[f"{name}-{version}.dist-info/RECORD"] = "\n".join(record) + "\n"
    wheel = out_dir / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


def test_wheel_in_py_modules_is_installed_into_the_module_dir(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path)
    store = Store(tmp_path / "store")
    store.put_package(wheel.name, wheel)  # what `rtenv push` does: gcs://<wheel file name>
    envs = Environments(store)
    handle = envs.get_or_create({"py_modules": [f"gcs://{wheel.name}"]}, holder="h")
    assert handle.built
    out = subprocess.run([sys.executable, "-c", "import tinywheel; print(tinywheel.VALUE)"],
                         env={"PYTHONPATH": handle.py_modules[0]}, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "from the tinywheel wheel"
    again = envs.get_or_create({"py_modules": [f"file://{wheel}"]}, holder="h2")
    assert Path(again.py_modules[0], "tinywheel", "__init__.py").exists()


def test_rtenv_run_with_a_local_wheel_in_py_modules(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "runwheel")
    env_file = tmp_path / "runtime_env.yaml"
    env_file.write_text(f"py_modules: [{wheel.name}]\n")
    out = tmp_path / "out.txt"
    code = run_command(RunRequest(
        command=[sys.executable, "-c",
                 f"import runwheel; open({str(out)!r}, 'w').write(runwheel.VALUE)"],
        runtime_env=env_file, base_dir=tmp_path), notify=lambda m, h: None)
    assert code == 0
    assert out.read_text() == "from the runwheel wheel"
