"""packscan: Ray's packaging walk and URI without the packaging feature (Ray is the reference)."""

from __future__ import annotations

from pathlib import Path

from rtenv_cli.core.packaging import packscan


def _tree(root: Path) -> None:
    for rel, text in {"a.py": "x", "sub/b.py": "y", "sub/.rayignore": "*.txt\n",
                      "sub/c.txt": "z", ".git/config": "g", "venv/bin/python": "p",
                      "drop/.gitignore": "*\n", "drop/d.py": "d"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_walk_applies_rays_rules(tmp_path: Path) -> None:
    _tree(tmp_path)
    walked = packscan.walk(tmp_path, "working_dir", (), {})
    assert sorted(rel for rel, _ in walked.files) == ["a.py", "sub/.rayignore", "sub/b.py"]
    assert walked.ignored_py == ("drop",)
    as_module = packscan.walk(tmp_path, "py_module", (), {})  # no default excludes
    assert ".git/config" in as_module.files_only()
    no_git = packscan.walk(tmp_path, "working_dir", (), {"RAY_RUNTIME_ENV_IGNORE_GITIGNORE": "1"})
    assert "drop/d.py" in no_git.files_only()
    override = packscan.walk(tmp_path, "working_dir", (),
                             {"RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES": ""})
    assert "venv/bin/python" in override.files_only()
    everything = packscan.walk(tmp_path, "working_dir", ["*"], {})
    assert everything.root_excluded
    assert packscan.directory_uri(everything) == "gcs://_ray_pkg_3030303030303030.zip"


def test_uris_match_ray(tmp_path: Path) -> None:
    from ray._private.runtime_env.packaging import get_uri_for_directory, get_uri_for_file

    _tree(tmp_path)
    ours = packscan.package_uri(tmp_path, kind="py_module", excludes=["*.py"])
    assert ours == get_uri_for_directory(str(tmp_path), include_gitignore=True, excludes=["*.py"])
    assert packscan.file_uri(tmp_path / "a.py") == get_uri_for_file(str(tmp_path / "a.py"))


def test_the_validator_s_walk_keeps_what_packaging_s_walk_keeps(tmp_path: Path) -> None:
    """Two walks for two contracts (see packaging/walk.py): on a tree both accept, they keep
    the same files and the same URI, under every combination of Ray's settings."""
    from rtenv_cli.core.packaging.hashing import package_uri
    from rtenv_cli.core.packaging.walk import scan_package

    tmp_path = tmp_path / "proj"  # beside the test's RTENV_HOME: a scan writes its listings there
    tmp_path.mkdir()
    _tree(tmp_path)
    (tmp_path / "sub" / "deep" / "e.py").parent.mkdir()
    (tmp_path / "sub" / "deep" / "e.py").write_text("e")
    for kind in ("working_dir", "py_module"):
        for excludes in ((), ("*.txt",), ("sub/deep",), ("!sub/c.txt",)):
            for env in ({}, {"RAY_RUNTIME_ENV_IGNORE_GITIGNORE": "1"},
                        {"RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES": ""}):
                walked = packscan.walk(tmp_path, kind, excludes, env)
                scan = scan_package(tmp_path, kind=kind, excludes=excludes, env=env)
                assert sorted(walked.files_only()) == sorted(e.relpath for e in scan.files()), (
                    kind, excludes, env)
                uri = package_uri(tmp_path, kind=kind, excludes=excludes, env=env,
                                  use_cache=False)
                assert packscan.directory_uri(walked) == uri, (kind, excludes, env)
