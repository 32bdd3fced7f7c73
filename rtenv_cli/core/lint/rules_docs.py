"""The rule table (data): code, name, severity, ruff-style docs with a bad and a fixed example."""

from __future__ import annotations

from rtenv_cli.core.lint.diagnostic import Severity
from rtenv_cli.core.lint.rule import Rule
from rtenv_cli.core.spec import model
from rtenv_cli.core.spec.construct import MANAGERS

E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO


def _and(items: list[str] | tuple[str, ...]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


# RTE005 and RTE006's docs, from the field table
_MANAGERS = _and(MANAGERS)
_ONLY_WITH = "; ".join(
    f"{_and(tuple(n for n, a in model.ONLY_WITH.items() if a - {n} == others))} only combine "
    f"with {_and(sorted(others))}"
    for others in dict.fromkeys(a - {n} for n, a in model.ONLY_WITH.items()))

_TABLE: tuple[Rule, ...] = (
    # -- what Ray itself rejects (the verdict) ---------------------------------------------------
    Rule("RTE001", "yaml-syntax", E, "the file does not parse with Ray's yaml.safe_load",
         "Parses the file exactly as `ray job submit --runtime-env` does: `yaml.safe_load` "
         "(YAML 1.1) for .yaml and .json alike, with the locale encoding.",
         "Ray fails before submitting anything. JSON files indented with tabs, several `---` "
         "documents, `!!python/...` tags and non-UTF-8 bytes are all refused.",
         '{\n\t"env_vars": {"A": "1"}\n}\n', '{\n  "env_vars": {"A": "1"}\n}\n', ray=True),
    Rule("RTE002", "document-shape", E, "the document is not a mapping with string keys",
         "Checks that the document is a mapping (or empty), that every top-level key is a string "
         "and that no key is named `self`.",
         "Ray calls `.get` on the document and then `RuntimeEnv(**doc)`: a list fails with "
         "AttributeError, `1:` or `true:` keys with 'keywords must be strings'.",
         "- pip: [requests]\n", "pip: [requests]\n", ray=True),
    Rule("RTE003", "package-source", E, "a working_dir/py_modules entry cannot be packaged",
         "Replays Ray's client-side packaging of working_dir and py_modules: types, URI schemes "
         "and extensions, local directories, archives, .py files and wheels.",
         "`ray job submit` packages local paths before anything else and stops at the first "
         "bad one; relative paths resolve against the current directory, not the file.",
         "working_dir: ./src/\npy_modules: [helpers.py]\n",
         "working_dir: ./src/\npy_modules: [./helpers_pkg/]\n", ray=True),
    Rule("RTE004", "setup-hook-type", E, "worker_process_setup_hook is not a module string",
         "Checks `worker_process_setup_hook` the way the job SDK and ray.init do.",
         "The job submission API only accepts a string (a module path); anything else is "
         "rejected at submit or fails the driver.",
         "worker_process_setup_hook: 42\n", "worker_process_setup_hook: my_pkg.setup\n",
         ray=True),
    Rule("RTE005", "conflicting-fields", E, "fields that Ray refuses to combine",
         f"{_MANAGERS} are mutually exclusive (checked on the raw values: `pip: []` counts); "
         f"{_ONLY_WITH}.",
         "RuntimeEnv(...) raises ValueError; the job is never submitted.",
         "pip: [requests]\nconda: my-env\n",
         "conda:\n  dependencies:\n    - pip\n    - pip: [requests]\n", ray=True),
    Rule("RTE006", "invalid-field-value", E, "a field value Ray's parsers reject",
         f"Runs Ray's per-field parsers ({', '.join(model.VALIDATED_ORDER)}) twice, as "
         "RuntimeEnv(...) and to_dict() do.",
         "Ray raises TypeError/ValueError without naming the line. YAML 1.1 types are the usual "
         "cause: `yes`, `012`, `12:30`, dates and bare numbers are not strings.",
         "env_vars:\n  DEBUG: yes\n  WORKERS: 4\n",
         "env_vars:\n  DEBUG: \"yes\"\n  WORKERS: \"4\"\n", ray=True),
    Rule("RTE007", "not-json-encodable", E, "a value cannot be sent as JSON",
         "Checks that the normalized runtime_env encodes as JSON the way the job SDK sends it "
         "(no NaN/Infinity, no dates, bytes or sets).",
         "requests refuses NaN (`InvalidJSONError`) and json refuses dates, `!!binary` and "
         "`!!set`; unvalidated fields let them through until the request is built.",
         "image_uri: 2024-06-01\nmy_plugin: .nan\n",
         "image_uri: \"2024-06-01\"\nmy_plugin: \"nan\"\n", ray=True),
    Rule("RTE008", "fails-at-job-start", E, "accepted at submit, but the job fails to start",
         "Reports what the client lets through and the job server or the driver then rejects: "
         "protobuf config ranges, `_validate: false` cross-field errors, falsy setup hooks.",
         "`ray job submit` prints 'submitted successfully'; the job is FAILED a moment later.",
         "config:\n  setup_timeout_seconds: true\n",
         "config:\n  setup_timeout_seconds: 900\n", ray=True),
    Rule("RTE009", "api-difference", INFO, "ray job submit and ray.init disagree on this file",
         "Runs the other entry point too (`--api ray-init` vs `job-submit`) and says when its "
         "verdict differs.",
         "The same runtime_env can be valid for ray.init and invalid for ray job submit (or the "
         "reverse): single-file py_modules, NaN, excludes as a string, setup hook types.",
         "py_modules: [helpers.py]\n", "py_modules: [./helpers_pkg/]\n"),
    # -- keys --------------------------------------------------------------------------------------
    Rule("RTE101", "unknown-field", W, "a top-level key Ray does not know (typo?)",
         "Flags top-level keys that are not runtime_env fields and suggests the closest one.",
         "Ray keeps unknown keys as plugin names and ignores them with one log line on the node: "
         "`pypi:` or `env_var:` silently does nothing.",
         "env_var:\n  A: \"1\"\n", "env_vars:\n  A: \"1\"\n"),
    Rule("RTE102", "unknown-subkey", W, "an unknown key inside config, conda or container",
         "Flags keys of `config`, a conda env dict or `container` that are not understood.",
         "Ray drops unknown config keys with a warning in the driver log: a `setup_timeout` typo "
         "silently keeps the 600 s default.",
         "config:\n  setup_timeout: 1200\n", "config:\n  setup_timeout_seconds: 1200\n"),
    Rule("RTE103", "duplicate-key", W, "the same key twice in one mapping",
         "Reports YAML keys given twice in the same mapping.",
         "YAML 1.1 (and Ray) silently keeps the last value: the first setting is lost.",
         "env_vars:\n  MODE: train\n  MODE: eval\n", "env_vars:\n  MODE: eval\n"),
    Rule("RTE104", "yaml-coercion", W, "an unquoted scalar YAML 1.1 turns into another type",
         "Flags unquoted values that YAML 1.1 reads as something else than they look: `1e3` "
         "stays a string, `012` is 10, `12:30` is 750, `yes` is true, dates become dates.",
         "The value Ray sends is not the one you wrote, or Ray rejects it with a type error that "
         "never mentions YAML.",
         "pip:\n  packages: [torch]\n  pip_version: 23.3\n",
         "pip:\n  packages: [torch]\n  pip_version: \"==23.3\"\n"),
    Rule("RTE105", "shadowed-field", W, "two spellings of the same field",
         "Flags `nsight` beside `_nsight` (and `rocprof_sys` beside `_rocprof_sys`).",
         "Ray renames the public spelling onto the internal one: one value silently wins.",
         "nsight: default\n_nsight: {t: cuda}\n", "nsight: {t: cuda}\n"),
    Rule("RTE107", "unrendered-template", E, "the file is a template: render it first",
         "Recognises Jinja/Helm `{{ }}`, `{% %}`, GitHub Actions `${{ }}` and Hydra/OmegaConf "
         "interpolations (`${oc.env:VAR}`, `${model.name}`, `${.x}`) and reports the file once, "
         "at its first placeholder, instead of the parse errors and findings its placeholders "
         "cause. Shell-style `${VAR}` is not a placeholder: Ray expands it in env_vars.",
         "Ray reads the file as it is: `{{ x }}` breaks the YAML, `${oc.env:HF_TOKEN}` reaches "
         "the workers as those characters. The file that matters is the rendered one.",
         "env_vars:\n  HF_TOKEN: ${oc.env:HF_TOKEN}\nworking_dir: \"{{ project_dir }}\"\n",
         "# render it (jinja2, `python train.py --cfg job --resolve`), then validate the output\n"
         "env_vars:\n  HF_HOME: /mnt/cache/hf\nworking_dir: ./project\n"),
    Rule("RTE108", "not-a-runtime-env", W, "most top-level keys are not runtime_env fields",
         "Reports once when a file's top-level keys are mostly foreign to a runtime_env (no "
         "field, no near-miss spelling, no Anyscale field): a config of another tool that a "
         "directory search or a name such as runtime_env.json picked up. Its keys then get no "
         "RTE101 each.",
         "Ray would take every key as an unknown plugin and apply nothing; more likely the "
         "file is not meant for Ray at all, and one finding says so better than ten typos.",
         "model: bert-base\nlearning_rate: \"3e-5\"\nepochs: 3\n",
         "# keep it out of the check (name the files, or --glob), or write a runtime_env:\n"
         "env_vars:\n  MODEL: bert-base\n"),
    Rule("RTE109", "anyscale-field", INFO, "an Anyscale job/service field, not a Ray one",
         "Recognises the fields of Anyscale job and service specs (`upload_path` in a "
         "runtime_env; `compute_config`, `cluster_env`, `ray_serve_config`, `containerfile`, "
         "... and, beside those or an `entrypoint`, `name`, `requirements`, `max_retries`, ...) "
         "and notes that Ray ignores them, instead of calling them typos (RTE101).",
         "`anyscale job submit` reads these fields; `ray job submit --runtime-env` and "
         "ray.init keep them as unknown plugins and do nothing with them.",
         "working_dir: .\nupload_path: s3://bucket/uploads\n",
         "# submit with `anyscale job submit -f job.yaml`, or for plain Ray drop the field:\n"
         "working_dir: .\n"),
    # -- paths -------------------------------------------------------------------------------------
    Rule("RTE110", "path-relative-to-file", W, "a relative path that only exists next to the file",
         "Resolves relative working_dir, py_modules, requirements and conda paths against the "
         "current directory (as Ray does) and against the file's directory.",
         "Ray resolves relative paths against the CWD of `ray job submit`, not the file: "
         "running from another directory uploads or reads the wrong thing, or fails.",
         "working_dir: src  # next to runtime_env.yaml\n",
         "working_dir: project/src  # relative to where you run ray job submit\n"),
    Rule("RTE111", "tilde-path", W, "a path starting with ~",
         "Flags `~` in working_dir, py_modules, requirement and conda paths.",
         "Ray never expands `~`: it is a directory literally named `~`.",
         "pip: ~/requirements.txt\n", "pip: /home/me/requirements.txt\n"),
    Rule("RTE112", "uploads-cwd", INFO, "working_dir `.` packages another directory than the "
         "file's",
         "Notes `working_dir: \"\"` or `.` when the command runs from another directory than "
         "the file's, or from $HOME or `/`; beside the project it is the usual way and stays "
         "silent.",
         "The package depends on where the command runs; from $HOME it can be huge.",
         "working_dir: \"\"  # validated from $HOME\n", "working_dir: ./my_project\n"),
    # -- excludes and ignore files -------------------------------------------------------------
    Rule("RTE120", "excludes-everything", W, "excludes leave nothing to upload",
         "Packs the local working_dir/py_modules with Ray's exclude rules and reports when the "
         "root itself or every file is excluded.",
         "Ray uploads an empty package and the job fails later with ModuleNotFoundError.",
         "working_dir: .\nexcludes: [\"*\"]\n", "working_dir: .\nexcludes: [\"*.ckpt\"]\n"),
    Rule("RTE121", "ignored-python-files", W, "ignore rules drop Python sources",
         "Reports .py files (and directories holding them) that a .gitignore or .rayignore "
         "inside the package, a glob in `excludes` or Ray's default excludes leave out of the "
         "package, one finding per source, naming it. Virtualenvs, conda envs and caches are "
         "not sources; an excludes pattern naming the folder itself drops it on purpose.",
         "Ray honours .gitignore inside working_dir: a `build/` or `*.py` rule silently ships "
         "code without the module you import. Each ignore file is its own list and a path any "
         "list matches is dropped, so a `!` rule must go into the file that drops the path; "
         "the hint names that file and line and gives the exact line to add.",
         "# .gitignore\nlib/\n", "# .gitignore\nlib/\n!/lib/m.py\n"),
    Rule("RTE122", "excludes-never-match", W, "an excludes pattern that can never match",
         "Flags `excludes` beside a working_dir that is no local directory (a file without "
         "working_dir may be for `ray job submit --working-dir DIR`: not flagged), and patterns "
         "no path "
         "inside a package can match: absolute paths, `./` or `~/` prefixes, `..`, `//`, "
         "backslash separators, an extension written as a name (`.log` for `*.log`) or a dot "
         "added to a folder name (`/.node_modules/`); the hint gives the pattern that works. "
         "A pattern that matches nothing *yet* (`outputs/` before the first run) is fine.",
         "Patterns are relative to each package root; the files you meant to skip are "
         "uploaded anyway.",
         "working_dir: .\nexcludes: [/home/me/proj/data/, \".log\"]\n",
         "working_dir: .\nexcludes: [/data/, \"*.log\"]\n"),
    Rule("RTE123", "excludes-redundant-default", INFO, "an excludes list Ray's defaults cover",
         "Notes, once, an excludes list whose every pattern only matches what Ray's default "
         "excludes (.git, .venv, venv, __pycache__; RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES) "
         "already drop from every working_dir. A default repeated beside patterns of your own "
         "is common and harmless: not reported.",
         "Harmless, but the list reads as if those folders were uploaded without it.",
         "working_dir: .\nexcludes: [.git, \"**/__pycache__\"]\n",
         "working_dir: .\n"),
    # -- env_vars ----------------------------------------------------------------------------------
    Rule("RTE130", "overridden-visibility-var", W, "an accelerator visibility variable Ray sets",
         "Flags CUDA_VISIBLE_DEVICES and the other accelerator visibility variables.",
         "Ray overwrites them in every task or actor that is assigned accelerators (unless "
         "RAY_EXPERIMENTAL_NOSET_* is set): your value silently disappears.",
         "env_vars:\n  CUDA_VISIBLE_DEVICES: \"0,1\"\n",
         "# request GPUs instead: @ray.remote(num_gpus=2)\nenv_vars: {}\n"),
    Rule("RTE131", "omp-num-threads", INFO, "OMP_NUM_THREADS set for every worker",
         "Notes OMP_NUM_THREADS in env_vars.",
         "Ray sets OMP_NUM_THREADS to the task's CPU count only when it is unset: a fixed value "
         "oversubscribes or starves workers of other sizes.",
         "env_vars:\n  OMP_NUM_THREADS: \"32\"\n", "# let Ray derive it from num_cpus\n"),
    Rule("RTE132", "pythonpath", W, "PYTHONPATH set in env_vars",
         "Flags PYTHONPATH values that drop the worker's own PYTHONPATH.",
         "Ray puts working_dir and py_modules on PYTHONPATH; a value without `$PYTHONPATH` "
         "can hide the cluster's paths.",
         "env_vars:\n  PYTHONPATH: /opt/lib\n",
         "env_vars:\n  PYTHONPATH: /opt/lib:$PYTHONPATH\n"),
    Rule("RTE133", "secret-in-env-vars", W, "a value that looks like a secret",
         "Flags env_vars whose value has a known credential shape (hf_, sk-, ghp_, AKIA, xox*-, "
         "JWTs, private keys, URLs with a password), or whose name says token, key, secret or "
         "password while the value looks like one: not a boolean, number, path, plain URL, "
         "${VAR} reference or placeholder (`your key`, `<token>`, `xxxx`, `changeme`, even in a "
         "credential's shape: `hf_xxxx`), and for tokens and keys long and random enough. "
         "Well-known settings such as TOKENIZERS_PARALLELISM or *_TOKEN_LIMIT are no secrets. "
         "Shown redacted.",
         "runtime_envs are stored in the GCS, shown in the dashboard and in job logs.",
         "env_vars:\n  HF_TOKEN: hf_abcdefghijklmnop\n",
         "# inject secrets from the cluster's environment or a secret manager\n"),
    Rule("RTE134", "env-var-expansion", W, "an env_vars reference Ray will not resolve as written",
         "Applies Ray's expansion rule (keys in sorted order, ${VAR}/$VAR against the worker "
         "environment and the keys already set; unset ${UPPER} becomes empty) and shows the "
         "value the worker really gets. A variable the file does not set is read from the "
         "node's environment, which a file cannot see: that is an info, not a warning.",
         "A reference to a key that sorts later, or to a variable the worker does not have, "
         "comes out empty or literal.",
         "env_vars:\n  A_PATH: $ROOT/lib\n  ROOT: /opt/app\n",
         "env_vars:\n  A_PATH: /opt/app/lib\n  ROOT: /opt/app\n"),
    Rule("RTE135", "invalid-env-var-name", W, "an env var name the worker cannot set",
         "Flags empty names and names containing `=` or NUL, and values over 128 KiB.",
         "Ray accepts them at submit; the worker process then fails to start.",
         "env_vars:\n  \"A=B\": x\n", "env_vars:\n  A: B=x\n"),
    # -- requirements ------------------------------------------------------------------------------
    Rule("RTE140", "ray-version-pin", W, "`ray` itself in pip/uv requirements",
         "Flags `ray` in pip/uv requirements and, when it pins another version than the "
         "cluster's (the installed Ray, or --ray-version), says what happens on the cluster. "
         "A warning: Ray accepts the file at submit.",
         "Each node installs the pinned Ray into the job's environment, then refuses to change "
         "Ray's version ('Changing the ray version is not allowed'): runtime_env setup fails "
         "for every worker, after a full install.",
         "pip: [\"ray[data]==2.9.0\", pandas]\n", "pip: [pandas]\n"),
    Rule("RTE141", "duplicate-requirement", W, "the same package listed twice",
         "Flags a package listed more than once (with the same or different specifiers). The "
         "same version with other extras (`pkg[a]==1.0`, `pkg[b]==1.0`) is no conflict: pip "
         "merges the extras.",
         "Ray only drops exact duplicates; conflicting pins fail on every node at install time.",
         "pip: [\"numpy==1.26\", \"numpy>=2\"]\n", "pip: [\"numpy>=2\"]\n"),
    Rule("RTE142", "pip-option-as-package", W, "a pip option written as a package",
         "Flags pip options in the packages list that a requirements file cannot hold "
         "(`--no-deps`, `--upgrade`), and `-r`/`-c` with a local file. Options pip reads in a "
         "requirements file (`--extra-index-url URL`, `--find-links`, `-r https://...`) are "
         "fine: Ray writes the list to one.",
         "pip refuses the generated requirements file on every node; a local `-r` file is "
         "looked for on the node, where it does not exist.",
         "pip: [\"--no-deps\", torch]\n",
         "pip:\n  packages: [torch]\n  pip_install_options: [--no-deps]\n"),
    Rule("RTE143", "git-requirement", W, "a git+ requirement",
         "Flags `git+` URLs in requirements.",
         "Every node needs git and network access to the repository, and the install is not "
         "cached by version.",
         "pip: [\"git+https://github.com/me/lib\"]\n", "pip: [\"mylib==1.4.2\"]\n"),
    Rule("RTE144", "unpinned-heavy-package", W, "a large package without a pinned version",
         "Flags torch, tensorflow, jax and similar without `==`.",
         "Nodes that install at different times resolve different versions (and download GBs).",
         "pip: [torch]\n", "pip: [\"torch==2.4.1\"]\n"),
    Rule("RTE145", "requirements-file-noise", INFO, "comments or blank lines in requirements",
         "Notes comment and blank lines in a requirements file Ray reads.",
         "Ray reads the file as `text.strip().split('\\n')`: comments become 'packages' in the "
         "runtime_env (and change its hash).",
         "# requirements.txt\n# deps\nrequests\n", "# requirements.txt\nrequests\n"),
    Rule("RTE146", "pip-version-operator", W, "pip_version/uv_version without an operator",
         "Flags versions without `==`, `>=`, ... .",
         "Ray installs `pip<pip_version>`: `23.3` becomes `pip23.3`, an invalid requirement.",
         "pip:\n  packages: [x]\n  pip_version: \"23.3\"\n",
         "pip:\n  packages: [x]\n  pip_version: \"==23.3\"\n"),
    Rule("RTE148", "installs-own-project", W, "a pip entry that installs the working_dir's "
         "own project",
         "Flags `-e .` / `.` in pip/uv requirements, and the project name of the local "
         "working_dir's pyproject.toml.",
         "The node runs pip in an empty directory of its own: `-e .` fails there. The project's "
         "name fetches another copy from the index (another version, or none), while the "
         "working_dir is already on every worker's sys.path.",
         "working_dir: .\npip: [\"-e .\", numpy]\n", "working_dir: .\npip: [numpy]\n"),
    Rule("RTE149", "stray-quote", W, "a quote inside a requirement",
         "Flags a requirement whose name, version or URL holds a quote (`...#egg=tool\"`); "
         "quotes in environment markers (`; python_version < \"3.12\"`) are fine.",
         "pip reads the quote as part of the requirement and the install fails on every node.",
         "pip: ['git+https://github.com/me/tool.git#egg=tool\"']\n",
         "pip: ['git+https://github.com/me/tool.git#egg=tool']\n"),
    # -- size -----------------------------------------------------------------------------------
    Rule("RTE150", "package-too-large", E, "a local package over the upload limit",
         "Sums what Ray would package (its exclude rules) against the 100 MiB job-submit limit "
         "and the 512 MiB package limit, naming the largest files and directories.",
         "Ray finds out after zipping, with an HTTP 413/500 or a 'Package size exceeds' error.",
         "working_dir: .   # with checkpoints/ (3 GiB)\n",
         "working_dir: .\nexcludes: [checkpoints/, \"*.safetensors\"]\n", ray=True),
    Rule("RTE151", "large-package", W, "a local package close to the limit, or large files",
         "Warns from 50 MiB (job-submit) or 256 MiB, and for single files over 10 MiB.",
         "Every job start uploads it again when anything changes; big files slow every node.",
         "working_dir: .   # wandb/ 80 MiB\n", "working_dir: .\nexcludes: [wandb/]\n"),
    # -- fields Ray passes through ------------------------------------------------------------
    Rule("RTE170", "unchecked-field-value", W, "a value Ray accepts at submit, the node rejects",
         "Checks the fields Ray never validates on the client: image_uri, py_executable, "
         "java_jars, container, nsight, conda dicts and file names, reserved env vars.",
         "The job is submitted, scheduled, then fails in runtime_env setup on the node, after "
         "up to three timeouts.",
         "nsight: on\nconda: environment.YML\n",
         "nsight: default\nconda: environment.yml\n"),
    Rule("RTE171", "node-only-uri", W, "a URI that is only checked on the node",
         "Flags working_dir/py_modules with Ray's internal pip://, uv://, conda:// schemes and "
         "local:// directories that must exist on every node.",
         "Nothing checks them at submit; the job fails when a worker starts.",
         "working_dir: local:///opt/app\n", "working_dir: s3://bucket/app.zip\n"),
    Rule("RTE172", "silent-precedence", W, "one field silently overrides another",
         "Flags py_executable beside pip/uv/conda, and nsight/rocprof_sys beside py_executable.",
         "Ray's node plugins run in a fixed order and the later one wins without a word: the "
         "packages you listed are not used.",
         "pip: [torch]\npy_executable: /usr/bin/python3\n", "pip: [torch]\n"),
    # -- resolution --------------------------------------------------------------------------------
    Rule("RTE160", "requirements-do-not-resolve", E, "`uv pip compile` cannot resolve them",
         "With `--resolve`, runs `uv pip compile` on the pip/uv requirements.",
         "Ray only installs on the node, after the job is submitted; an unsatisfiable set "
         "fails there after minutes.",
         "pip: [\"numpy==1.26\", \"pandas==3.0\"]\n", "pip: [\"numpy>=2\", \"pandas==3.0\"]\n"),
    Rule("RTE161", "resolve-unavailable", W, "`--resolve` could not reach a package index",
         "Reports that resolution was skipped (no network or no uv).",
         "The requirements were not checked.",
         "pip: [requests]\n", "pip: [requests]\n"),
    # -- file forms, and what people wrap wrongly ---------------------------------------------
    Rule("RTE106", "runtime-env-wrapper", E, "a file holding only `runtime_env:`",
         "Flags a file whose only key is `runtime_env:` (a job spec without `entrypoint:`), and "
         "checks the fields inside as they would apply once unwrapped.",
         "`ray job submit --runtime-env FILE` (and ray.init with the file's contents) takes "
         "`runtime_env` as one unknown plugin field: no env_vars, pip or working_dir reach the "
         "job, yet Ray stores the whole value, secrets included, in the GCS.",
         "runtime_env:\n  env_vars:\n    MODE: train\n",
         "env_vars:\n  MODE: train\n"),
    # -- excludes dropping code ---------------------------------------------------------------
    Rule("RTE124", "excludes-drop-sources", W, "an excludes wildcard that drops Python code",
         "Flags excludes patterns with a wildcard meant for other files (`**/*log*`, `*tmp*`) "
         "that also drop .py files, and names the modules that will be missing. Patterns that "
         "name Python (`*.py`) or a folder left out on purpose (`tests/`, `docs/`) are not "
         "reported. Any pattern that drops a file the packaged code opens by name (a string "
         "literal passed to a call: `open(\"sft_config.yaml\")`, `Path(\"data/x.csv\")`) is "
         "reported too.",
         "Ray leaves out every path a pattern matches, directories included: `**/*log*` "
         "drops `pkg/utils/logger/` with the log files, and `import pkg.utils.logger` fails on "
         "every worker.",
         "working_dir: .\nexcludes: [\"**/*log*\"]\n",
         "working_dir: .\nexcludes: [\"*.log\", /logs/]\n"),
    # -- env_vars names -----------------------------------------------------------------------
    Rule("RTE136", "path-var-overwritten", W, "PATH or LD_LIBRARY_PATH without the node's value",
         "Flags PATH and LD_LIBRARY_PATH values that do not include the node's own value "
         "(`$PATH`, `${LD_LIBRARY_PATH}`); PYTHONPATH is RTE132's.",
         "Ray sets env_vars as given (expanding `$VAR` against the node): a value without the "
         "node's own replaces it, so the worker no longer finds python, ray or nvidia-smi, or "
         "the CUDA and NCCL libraries the image puts on LD_LIBRARY_PATH.",
         "env_vars:\n  LD_LIBRARY_PATH: /opt/mylib\n",
         "env_vars:\n  LD_LIBRARY_PATH: /opt/mylib:$LD_LIBRARY_PATH\n"),
    Rule("RTE137", "env-var-name-typo", W, "a misspelt well-known variable name",
         "Compares env_vars names with the prefixes RAY_, NCCL_, CUDA_, HF_, TRANSFORMERS_ and "
         "WANDB_ against the names those tools read (every RAY_* name Ray 2.60.0 reads, from "
         "its sources and its compiled config: scripts/gen_ray_env_names.py) and suggests the "
         "one meant; a name one or two edits away, or in the wrong case, is reported.",
         "Nothing reads a misspelt name: the setting silently keeps its default.",
         "env_vars:\n  RAY_DEBUG_POST_MORTE: \"1\"\n",
         "env_vars:\n  RAY_DEBUG_POST_MORTEM: \"1\"\n"),
    Rule("RTE138", "driver-only-setting", W, "a Ray setting the runtime_env's workers never read",
         "Flags Ray settings that only another process reads: RAY_ADDRESS (the submitter; Ray "
         "sets it for a job's driver itself, job_supervisor.py), RAY_RUNTIME_ENV_IGNORE_GITIGNORE "
         "(the process that packages, dashboard_sdk.py and worker.py), the raylet's memory "
         "monitor settings (RAY_memory_usage_threshold, RAY_memory_monitor_refresh_ms), the "
         "dashboard's RAY_GRAFANA_HOST, RAY_GRAFANA_IFRAME_HOST and RAY_PROMETHEUS_NAME "
         "(metrics_head.py), and the agent's RAY_RUNTIME_ENV_<PLUGIN>_CACHE_SIZE_GB "
         "(runtime_env/plugin.py).",
         "They are read at `ray start` or on the submitting machine, before any worker starts: "
         "in env_vars they change nothing.",
         "env_vars:\n  RAY_memory_usage_threshold: \"0.98\"\n",
         "# RAY_memory_usage_threshold=0.98 ray start ...  (on every node)\nenv_vars: {}\n"),
    Rule("RTE139", "secret-in-uri", W, "credentials inside a URI",
         "Flags passwords (`https://user:pass@host`), tokens as user names "
         "(`https://ghp_...@github.com`) and credential query parameters (`?token=`, "
         "`X-Amz-Signature`, `sig=`) in working_dir, py_modules, pip/uv requirements and "
         "options (requirements files too), conda, java_jars and images; shown redacted.",
         "runtime_envs are stored in the GCS and shown in the dashboard, the job's info and "
         "logs: the credential leaks to everyone who can see the cluster.",
         "pip: [\"git+https://x:ghp_abc123@github.com/me/lib.git\"]\n",
         "# a git credential helper or deploy key on the nodes\n"
         "pip: [\"git+https://github.com/me/lib.git@v1.4.2\"]\n"),
    Rule("RTE147", "import-name-as-package", E, "an import name that is not an installable "
         "package",
         "Flags requirements that name a module rather than the package providing it (`sklearn`, "
         "`cv2`, `PIL`, `yaml`, `skimage`, `pytorch`, `tensorflow-gpu`), in pip and uv lists "
         "and in the pip lists of a conda environment.",
         "pip finds no such package, or installs a stub that refuses to install: the runtime_env "
         "fails on every node, after the job is submitted.",
         "pip: [sklearn, cv2]\n", "pip: [scikit-learn, opencv-python-headless]\n"),
    # -- Serve configs ------------------------------------------------------------------------
    Rule("RTE180", "serve-schema", E, "Ray Serve's schema refuses the Serve config",
         "Validates Serve configs (`serve deploy` files, KubeRay's serveConfigV2) with Ray "
         "Serve's own schema, `ray.serve.schema.ServeDeploySchema`, imported only when a Serve "
         "config is seen. Without Ray Serve installed, rtenv's table of Serve's structure checks "
         "what it can (required keys, list and mapping shapes, import paths, unique "
         "application names); the file's note says which of the two ran.",
         "`serve deploy`, `serve run` and KubeRay refuse the whole config: nothing is "
         "deployed.",
         "applications:\n  - name: app\n    import_path: app\n",
         "applications:\n  - name: app\n    import_path: main:app\n", ray=True),
    Rule("RTE181", "serve-local-path", E, "a local working_dir/py_modules in a Serve config",
         "Flags local paths in the working_dir and py_modules of a Serve application's or "
         "deployment's runtime_env (Serve's `runtime_env_contains_remote_uris`).",
         "Serve deploys from the cluster, which cannot read your disk: it accepts only remote "
         "URIs (s3://, gs://, https://, gcs://) and local:// directories already on every node. "
         "Anyscale specs are exempt: Anyscale uploads local directories itself.",
         "applications:\n  - name: app\n    import_path: main:app\n"
         "    runtime_env: {working_dir: .}\n",
         "applications:\n  - name: app\n    import_path: main:app\n"
         "    runtime_env: {working_dir: \"s3://bucket/app.zip\"}\n", ray=True),
    Rule("RTE183", "serve-runtime-env-dropped", W, "a runtime_env where Serve drops it",
         "Flags a deployment's `runtime_env` written beside `ray_actor_options` instead of "
         "inside it, and a `runtime_env` at the top of a Serve config.",
         "Serve reads runtime_envs per application and in each deployment's "
         "`ray_actor_options` only; its schema ignores the others without a word, and the "
         "replicas run without those packages and variables.",
         "applications:\n  - import_path: main:app\n    deployments:\n      - name: Model\n"
         "        runtime_env: {pip: [torch]}\n",
         "applications:\n  - import_path: main:app\n    deployments:\n      - name: Model\n"
         "        ray_actor_options:\n          runtime_env: {pip: [torch]}\n"),
    Rule("RTE184", "serve-unknown-key", W, "a key Serve does not know at its level",
         "Compares the keys of a Serve config, each application, deployment, "
         "`ray_actor_options`, `http_options` and `grpc_options` with Ray Serve 2.60's schema "
         "and suggests the key meant.",
         "Serve's schema ignores unknown keys: `num_replica:` or `autoscaling:` silently keeps "
         "the default.",
         "applications:\n  - import_path: main:app\n    deployments:\n      - name: Model\n"
         "        num_replica: 4\n",
         "applications:\n  - import_path: main:app\n    deployments:\n      - name: Model\n"
         "        num_replicas: 4\n"),
    Rule("RTE185", "serve-single-app-format", E, "the single-application Serve config of old "
         "`serve build`",
         "Recognises a Serve config with `import_path` (and `deployments`, `host`, `port`, "
         "`runtime_env`) at the top and no `applications:`, checks its application, and says "
         "that Serve 2.60 refuses the file.",
         "`serve deploy` and KubeRay's serveConfigV2 require `applications`: the whole config is "
         "refused.",
         "import_path: main:app\nhost: 0.0.0.0\nport: 8000\n",
         "http_options: {host: 0.0.0.0, port: 8000}\napplications:\n  - name: app\n"
         "    import_path: main:app\n", ray=True),
    Rule("RTE186", "kuberay-field-shape", E, "a KubeRay field of the wrong shape",
         "Flags a RayJob's (or a RayCronJob's jobTemplate's) `spec.runtimeEnv` written as a "
         "mapping.",
         "KubeRay's RayJob (ray.io/v1) takes the runtime_env as `runtimeEnvYAML`, a YAML string; "
         "`runtimeEnv` was a base64 string in ray.io/v1alpha1. The API server refuses a "
         "mapping there.",
         "spec:\n  entrypoint: python main.py\n  runtimeEnv:\n    envVars: {A: \"1\"}\n",
         "spec:\n  entrypoint: python main.py\n  runtimeEnvYAML: |\n    env_vars:\n"
         "      A: \"1\"\n", ray=True),
)
RULES: tuple[Rule, ...] = tuple(sorted(_TABLE, key=lambda rule: rule.code))


def _with_plugin_rules(rules: tuple[Rule, ...]) -> tuple[Rule, ...]:
    from rtenv_cli.core.lint.rtenv_field_docs import DOCS

    return (*rules, *DOCS)


RULES = _with_plugin_rules(RULES)  # the `rtenv` field's rules live beside their checks
