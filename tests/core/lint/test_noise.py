"""Issue 15's corpus: the files people really write, each in a fresh-checkout project tree.

Every finding a case expects is marked on its line (`# <- RTE122`, several comma-separated);
every other finding fails the case, so a false positive here is a "no finding" case. The
patterns come from training repositories, Serve configs and Anyscale specs; the files are ours.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rtenv_cli.core.lint.engine import FileReport, ValidateOptions, validate_bytes

# a training project as a fresh clone and a first `pip install -e .` leave it
TREE: dict[str, str] = {
    "main.py": "from trainer import model\n",
    "trainer/__init__.py": "",
    "trainer/model.py": "X = 1\n",
    "trainer/utils/logger.py": "import logging\n",
    "configs/base.yaml": "lr: 0.1\n",
    "node_modules/left-pad/index.js": "module.exports = 1\n",
    "app.log": "started\n",
    ".git/HEAD": "ref: refs/heads/main\n",
    ".git/config": "[core]\n",
    ".venv/pyvenv.cfg": "home = /usr/bin\n",
    ".venv/lib/python3.11/site-packages/six.py": "X = 1\n",
    "__pycache__/main.cpython-311.pyc": "",
    "README.md": "# trainer\n",
}

CASES: list[tuple[str, dict[str, str], str]] = [
    # -- noise: protective excludes, defaults, secrets that are not ---------------------------
    ("stock_training_config", {}, """\
working_dir: .
excludes:
  - outputs/
  - checkpoints/
  - wandb/
  - .git
pip:
  - torch==2.3.1
  - transformers==4.41.2
env_vars:
  TOKENIZERS_PARALLELISM: "false"
  NCCL_DEBUG: WARN
  HF_HOME: /mnt/cache/hf
"""),
    ("excludes_for_folders_a_run_creates", {}, """\
working_dir: trainer
excludes: [outputs/, checkpoints/, wandb/, lightning_logs/, "*.ckpt", "*.safetensors", mlruns]
"""),
    ("excludes_rays_defaults_beside_own_patterns", {}, """\
working_dir: .
excludes:
  - .git/
  - "**/__pycache__"
  - venv
  - .venv/
  - "*.pyc"
"""),
    ("excludes_only_rays_defaults", {}, """\
working_dir: .
excludes:  # <- RTE123
  - .git/
  - "**/__pycache__"
  - venv
  - .venv/
"""),
    # -- issue 24: excludes for `ray job submit --working-dir`, placeholders, pip options -----
    ("excludes_for_job_submit_working_dir_flag", {}, """\
excludes: [outputs/, "*.ckpt"]
"""),
    ("placeholders_are_no_secrets", {}, """\
env_vars:
  OPENAI_API_KEY: your key
  HF_TOKEN: "<token>"
  WANDB_API_KEY: xxx
  DB_PASSWORD: changeme
  ANTHROPIC_API_KEY: sk-xxxxxxxxxxxxxxxx
  GITHUB_TOKEN: YOUR_GITHUB_TOKEN_HERE
"""),
    ("pip_options_a_requirements_file_holds", {}, """\
pip:
  - --extra-index-url https://download.pytorch.org/whl/cu121
  - -r https://raw.githubusercontent.com/me/proj/main/requirements.txt
  - --find-links https://example.com/wheels
  - torch==2.3.1
  - --no-deps  # <- RTE142
"""),
    ("same_version_other_extras", {}, """\
pip: ["ray[data]==2.60.0", "ray[serve]==2.60.0", "pkg[a]==1.0", "pkg[b]==1.0"]  # <- RTE140
"""),
    ("excludes_that_can_never_match", {}, """\
working_dir: .
excludes:
  - ".log"  # <- RTE122
  - "/.node_modules/"  # <- RTE122
  - "./outputs"  # <- RTE122
  - "../data"  # <- RTE122
  - "logs\\\\old"  # <- RTE122
  - "{ROOT}/configs/"  # <- RTE122
  - ".env"
  - ".cache/"
"""),
    ("secrets_by_name_and_value", {}, """\
env_vars:
  TOKENIZERS_PARALLELISM: "false"
  MAX_TOKENS: "4096"
  PROMPT_TOKEN_LIMIT: "2048"
  HF_TOKEN_PATH: /secrets/hf
  GOOGLE_APPLICATION_CREDENTIALS: /var/run/sa.json
  AUTH_TYPE: bearer
  WANDB_API_KEY: ${WANDB_API_KEY}
  OPENAI_API_KEY: "<your key here>"
  HF_TOKEN: hf_Zq8kV3mR1tY6uP0sLw2xNb  # <- RTE133
  DB_PASSWORD: hunter2  # <- RTE133
  DATABASE_URL: postgres://svc:s3cr3t@db:5432/app  # <- RTE133
  BACKUP_ID: AKIAQ3EXAMPLE7KEY1AB  # <- RTE133
  WANDB_KEY: 9f2c4e1a7b3d5f8092c4e6a1b3d5f7092c4e6a1b  # <- RTE133
"""),
    # -- RTE121 names what drops the code ------------------------------------------------------
    ("virtualenv_in_gitignore_is_no_source", {".gitignore": ".venv/\nvenv/\n"}, """\
working_dir: .
"""),
    ("gitignore_drops_code", {".gitignore": "build/\n", "build/gen.py": "X = 1\n"}, """\
working_dir: .  # <- RTE121
"""),
    ("nested_gitignore_drops_code", {"trainer/.gitignore": "utils/\n"}, """\
working_dir: .  # <- RTE121
"""),
    ("excludes_glob_drops_code", {"logging_tools/__init__.py": ""}, """\
working_dir: .
excludes: ["*log*"]  # <- RTE124
"""),
    ("excludes_naming_a_folder_drops_it_on_purpose", {"tests/test_x.py": ""}, """\
working_dir: .
excludes: [tests/]
"""),
    ("rays_default_drops_a_package_named_venv", {"venv/__init__.py": ""}, """\
working_dir: .  # <- RTE121
"""),
    # -- Anyscale specs ------------------------------------------------------------------------
    # read as an Anyscale job spec (kind `anyscale-job`): its own fields are not findings
    ("anyscale_job_config", {}, """\
name: finetune
entrypoint: python main.py
compute_config: a10g-x4
working_dir: s3://bucket/code.zip
requirements: [torch==2.3.1]
max_retries: 2
"""),
    ("anyscale_upload_path", {}, """\
working_dir: trainer
upload_path: s3://bucket/uploads  # <- RTE109
"""),
    ("requirements_without_anyscale_is_a_typo", {}, """\
requirements: [torch==2.3.1]  # <- RTE101
"""),
    # -- templates and files that are not runtime_envs -----------------------------------------
    ("jinja_value", {}, """\
working_dir: "{{ project_dir }}"  # <- RTE107
env_vars:
  RUN: ${RUN_ID}
"""),
    ("jinja_block_does_not_parse", {}, """\
{% if use_gpu %}  # <- RTE107
env_vars: {CUDA_LAUNCH_BLOCKING: "1"}
{% endif %}
"""),
    ("omegaconf_interpolation", {}, """\
env_vars:
  HF_HOME: /mnt/hf
  HF_TOKEN: ${oc.env:HF_TOKEN}  # <- RTE107
  RUN_NAME: ${experiment.name}
"""),
    ("shell_references_are_no_template", {}, """\
env_vars:
  LD_LIBRARY_PATH: /opt/lib:${LD_LIBRARY_PATH}
  CACHE: ${HOME}/cache
"""),
    ("not_a_runtime_env", {}, """\
model: bert-base  # <- RTE108
learning_rate: "3e-5"
epochs: 3
batch_size: 32
"""),
    ("a_typo_is_still_a_typo", {}, """\
env_var: {A: "1"}  # <- RTE101
pip: [requests==2.32.3]
"""),
]
MARK = re.compile(r"#\s*<-\s*([A-Z0-9, ]+)\s*$")


def _expected(text: str) -> set[tuple[str, int]]:
    out = set()
    for number, line in enumerate(text.splitlines(), 1):
        found = MARK.search(line)
        if found:
            out |= {(code.strip(), number) for code in found.group(1).split(",")}
    return out


def _validate(root: Path, extra: dict[str, str], text: str) -> FileReport:
    for rel, content in {**TREE, **extra}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    options = ValidateOptions(base_dir=root, env={})
    # the file sits in the project, as a real one does (working_dir `.` is then no surprise)
    return validate_bytes(text.replace("{ROOT}", str(root)).encode(),
                          str(root / "runtime_env.yaml"), options)


@pytest.mark.parametrize(("name", "extra", "text"), CASES, ids=[c[0] for c in CASES])
def test_corpus_case(tmp_path: Path, name: str, extra: dict[str, str], text: str) -> None:
    report = _validate(tmp_path, extra, text)
    found = {(d.code, d.line) for d in report.diagnostics}
    assert found == _expected(text), [(d.code, d.line, d.message) for d in report.diagnostics]
    assert all(d.hint for d in report.diagnostics)


def test_stock_config_has_no_warnings(tmp_path: Path) -> None:
    report = _validate(tmp_path, {}, CASES[0][2])
    assert report.valid
    assert report.diagnostics == ()  # not even an info: a stock file is no finding


def test_never_matching_patterns_hint_the_pattern_that_works(tmp_path: Path) -> None:
    text = next(t for n, _e, t in CASES if n == "excludes_that_can_never_match")
    report = _validate(tmp_path, {}, text)
    hints = {d.json_path[-1]: d.hint for d in report.diagnostics if d.code == "RTE122"}
    assert hints == {0: "write `*.log`", 1: "write `/node_modules/`", 2: "write `/outputs`",
                     3: "write it relative to the package root (a leading `/` anchors it there)",
                     4: "write `logs/old`", 5: "write `/configs/`"}


def test_rte121_names_the_source_that_drops_the_code(tmp_path: Path) -> None:
    cases = {n: (e, t) for n, e, t in CASES}
    messages = {}
    for name in ("gitignore_drops_code", "nested_gitignore_drops_code",
                 "excludes_glob_drops_code", "rays_default_drops_a_package_named_venv"):
        root = tmp_path / name
        extra, text = cases[name]
        code = "RTE124" if name.startswith("excludes") else "RTE121"  # excludes: RTE124's
        [diag] = [d for d in _validate(root, extra, text).diagnostics if d.code == code]
        messages[name] = diag.message
    assert messages["gitignore_drops_code"].startswith(".gitignore leaves Python code out")
    assert messages["nested_gitignore_drops_code"].startswith("trainer/.gitignore leaves")
    assert messages["excludes_glob_drops_code"].startswith("`*log*` also drops Python code")
    assert "`logging_tools/` (logging_tools)" in messages["excludes_glob_drops_code"]
    assert messages["rays_default_drops_a_package_named_venv"].startswith(
        "Ray's default excludes")
    assert not any(".gitignore" in m for n, m in messages.items() if "gitignore" not in n)


def test_follow_the_rte122_hint_and_ray_excludes_the_files(tmp_path: Path) -> None:
    """The fixed pattern really excludes, by Ray's own packaging code."""
    from ray._private.runtime_env.packaging import _dir_travel, _get_excludes

    report = _validate(tmp_path, {}, "working_dir: .\nexcludes: ['.log', './node_modules']\n")
    fixes = [d.hint.removeprefix("write `").removesuffix("`") for d in report.diagnostics
             if d.code == "RTE122" and d.hint]
    assert fixes == ["*.log", "/node_modules"]
    for before, after in zip([".log", "./node_modules"], fixes, strict=True):
        kept: dict[str, list[str]] = {}
        for pattern in (before, after):
            seen: list[str] = []
            _dir_travel(tmp_path, [_get_excludes(tmp_path, [pattern])],
                        lambda p, seen=seen: seen.append(p.relative_to(tmp_path).as_posix()),
                        include_gitignore=True)
            kept[pattern] = seen
        assert len(kept[after]) < len(kept[before])  # the fix drops what the typo did not


def test_follow_the_rte124_excludes_hint_and_ray_packages_the_code(tmp_path: Path) -> None:
    import json

    from ray._private.ray_constants import get_runtime_env_default_excludes
    from ray._private.runtime_env.packaging import _dir_travel, _get_excludes

    text = next(t for n, _e, t in CASES if n == "excludes_glob_drops_code")
    report = _validate(tmp_path, {"logging_tools/__init__.py": ""}, text)
    [diag] = [d for d in report.diagnostics if d.code == "RTE124"]
    added = re.findall(r"`(![^`]+)`", diag.hint or "")
    assert added == ["!/logging_tools", "!/logging_tools/**"]
    seen: list[str] = []
    excludes = [*get_runtime_env_default_excludes(), "*log*", *added]
    _dir_travel(tmp_path, [_get_excludes(tmp_path, excludes)],
                lambda p: seen.append(p.relative_to(tmp_path).as_posix()),
                include_gitignore=True)
    assert "logging_tools/__init__.py" in seen
    fixed = _validate(tmp_path, {}, "working_dir: .\nexcludes: " + json.dumps(["*log*", *added]))
    assert "RTE121" not in {d.code for d in fixed.diagnostics}
    # the negations bring logging_tools back: only what they do not cover is still named
    assert not [d for d in fixed.diagnostics if d.code == "RTE124" and "logging_tools" in d.message]
