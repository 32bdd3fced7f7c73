from __future__ import annotations

from pathlib import Path

import pytest

from rtenv_cli.core.errors import ConfigError, RtenvError
from rtenv_cli.core.push import load_input, package_runtime_env, push
from rtenv_cli.core.transport.file_target import FileTarget


def test_plans_only_local_entries(tmp_path: Path) -> None:
    plans = package_runtime_env({"working_dir": "src", "py_modules": ["lib", "s3://b/x.zip",
                                                                      "m.py"],
                                 "excludes": ["*.log"]}, tmp_path)
    assert [(p.field, p.kind, p.source) for p in plans] == [
        ("working_dir", "working_dir", tmp_path / "src"),
        ("py_modules[0]", "py_module", tmp_path / "lib"),
        ("py_modules[2]", "py_module", tmp_path / "m.py")]
    assert plans[0].excludes == ("*.log",)


def test_load_input(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no runtime_env\.yaml"):
        load_input(None, cwd=tmp_path)
    (tmp_path / "runtime_env.yaml").write_text("working_dir: .\n")
    assert load_input(None, cwd=tmp_path)[0] == {"working_dir": "."}
    (tmp_path / "bad.yaml").write_text("working_dir: [\n")
    with pytest.raises(ConfigError, match="cannot parse"):
        load_input(tmp_path / "bad.yaml")


def test_push_rewrites_and_skips_present(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("A = 1\n")
    (tmp_path / "m.py").write_text("M = 1\n")
    spec = tmp_path / "runtime_env.yaml"
    spec.write_text("working_dir: src\npy_modules: [m.py]\nexcludes: ['*.log']\n"
                    "env_vars: {X: '1'}\n")
    target = FileTarget((tmp_path / "shared").as_uri())
    first = push(spec, target=target, cwd=tmp_path)
    assert [p.uploaded for p in first.packages] == [True, True]
    assert first.runtime_env["working_dir"].startswith("file://")
    assert "excludes" not in first.runtime_env
    assert first.runtime_env["env_vars"] == {"X": "1"}
    second = push(spec, target=target, cwd=tmp_path)
    assert [p.uploaded for p in second.packages] == [False, False]
    assert second.runtime_env == first.runtime_env
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text("working_dir: src\npip: 3\n")
    with pytest.raises(ConfigError):
        push(invalid, target=target, cwd=tmp_path)


def test_sources_are_normalised_against_the_base_dir(tmp_path: Path) -> None:
    plans = package_runtime_env({"working_dir": "./sub/../../app",
                                 "py_modules": ["../libs/helper"]}, tmp_path / "proj")
    assert [p.source for p in plans] == [tmp_path / "app", tmp_path / "libs" / "helper"]


def test_an_output_inside_a_source_is_excluded_exactly(tmp_path: Path) -> None:
    """The output's name is matched literally: `out[1].yaml` must not also drop `out1.yaml`."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "main.py").write_text("M = 1\n")
    (app / "out1.yaml").write_text("kept\n")
    output = app / "out[1].yaml"
    output.write_text("working_dir: gcs://_ray_pkg_x.zip\n")
    with_output = push(app, target=None, dry_run=True, outputs=[output])
    assert with_output.packages[0].file_count == 2
    output.unlink()
    without = push(app, target=None, dry_run=True)
    assert with_output.packages[0].uri == without.packages[0].uri
    elsewhere = package_runtime_env({"working_dir": "app"}, tmp_path,
                                    outputs=[tmp_path / "pushed.yaml"])
    assert elsewhere[0].excludes == ()


@pytest.mark.parametrize("excludes", [True, 5, {"a": 1}, ["ok", 3]])
def test_excludes_of_the_wrong_type_are_refused_as_ray_refuses_them(
        tmp_path: Path, excludes: object) -> None:
    # `{"excludes": true}` was an internal TypeError in push (found by the CLI fuzz)
    with pytest.raises(ConfigError, match=r"excludes'\] must be of type List\[str\]"):
        package_runtime_env({"working_dir": ".", "excludes": excludes}, tmp_path)


def test_the_placeholder_uri_is_defined_once() -> None:
    """validate's packaging stage and push's check of the rest of a runtime_env stand a local
    package in with the same URI, defined once (spec.model)."""
    import re

    import rtenv_cli
    from rtenv_cli.core.spec.model import PLACEHOLDER_URI

    root = Path(rtenv_cli.__file__).parent
    spelled = [str(p.relative_to(root)) for p in root.rglob("*.py")
               if re.search(r"_ray_pkg_0{16}", p.read_text())]
    assert spelled == ["core/spec/model.py"]
    assert re.fullmatch(r"gcs://_ray_pkg_0{16}\.zip", PLACEHOLDER_URI)


def test_a_push_pauses_the_garbage_collector_and_leaves_it_as_it_found_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    from rtenv_cli.core.packaging import walk

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("A = 1\n")
    during: list[bool] = []
    scan = walk.scan_package

    def seen(*args: object, **kwargs: object) -> walk.PackageScan:
        during.append(gc.isenabled())
        return scan(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(walk, "scan_package", seen)
    target = FileTarget((tmp_path / "shared").as_uri())
    assert gc.isenabled()
    push(tmp_path / "src", target=target)
    assert during == [False]
    assert gc.isenabled()  # back on after the push
    (tmp_path / "gone.yaml").write_text("working_dir: gone\n")
    with pytest.raises(RtenvError, match="gone"):  # and after one that failed while paused
        push(tmp_path / "gone.yaml", target=target)
    assert gc.isenabled()
    gc.disable()
    try:  # a caller's choice to keep it off is kept
        push(tmp_path / "src", target=target)
        assert not gc.isenabled()
    finally:
        gc.enable()
