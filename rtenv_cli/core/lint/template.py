"""RTE107: a file that is a template, not a runtime_env yet (Jinja/Helm, GitHub Actions
expressions, Hydra/OmegaConf interpolations).

Ray reads such a file as it is: `{{ x }}` breaks the YAML or becomes a literal mapping,
`${oc.env:HF_TOKEN}` reaches the worker as those 18 characters. Validating it unrendered gives
a parse error or findings about placeholders ("`oc.env:HF_TOKEN` is not set"), none of which is
the point: the file must be rendered first. So a template gets one diagnostic, at its first
placeholder, and nothing else.

What counts as a placeholder (on a line that is not a YAML comment):
- `{{ ... }}`, `{% ... %}`, `{# ... #}`: Jinja, and Helm/Go templates;
- `${{ ... }}`: a GitHub Actions expression;
- `${name:...}` with a lower-case resolver name (`oc.env:`, `env:`, `hydra:`, `now:`), or a
  dotted or relative reference (`${model.name}`, `${.x}`): OmegaConf/Hydra interpolation.
Shell-style `${VAR}`, `$VAR` and `${VAR:-default}` are not placeholders: Ray expands them in
env_vars on the worker, and a job's entrypoint runs in a shell that expands them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

# delimited forms: (opener, closer) pairs, found as `opener.*?closer` would be (see _delimited)
_DELIMITED = {
    "GitHub Actions": (("${{", "}}"),),
    "Jinja": (("{{", "}}"), ("{%", "%}"), ("{#", "#}")),
}
_OMEGACONF = r"\$\{\s*(?:[a-z][\w.]*:(?![-=+?])|\.+\w|[A-Za-z_]\w*(?:\.\w+)+\s*\})"
_NEST_MAX = 1024  # characters past a placeholder searched for the brace that closes it
_HINTS = {
    "GitHub Actions": "validate the file the workflow writes, after it substituted the "
                      "`${{ }}` expressions (or validate it in a step after that one)",
    "Jinja": "render it first and validate the output, e.g. "
             "`jinja2 runtime_env.yaml.j2 vars.yaml | rtenv validate -`",
    "OmegaConf": "resolve it first and validate the result: `python train.py --cfg job "
                 "--resolve > runtime_env.yaml` (Hydra), or OmegaConf.to_yaml(cfg, "
                 "resolve=True)",
}


@dataclass(frozen=True)
class Placeholder:
    """The first placeholder of a template, and how many the file holds."""

    engine: str  # "Jinja", "GitHub Actions" or "OmegaConf"
    text: str
    line: int  # 1-based
    column: int  # 1-based
    count: int

    @property
    def hint(self) -> str:
        return _HINTS[self.engine]

    @property
    def end_column(self) -> int:
        return self.column + len(self.text)


def find_placeholder(text: str | None) -> Placeholder | None:
    """The template placeholder that comes first in `text`, if any."""
    if not text or ("{" not in text):
        return None
    first: Placeholder | None = None
    count = 0
    for number, line in enumerate(text.split("\n"), 1):
        if "{" not in line or line.lstrip().startswith("#"):
            continue
        taken: list[tuple[int, int]] = []
        for engine, spans in _spans(line):
            for start, end in spans:
                if any(a <= start < b for a, b in taken):
                    continue  # `${{ x }}` is one GitHub expression, not also a Jinja one
                whole = _closed(line, start, end)
                taken.append((start, start + len(whole)))
                count += 1
                if first is None or (number, start + 1) < (first.line, first.column):
                    first = Placeholder(engine, whole, number, start + 1, 0)
    if first is None:
        return None
    return Placeholder(first.engine, first.text, first.line, first.column, count)


def _spans(line: str) -> Iterator[tuple[str, Iterator[tuple[int, int]]]]:
    for engine, pairs in _DELIMITED.items():
        yield engine, _delimited(line, pairs)
    yield "OmegaConf", (m.span() for m in re.finditer(_OMEGACONF, line))


def _delimited(line: str, pairs: tuple[tuple[str, str], ...]) -> Iterator[tuple[int, int]]:
    """The spans `re.finditer("open1.*?close1|open2.*?close2...", line)` gives (no two openers
    start alike), in linear time: that regex scans to the end of the line from every opener
    that is never closed (a long `{{{{...` took seconds). Here the next closer is looked up
    once and reused until the search passes it."""
    openers = {opener: closer for opener, closer in pairs}
    found = re.compile("|".join(re.escape(o) for o in openers))
    after: dict[str, int] = {}  # closer -> its first position at or after the last lookup
    pos = 0
    while (match := found.search(line, pos)) is not None:
        start, body = match.start(), match.end()
        closer = openers[match.group(0)]
        at = after.get(closer)
        if at is None or 0 <= at < body:  # -1: none after the last lookup, so none after this
            after[closer] = at = line.find(closer, body)
        if at < 0:
            pos = start + 1  # unclosed here, and so is every later opener of this pair
            continue
        yield start, at + len(closer)
        pos = at + len(closer)


def _closed(line: str, start: int, end: int) -> str:
    """The placeholder from `start` to its closing brace (an interpolation may nest one),
    looked for up to _NEST_MAX characters past `end` (so many placeholders stay linear)."""
    depth = 0
    for i in range(start, min(len(line), end + _NEST_MAX)):
        if line[i] == "{":
            depth += 1
        elif line[i] == "}":
            depth -= 1
            if depth == 0:
                return line[start:max(i + 1, end)]
    return line[start:end]


def describe(found: Placeholder, parse_error: str | None) -> str:
    """RTE107's message: what the file is, and what Ray would do with it as it stands."""
    kind = {"Jinja": "a Jinja/Go template", "GitHub Actions": "a GitHub Actions template",
            "OmegaConf": "a Hydra/OmegaConf config"}[found.engine]
    shown = found.text if len(found.text) <= 40 else found.text[:37] + "..."  # noqa: PLR2004
    more = f" and {found.count - 1} more" if found.count > 1 else ""
    if parse_error is not None:
        fate = f"unrendered it does not even parse ({parse_error})"
    elif found.engine == "OmegaConf":
        fate = "Ray does not resolve interpolations: the workers would get the text as written"
    else:
        fate = "Ray would read the placeholders literally"
    return f"this file is {kind} (`{shown}`{more}), not a runtime_env yet: {fate}"
