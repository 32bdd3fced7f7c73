"""The field table (spec/fields.py) is the one source: Ray 2.60's own fields, and every list of
fields elsewhere derived from it; a pass-through field is one row."""

from __future__ import annotations

import ast
import importlib
import inspect
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rtenv_cli.core.spec import fields, model
from rtenv_cli.core.spec.fields import FIELDS, Field

RAY = Path(__import__("ray").__file__).parent


def _class_names(path: Path) -> set[str]:
    """The `name = "..."` of every class in a module of Ray's (its runtime_env plugins)."""
    tree = ast.parse(path.read_text())
    return {stmt.value.value for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
            for stmt in node.body
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant)
            and any(isinstance(t, ast.Name) and t.id == "name" for t in stmt.targets)
            and isinstance(stmt.value.value, str)}


# -- the table against Ray's source ----------------------------------------------------------------


def test_the_table_holds_exactly_rays_known_fields() -> None:
    """A Ray upgrade that adds or drops a field fails here: add (or drop) its row."""
    from ray.runtime_env.runtime_env import RuntimeEnv

    assert set(fields.names()) == set(RuntimeEnv.known_fields)
    assert len(fields.names()) == len(FIELDS)  # no field twice
    extensions = set(RuntimeEnv.extensions_fields)
    assert extensions <= set(fields.names())
    assert not {f.name for f in FIELDS if f.suggest} & (extensions - {"_ray_commit"})


def test_every_plugin_ray_ships_is_a_field_of_the_table() -> None:
    plugins = set().union(*(_class_names(p) for p in (RAY / "_private/runtime_env").glob("*.py")))
    assert {"working_dir", "py_modules", "pip", "uv", "conda", "image_uri", "container",
            "java_jars", "py_executable", "_nsight", "_rocprof_sys"} <= plugins
    assert plugins <= set(fields.names())


def test_validated_fields_are_rays_parsers_in_rays_order() -> None:
    import ray.runtime_env.runtime_env  # noqa: F401 - it adds `config` to the parsers
    from ray._private.runtime_env.validation import OPTION_TO_VALIDATION_FN

    assert fields.names(where="validated") == tuple(OPTION_TO_VALIDATION_FN)


def test_keyword_arguments_and_renames_are_rays() -> None:
    from ray.runtime_env.runtime_env import RuntimeEnv

    params = set(inspect.signature(RuntimeEnv.__init__).parameters) - {"self", "kwargs"}
    assert params == set(model.INIT_PARAM_ORDER) | model.FLAGS
    assert {model.RENAMED.get(p, p) for p in model.INIT_PARAM_ORDER} <= set(fields.names())
    source = inspect.getsource(RuntimeEnv.__init__)
    for public, internal in model.RENAMED.items():
        assert f'runtime_env["{internal}"] = {public}' in source


def test_conflicts_are_rays() -> None:
    from ray._private.runtime_env.default_impl import get_image_uri_plugin_cls
    from ray.runtime_env.runtime_env import RuntimeEnv

    assert model.ONLY_WITH["image_uri"] == get_image_uri_plugin_cls().get_compatible_keys()
    source = inspect.getsource(RuntimeEnv.__init__)
    assert 'set(runtime_env.keys()) - {"container", "config", "env_vars"}' in source
    assert model.ONLY_WITH["container"] == {"container", "config", "env_vars"}
    assert set(model.MANAGERS) == {"pip", "uv", "conda"}
    for manager in model.MANAGERS:
        assert f'self.get("{manager}") is not None' in source


# -- every list of fields derives from the table -----------------------------------------------


def test_model_lists_are_the_tables() -> None:
    assert {f.name for f in FIELDS} == model.KNOWN_FIELDS
    assert tuple(f.name for f in FIELDS if f.validated) == model.VALIDATED_ORDER
    assert {f.name: f.only_with for f in FIELDS if f.only_with} == model.ONLY_WITH
    assert set(model.SUGGESTABLE_KEYS) == {f.name for f in FIELDS if f.suggest} | \
        set(model.RENAMED) | {model.RTENV_FIELD}


def test_lint_lists_are_the_tables() -> None:
    from rtenv_cli.core.lint import context, rules_docs
    from rtenv_cli.core.lint.rules import fields as field_rules
    from rtenv_cli.core.lint.rules import keys

    assert set(context._STRING_SLOTS) == {(f.name, *s) for f in FIELDS for s in f.slots}
    for f in FIELDS:
        for slot in f.slots:
            path = [f.name, *(3 if s == "#" else "K" if s == "*" else s for s in slot)]
            assert context.expects_string(path), path
    assert tuple(f.name for f in FIELDS if f.coercions) == keys._COERCED
    assert tuple(f.name for f in FIELDS if f.node_str) == field_rules._NODE_STR
    docs = {r.code: r for r in rules_docs._TABLE}
    assert ", ".join(model.VALIDATED_ORDER) in docs["RTE006"].what
    assert "pip, uv and conda are mutually exclusive" in docs["RTE005"].what
    assert "container and image_uri only combine with config and env_vars" in docs["RTE005"].what


def test_agent_run_and_plugin_lists_are_the_tables() -> None:
    from rtenv_cli.core.rayplugin import schema
    from rtenv_cli.core.store import envs

    refused = {f.name for f in FIELDS if f.agent == "refuse"}
    assert set(envs.UNSUPPORTED) - refused == {"mpi", "nsight", "rocprof_sys"}
    assert refused <= set(envs.UNSUPPORTED)
    assert all(f.run == f.agent for f in FIELDS)  # run builds in the agent's store
    # push packages working_dir and py_modules, and applies excludes to them
    assert {f.name for f in FIELDS if f.push == "use"} == {"working_dir", "py_modules", "excludes"}
    assert set(schema.CONFLICTS) == {f.name for f in FIELDS if f.plugin != "ok"}
    assert set(schema.LIMITS_CONFLICTS) == {f.name for f in FIELDS if f.plugin == "container"}
    assert {"pip", "uv"} <= set(schema.CONFLICTS)  # `rtenv` with pip/uv: which interpreter?


def test_the_parity_corpus_covers_every_field_of_the_table() -> None:
    from tests.parity.corpus import CASES
    from tests.parity.generate import POOLS

    text = "\n".join(c if isinstance(c, str) else c.decode("latin-1") for _, _, c in CASES)
    missing = [k for k in model.ALL_TOP_LEVEL_KEYS if f"{k}:" not in text and f'"{k}"' not in text]
    assert missing == []
    # the random generator draws only table fields (plus a plugin name and the shape errors)
    assert set(POOLS) - model.ALL_TOP_LEVEL_KEYS == {"my_plugin", "self"}


def test_explain_notes_the_fields_it_does_not_model() -> None:
    assert fields.explain_notes({"image_uri": "rayproject/ray:2.60.0"}) == [
        f"`image_uri` {fields.by_name()['image_uri'].explain}"]
    assert fields.explain_notes({"image_uri": ""}) == []
    assert fields.explain_notes({"pip": ["six"], "env_vars": {"A": "1"}}) == []


# -- a pass-through field is one row ---------------------------------------------------------


@pytest.fixture
def new_field(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The table with one more pass-through field, as a Ray release would add it, and the
    model derived from it again."""
    name = "my_new_field"
    original = fields.FIELDS
    monkeypatch.setattr(fields, "FIELDS", (*original, Field(name, "str", "a new Ray field")))
    importlib.reload(model)
    yield name
    fields.FIELDS = original
    importlib.reload(model)


def _unknown(report: object) -> list[str]:
    return [d.code for d in report.diagnostics if d.code in ("RTE101", "RTE108")]  # type: ignore[attr-defined]


def test_validate_push_and_the_agent_accept_and_carry_a_new_pass_through_field(
        new_field: str, tmp_path: Path) -> None:
    from rtenv_cli.core.lint.engine import validate_runtime_env
    from rtenv_cli.core.push import push
    from rtenv_cli.core.store.envs import Environments
    from rtenv_cli.core.store.store import Store

    runtime_env = {new_field: "value", "env_vars": {"A": "1"}}
    for api in ("job-submit", "ray-init"):
        from rtenv_cli.core.lint.context import ValidateOptions

        report = validate_runtime_env(runtime_env, base_dir=tmp_path,
                                      options=ValidateOptions(api=api))  # type: ignore[arg-type]
        assert report.valid, report.diagnostics
        assert _unknown(report) == []
        assert report.normalized is not None
        assert report.normalized[new_field] == "value"

    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text("M = 1\n")
    (tmp_path / "runtime_env.yaml").write_text(f"working_dir: app\n{new_field}: value\n")
    pushed = push(tmp_path / "runtime_env.yaml", target=None, dry_run=True, cwd=tmp_path)
    assert pushed.runtime_env[new_field] == "value"
    assert pushed.runtime_env["working_dir"].startswith("gcs://_ray_pkg_")

    handle = Environments(Store(tmp_path / "store")).get_or_create(runtime_env, holder="h",
                                                                   pid=os.getpid())
    assert handle.env_vars == {"A": "1"}


def test_without_its_row_the_field_is_an_unknown_one(tmp_path: Path) -> None:
    """The check above can fail: the same runtime_env without the row is RTE101."""
    from rtenv_cli.core.lint.engine import validate_runtime_env

    report = validate_runtime_env({"my_new_field": "value"}, base_dir=tmp_path)
    assert _unknown(report) == ["RTE101"]


def test_conflicts_are_typed_errors_and_validate_reports_them_as_rte005(tmp_path: Path) -> None:
    """RTE005 comes from the error's `check`, not from the wording of Ray's message."""
    from rtenv_cli.core.lint.engine import validate_runtime_env
    from rtenv_cli.core.spec.construct import RaySemantics, construct

    for runtime_env in ({"pip": ["six"], "conda": "env"}, {"image_uri": "x", "pip": ["six"]},
                        {"container": {"image": "x"}, "working_dir": "s3://b/x.zip"}):
        built = construct(runtime_env, RaySemantics(tmp_path), allow_local_paths=True)
        assert [e.check for e in built.errors] == ["conflict"], runtime_env
        codes = [d.code for d in validate_runtime_env(runtime_env, base_dir=tmp_path).diagnostics
                 if d.ray_error]
        assert codes == ["RTE005"], runtime_env
    built = construct({"env_vars": {"A": 1}}, RaySemantics(tmp_path))
    assert [e.check for e in built.errors] == ["field"]
