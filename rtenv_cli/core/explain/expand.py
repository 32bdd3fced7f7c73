"""Ray 2.60's env_vars expansion rule, re-implemented without importing Ray.

Ray (`_private/utils.py:update_envs`) applies runtime_env `env_vars` one key at a time into the
worker-setup process's environment: each value goes through `os.path.expandvars` against the
environment *as it is so far* (node env + keys already applied), then any leftover `${NAME}` with
NAME matching `[A-Z0-9_]+` is replaced by "". The env_vars map reaches `update_envs` through a
protobuf map, so the keys arrive in sorted order (measured: `{Z1: z, A1: ${Z1}/a}` gives
`A1=/a`), not in the order the user wrote them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

# posixpath.expandvars' own pattern (ASCII \w); re-implemented so the base env is a parameter
# instead of os.environ.
_VAR = re.compile(r"\$(\w+|\{[^}]*\})", re.ASCII)
_BARE_VAR = re.compile(r"\$(\w+)", re.ASCII)
_LEFTOVER = re.compile(r"\$\{[A-Z0-9_]+\}")


@dataclass(frozen=True)
class ExpansionStep:
    """One env_vars key as Ray applies it."""

    key: str
    raw: str
    final: str
    order: int  # position in Ray's application order (0-based, sorted keys)
    notes: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return self.raw != self.final

    def to_dict(self) -> dict[str, object]:
        return {"key": self.key, "raw": self.raw, "final": self.final, "order": self.order,
                "notes": list(self.notes)}


def var_refs(value: str) -> Iterator[re.Match[str]]:
    """The matches of expandvars' pattern in `value`, in order, in linear time. Past the last
    `}` a `${` cannot close, so there only `$NAME` is looked for: the pattern itself would
    scan to the end from every `${` (quadratic on a long `${${${...`)."""
    cut = value.rfind("}") + 1
    yield from _VAR.finditer(value, 0, cut)
    yield from _BARE_VAR.finditer(value, cut)


def _expandvars(value: str, env: Mapping[str, str], notes: list[str]) -> str:
    if "$" not in value:
        return value
    # expandvars searches again from the end of each reference (a replacement is not
    # rescanned): one pass over the matches, joining the pieces once (not a copy per match)
    pieces: list[str] = []
    done = 0
    for m in var_refs(value):
        start, end = m.span(0)
        token = m.group(1)
        name = token[1:-1] if token.startswith("{") and token.endswith("}") else token
        if name in env:
            replacement = env[name]
            notes.append(f"{m.group(0)} -> {replacement!r}")
            pieces += (value[done:start], replacement)
            done = end
        elif not token.startswith("{"):
            notes.append(f"{m.group(0)} is unset: kept literally (only ${{NAME}} is blanked)")
        elif not _LEFTOVER.fullmatch(m.group(0)):
            notes.append(f"{m.group(0)} is unset and not [A-Z0-9_]+: kept literally")
        else:
            notes.append(f"{m.group(0)} is unset: replaced by ''")
    pieces.append(value[done:])
    return "".join(pieces)


def explain_expansion(env_vars: Mapping[str, str], base_env: Mapping[str, str]
                      ) -> list[ExpansionStep]:
    """Each key of `env_vars` in Ray's application order with its raw and final value."""
    env = dict(base_env)
    steps: list[ExpansionStep] = []
    for order, key in enumerate(sorted(env_vars)):
        raw = str(env_vars[key])
        notes: list[str] = []
        expanded = _expandvars(raw, env, notes)
        final = _LEFTOVER.sub("", expanded)
        env[key] = final
        steps.append(ExpansionStep(key, raw, final, order, tuple(notes)))
    return steps


def expand_env_vars(env_vars: Mapping[str, str], base_env: Mapping[str, str]) -> dict[str, str]:
    """The final value of every env_vars key, exactly as Ray 2.60's `update_envs` computes it."""
    return {s.key: s.final for s in explain_expansion(env_vars, base_env)}
