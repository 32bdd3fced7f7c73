"""The forms corpus (tests/core/lint/forms_corpus): files written from what people keep (wrapped
runtime_envs, conda pip lists, secrets in URIs, Serve configs, KubeRay manifests, Anyscale
specs), each line that must carry a finding marked `# expect: CODE[, CODE]`.

Every marked finding must be reported on its line, and none of the codes this corpus is about may
be reported on an unmarked line. `# check: valid=... kind=...` states the verdict and the form.
Serve configs run Ray Serve's own schema.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from rtenv_cli.core.lint.engine import FileReport, ValidateOptions, validate_paths

CORPUS = Path(__file__).with_name("forms_corpus")
CASES = sorted(p.name for p in CORPUS.glob("*.yaml"))
# the codes the corpus is about: each one is reported on a marked line or not at all
PRECISE = frozenset({"RTE001", "RTE006", "RTE101", "RTE106", "RTE124", "RTE132", "RTE136", "RTE137",
                     "RTE138", "RTE139", "RTE140", "RTE141", "RTE143", "RTE147", "RTE150",
                     "RTE180", "RTE181", "RTE183", "RTE184", "RTE185", "RTE186"})
MiB = 1024 * 1024


def build_tree(root: Path) -> None:
    """The directories the corpus files name: a project with code beside logs, a large one."""
    files = {
        "proj/main.py": "from pkg.utils.logger import setup\n",
        "proj/pkg/__init__.py": "",
        "proj/pkg/utils/__init__.py": "",
        "proj/pkg/utils/logger/__init__.py": "def setup():\n    pass\n",
        "proj/catalog.py": "ITEMS = []\n",
        "proj/run.log": "started\n",
        "proj/logs/today.txt": "ok\n",
        "proj/tests/test_main.py": "def test():\n    pass\n",
        "big/train.py": "print('train')\n",
        "environment.yml": "name: train\ndependencies:\n  - python=3.11\n  - pip\n  - pip:\n"
                           "      - ray==2.9.3\n      - sklearn\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    with (root / "big" / "weights.bin").open("wb") as f:
        f.truncate(101 * MiB)  # sparse: cheap to create


def expectations(text: str) -> tuple[set[tuple[int, str]], dict[str, str]]:
    marks: set[tuple[int, str]] = set()
    checks: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        found = re.search(r"# expect: ([A-Z0-9, ]+)$", line)
        if found:
            marks |= {(number, code.strip()) for code in found.group(1).split(",")}
        check = re.match(r"# check: (.*)$", line)
        if check:
            checks.update(part.split("=", 1) for part in check.group(1).split())  # type: ignore[misc]
    return marks, checks


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("forms")
    build_tree(root)
    for name in CASES:
        shutil.copy(CORPUS / name, root / name)
    return root


def validate(root: Path, name: str, **options: object) -> FileReport:
    [report] = validate_paths([root / name], ValidateOptions(
        base_dir=root, env={}, **options)).files  # type: ignore[arg-type]
    return report


@pytest.mark.parametrize("name", CASES)
def test_every_marked_line_has_its_finding(tree: Path, name: str) -> None:
    marks, checks = expectations((CORPUS / name).read_text())
    report = validate(tree, name)
    found = {(d.line, d.code) for d in report.diagnostics}
    listing = "\n".join(f"  {d.line}: {d.code} {d.message}" for d in report.diagnostics)
    assert marks <= found, f"missing {sorted(marks - found)}\n{listing}"
    extra = {(line, code) for line, code in found if code in PRECISE} - marks
    assert not extra, f"unexpected {sorted(extra)}\n{listing}"
    assert str(report.valid).lower() == checks["valid"], listing
    if "kind" in checks:
        assert report.kind == checks["kind"]
    for diag in report.diagnostics:
        if diag.code in PRECISE:
            assert diag.hint, diag  # every finding says what to do


def test_wrapped_file_is_what_ray_sends(tree: Path) -> None:
    """Ray's verdict is for the file as written: one plugin field named runtime_env."""
    report = validate(tree, "wrapped_runtime_env.yaml")
    assert report.normalized is not None
    assert set(report.normalized) == {"runtime_env"}
    [wrapper] = [d for d in report.diagnostics if d.code == "RTE106"]
    assert "NOTHING" in wrapper.message
    assert "`env_vars`" in wrapper.message
    inner = [d for d in report.diagnostics if d.code == "RTE006"]
    assert inner
    assert not any(d.ray_error for d in inner)  # applies once unwrapped only
    ray_init = validate(tree, "wrapped_runtime_env.yaml", api="ray-init")
    assert "ray.init" in next(d.message for d in ray_init.diagnostics if d.code == "RTE106")


def test_upload_limit_is_the_job_submit_verdict(tree: Path) -> None:
    report = validate(tree, "upload_limit_runtime_env.yaml")
    [limit] = [d for d in report.diagnostics if d.code == "RTE150"]
    assert limit.ray_error
    assert not report.valid
    assert "413" in limit.message
    assert "weights.bin" in limit.message
    assert "--address" in (limit.hint or "")
    assert "--stage-to" in (limit.hint or "")
    [other] = [d for d in report.diagnostics if d.code == "RTE009"]
    assert "ray.init" in other.message  # ray.init uploads to the GCS: up to 512 MiB
    assert validate(tree, "upload_limit_runtime_env.yaml", api="ray-init").valid


def test_embedded_positions_are_file_positions(tree: Path) -> None:
    report = validate(tree, "kuberay_manifests.yaml")
    text = (CORPUS / "kuberay_manifests.yaml").read_text().splitlines()
    for diag in report.diagnostics:
        if diag.line is None or diag.code == "RTE009":
            continue
        line = text[diag.line - 1]
        assert diag.column is not None
        key = str(diag.json_path[-1])
        # the column points at the key or value the finding is about, in the file itself
        assert key in line or line[diag.column - 1:].strip(), (diag, line)
    typo = next(d for d in report.diagnostics if d.code == "RTE137")
    assert text[typo.line - 1][typo.column - 1:].startswith("RAY_DEBUG_POST_MORTE")
    assert typo.json_path[:3] == (1, "spec", "runtimeEnvYAML")
    one_line = validate(tree, "kuberay_rayjob_inline.yaml")
    [name] = [d for d in one_line.diagnostics if d.code == "RTE147"]
    inline = (CORPUS / "kuberay_rayjob_inline.yaml").read_text().splitlines()[name.line - 1]
    assert inline[name.column - 1:].startswith('"sklearn"')


def test_conda_file_entries_are_named(tree: Path) -> None:
    report = validate(tree, "conda_file_runtime_env.yaml")
    [name] = [d.message for d in report.diagnostics if d.code == "RTE147"]
    assert "(environment.yml: pip[1])" in name


def test_rayjob_base64_runtime_env(tmp_path: Path) -> None:
    """KubeRay's older `spec.runtimeEnv`: base64 of the YAML, findings on its line."""
    import base64

    encoded = base64.b64encode(b"pip: [cv2]\n").decode()
    file = tmp_path / "rayjob.yaml"
    file.write_text("apiVersion: ray.io/v1alpha1\nkind: RayJob\nmetadata: {name: old}\nspec:\n"
                    f"  entrypoint: python x.py\n  runtimeEnv: {encoded}\n")
    report = validate(tmp_path, "rayjob.yaml")
    assert [(d.code, d.line) for d in report.diagnostics if d.code == "RTE147"] == [("RTE147", 6)]


def test_secrets_in_uris_are_hidden_everywhere(tree: Path) -> None:
    report = validate(tree, "secret_uris_runtime_env.yaml")
    shown = " ".join(f"{d.message} {d.hint}" for d in report.diagnostics)
    for secret in ("Zx81kQpL0wmn", "9f0c1ab2c3d4e5f6", "s3cret-pass-42",
                   "ghp_Abcdefghijklmnopqrstuvwxyz0123456789"):
        assert secret not in shown
        assert secret in report.secrets  # the renderer hides them in source excerpts


def test_manifests_without_runtime_envs_say_so(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(
        "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata: {name: c}\nspec: {}\n---\n"
        "apiVersion: ray.io/v1\nkind: RayJob\nmetadata: {name: j}\nspec: {entrypoint: x}\n")
    report = validate(tmp_path, "cluster.yaml")
    assert report.valid
    assert report.kind == "kuberay"
    assert any("RayCluster c" in n for n in report.notes)
    assert any("RayJob j: no spec.runtimeEnvYAML" in n for n in report.notes)
    (tmp_path / "two.yaml").write_text("env_vars: {A: '1'}\n---\npip: [x]\n")
    [parse] = validate(tmp_path, "two.yaml").diagnostics  # not manifests: Ray's parse error
    assert parse.code == "RTE001"


def test_gcs_limit_is_the_ray_init_verdict(tmp_path: Path) -> None:
    (tmp_path / "huge").mkdir()
    with (tmp_path / "huge" / "weights.bin").open("wb") as f:
        f.truncate(513 * MiB)  # sparse
    (tmp_path / "runtime_env.yaml").write_text("working_dir: huge\n")
    report = validate(tmp_path, "runtime_env.yaml", api="ray-init")
    [limit] = [d for d in report.diagnostics if d.code == "RTE150"]
    assert limit.ray_error
    assert limit.message.startswith("Package size (513.00MiB) exceeds the maximum size")
    assert "--stage-to" in (limit.hint or "")


def test_anyscale_uploads_past_the_dashboard_limit(tree: Path) -> None:
    """Anyscale uploads a local working_dir to its own storage: 100 MiB is not its limit."""
    (tree / "anyscale_big.yaml").write_text(
        "name: big\nentrypoint: python train.py\ncompute_config: c\n"
        "runtime_env:\n  working_dir: big\n  upload_path: s3://bucket/up\n")
    report = validate(tree, "anyscale_big.yaml")
    assert report.kind == "anyscale-job"
    assert report.valid
    assert not [d for d in report.diagnostics if d.ray_error]
