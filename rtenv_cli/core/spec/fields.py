"""The runtime_env fields of Ray 2.60.0 and what each command does with them: the one table.

Every other list of fields (the known keys, the string slots RTE104 and the coercion hints look
at, the fields the agent refuses, those the `rtenv` plugin field conflicts with, the notes
`explain` gives, the docs of `rtenv rules` and docs/fields.md) is derived here. A field Ray
passes through unchecked is one row: `tests/core/spec/test_fields.py` checks every derived list
against this table, and the table against Ray's own `RuntimeEnv.known_fields`.

Plain tuples and a frozen dataclass: `rtenv validate` imports this on every run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

# what a command does with a field that is set:
#   "use"    acts on it (builds, packages, applies it)
#   "carry"  keeps it in the runtime_env it passes on, without acting on it
#   "refuse" stops with "not supported" (the agent, `rtenv run`)
Support = Literal["use", "carry", "refuse"]
# how a field sits beside the `rtenv` plugin field (core/rayplugin/schema.py):
#   "interpreter"  it also chooses the worker's interpreter: `rtenv` with pip/uv conflicts
#   "container"    the worker starts in a container: `rtenv` (limits too) conflicts
PluginRelation = Literal["ok", "interpreter", "container"]
# a slot is a path inside the field where Ray wants a string: "*" any mapping key, "#" any
# list index; () is the field's own value
Slot = tuple[str, ...]


@dataclass(frozen=True)
class Field:
    name: str
    types: str
    summary: str  # the docs line (docs/fields.md)
    validated: bool = False  # RuntimeEnv(...) runs a parser on it (OPTION_TO_VALIDATION_FN)
    slots: tuple[Slot, ...] = ()  # where Ray wants strings inside it
    only_with: frozenset[str] | None = None  # when set, Ray refuses any field but these
    manager: bool = False  # a package manager: Ray allows one of pip, uv, conda
    suggest: bool = True  # a did-you-mean candidate (internal spellings are not)
    coercions: bool = False  # RTE104 looks for YAML 1.1 re-typed scalars in its slots
    node_str: bool = False  # RTE170: the node needs a str, Ray does not check it at submit
    push: Support = "carry"
    agent: Support = "carry"  # the agent's store (and so `rtenv run`, which builds there)
    plugin: PluginRelation = "ok"
    explain: str | None = None  # the note `explain` gives when it does not model the field

    @property
    def run(self) -> Support:
        """`rtenv run` builds its environment in the agent's store: the same support."""
        return self.agent


_IMAGE_NOTE = ("is not modelled: the worker runs in a container image, whose own environment "
               "(its ENV, PATH, Python) this preview does not show")
_REQ_SLOTS = ("#",), ("packages", "#")

# In Ray's validation order (OPTION_TO_VALIDATION_FN, `config` last), then the fields it passes
# through. A new pass-through field is one row with its name, types and summary.
FIELDS: tuple[Field, ...] = (
    Field("py_modules", "list[str]", "local dirs, .py or .whl files (uploaded), or URIs", True,
          slots=(("#",),), push="use", agent="use"),
    Field("working_dir", "str", "local directory/archive (uploaded) or a package URI", True,
          slots=((),), push="use", agent="use"),
    Field("excludes", "list[str]", "gitwildmatch patterns left out of uploaded packages", True,
          slots=(("#",),), push="use"),
    Field("conda", "str | dict", "conda env name, env YAML path, prefix dir, or env dict", True,
          slots=((),), manager=True, agent="refuse", plugin="interpreter"),
    Field("pip", "str | list[str] | dict", "pip requirements (file path, list or dict)", True,
          slots=(*_REQ_SLOTS, ("pip_version",), ("pip_install_options", "#")), manager=True,
          coercions=True, agent="use", plugin="interpreter"),
    Field("uv", "str | list[str] | dict", "uv requirements (file path, list or dict)", True,
          slots=(*_REQ_SLOTS, ("uv_version",), ("uv_pip_install_options", "#")), manager=True,
          coercions=True, agent="use", plugin="interpreter"),
    Field("env_vars", "dict[str, str]", "environment variables of every worker", True,
          slots=(("*",),), coercions=True, agent="use"),
    Field("container", "dict", "legacy container spec (image, run_options, worker_path)", True,
          slots=(("image",), ("worker_path",), ("run_options", "#")),
          only_with=frozenset({"container", "config", "env_vars"}), coercions=True,
          agent="refuse", plugin="container", explain=_IMAGE_NOTE),
    Field("config", "dict", "setup_timeout_seconds, eager_install, log_files", True,
          slots=(("log_files", "#"),)),
    Field("py_executable", "str", "interpreter command for workers", slots=((),),
          coercions=True, node_str=True, plugin="interpreter"),
    Field("image_uri", "str", "container image the workers run in", slots=((),),
          only_with=frozenset({"image_uri", "config", "env_vars"}), coercions=True,
          node_str=True, agent="refuse", plugin="container", explain=_IMAGE_NOTE),
    Field("java_jars", "list[str]", "jar URIs for Java workers", slots=(("#",),),
          coercions=True, agent="refuse"),
    Field("worker_process_setup_hook", "str", "module.function run when a worker starts",
          slots=((),), coercions=True),
    Field("_nsight", "str | dict", "internal spelling of nsight", suggest=False),
    Field("_rocprof_sys", "str | dict", "internal spelling of rocprof_sys", suggest=False),
    Field("_ray_release", "str", "extension: Ray release", suggest=False),
    Field("_ray_commit", "str", "extension: Ray commit (added by Ray with pip/conda)"),
    Field("_inject_current_ray", "bool", "extension: inject the current Ray (dev mode)",
          suggest=False),
)

# keyword arguments of RuntimeEnv.__init__ that Ray renames into a field
RENAMED = {"nsight": "_nsight", "rocprof_sys": "_rocprof_sys"}
# keys the agent refuses beside the table's: the profilers' public keywords (the store cannot
# set them up; their internal spellings pass, as Ray passes them) and `mpi`, a field of older
# Rays that 2.60 no longer knows
_ALSO_REFUSED = ("mpi", "nsight", "rocprof_sys")


def by_name() -> dict[str, Field]:
    return {f.name: f for f in FIELDS}


def names(*, where: str | None = None, value: object = True) -> tuple[str, ...]:
    """The fields (in table order) whose column `where` equals `value` (all without `where`)."""
    return tuple(f.name for f in FIELDS if where is None or getattr(f, where) == value)


def string_slots() -> tuple[Slot, ...]:
    """Every place (relative to the runtime_env) where Ray wants a string."""
    return tuple((f.name, *slot) for f in FIELDS for slot in f.slots)


def agent_refused() -> tuple[str, ...]:
    """Keys the agent (and `rtenv run`) refuse."""
    return (*names(where="agent", value="refuse"), *_ALSO_REFUSED)


def explain_notes(runtime_env: Mapping[str, object]) -> list[str]:
    """`explain`'s note for each field set in `runtime_env` that the preview does not model."""
    return [f"`{f.name}` {f.explain}" for f in FIELDS
            if f.explain and runtime_env.get(f.name) not in (None, "", {}, [])]
