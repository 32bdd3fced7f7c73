from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from ray._private.thirdparty.pathspec import PathSpec as RayPathSpec

from rtenv_cli.core.errors import PackagingError
from rtenv_cli.core.packaging.ignore import check_ignore, compile_lines
from tests.core.packaging.trees import TREES, w

PATTERNS = ["*", ".*", "dir/", "dir", "/dir", "a/b", "*.py", "!keep.py", "**/x", "a/**",
            "a/**/b", "  x  ", "x\t", "\\#h", "\\!b", "/", "#c", "", "sub/*", "!*.py", "logs/",
            "!logs/keep.txt", "[ab].txt", "a?c", "**", "*/", "d/*/e", "a\\ ", "a\\", "foo/**/",
            "***", "!/", "!.git", ".git", "!a/b", "!*.py", "!sub/*", "!**/x", "!a/**/b"]
PATHS = [".", "dir", "dir/x", "a/dir", "a/dir/y", "a/b", "a/b/c", "x", "keep.py", "s/keep.py",
         ".git", ".hidden", "a/.h", "#h", "!b", "sub", "sub/f", "logs", "logs/keep.txt",
         "logs/a", "a.txt", "abc", "a/x/b", "d/q/e", "a ", "foo", "foo/bar", "a.py"]


def test_pattern_semantics_equal_rays_vendored_pathspec() -> None:
    for n in (1, 2):
        for combo in itertools.permutations(PATTERNS, n):
            ours = compile_lines([("l", c) for c in combo], ".")
            ray = RayPathSpec.from_lines("gitwildmatch", list(combo))
            for p in PATHS:
                got = ours is not None and ours.decide(p) is not None
                assert got == ray.match_file(p), (combo, p)


def test_check_ignore_sources(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    TREES["gitignore_nested"](root)
    w(root, ".rayignore", "data/a.csv\n")
    got = {d.path: d.source for d in check_ignore(
        root, ["data/big.ckpt", "sub/deep/important.tmp", "logs/keep.txt", "logs/x.log",
               ".git/HEAD", "main.py", "data/a.csv", "sub/deep/ok.py", "x.log"],
        "working_dir", excludes=["*.nothing", "*.log"], env={})}
    assert got == {
        "data/big.ckpt": ".gitignore:1:*.ckpt",
        "sub/deep/important.tmp": ".gitignore:2:*.tmp",  # a nested ! cannot undo a parent
        "logs/keep.txt": None,  # logs/ never matches the dir itself, so ! re-includes
        "logs/x.log": "excludes[1]:*.log",
        ".git/HEAD": "ray-default:.git",
        "main.py": None,
        "data/a.csv": ".rayignore:1:data/a.csv",
        "sub/deep/ok.py": "sub/.gitignore:2:*.py",
        "x.log": "excludes[1]:*.log",
    }
    assert check_ignore(root, [".git"], "py_module", env={})[0].ignored is False
    with pytest.raises(PackagingError):
        check_ignore(root, [tmp_path / "elsewhere"], "working_dir", env={})


def test_translations_are_kept_and_reused_without_pathspec(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pattern translated once is read back from the rtenv home by the next process (here: a
    fresh cache object) and matches exactly as pathspec's own translation did."""

    from rtenv_cli.core.packaging import ignore

    monkeypatch.setenv("RTENV_HOME", str(tmp_path / "home"))
    patterns = ["*.ckpt", "!keep.ckpt", "build/", "/top", "a/**/b", "\\#lit"]
    first = ignore._Translations()
    monkeypatch.setattr(ignore, "_TRANSLATIONS", first)
    fresh = [ignore._pattern(p) for p in patterns]
    first.save()
    second = ignore._Translations()
    monkeypatch.setattr(ignore, "_TRANSLATIONS", second)
    import pathspec

    monkeypatch.delattr(pathspec, "GitIgnoreSpec")  # what _pattern imports: now unimportable
    again = [ignore._pattern(p) for p in patterns]
    assert [(p.include, p.regex.pattern) for p in again] == [
        (p.include, p.regex.pattern) for p in fresh]
    with pytest.raises(ImportError):  # a pattern not seen before needs pathspec
        ignore._pattern("new-*.txt")


def test_translations_of_another_pathspec_are_not_used(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import marshal

    from rtenv_cli.core.packaging import ignore

    monkeypatch.setenv("RTENV_HOME", str(tmp_path / "home"))
    cache = ignore._Translations()
    cache.add("*.py", True, "^never$")
    cache.save()
    path = tmp_path / "home" / "ignore-patterns.marshal"
    key, data = marshal.loads(path.read_bytes())  # noqa: S302 - our own file
    path.write_bytes(marshal.dumps(((*key[:-1], key[-1] + 1), data)))  # pathspec changed
    other = ignore._Translations()
    monkeypatch.setattr(ignore, "_TRANSLATIONS", other)
    assert ignore._pattern("*.py").regex.search("x.py")
