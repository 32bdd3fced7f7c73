"""Hypothesis strategies for requests to the agent, drawn from its OpenAPI document: each body
field is either a value its schema allows (edges of ranges included) or any JSON value, so both
the accepted and the refused paths are exercised. Builds are kept out (they need the network):
requirement lists and remote URLs are replaced by values the agent refuses before building."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

_SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(min_value=2**62)
            | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
ANY_JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=12)


def _conforming(schema: dict[str, Any], components: dict[str, Any]) -> st.SearchStrategy[Any]:
    if "$ref" in schema:
        schema = components[schema["$ref"].rsplit("/", 1)[1]]
    kind = schema.get("type")
    if "enum" in schema:
        good: st.SearchStrategy[Any] = st.sampled_from(schema["enum"])
    elif kind in ("integer", "number"):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        edges = [v for v in (lo, hi) if v is not None]
        ints = st.integers(min_value=None if lo is None else int(lo),
                           max_value=None if hi is None else int(hi))
        good = ints | st.sampled_from(edges) if edges else ints
    elif kind == "string":
        good = st.text(max_size=min(schema.get("maxLength", 40), 40))
    elif kind == "boolean":
        good = st.booleans()
    elif kind == "array":
        good = st.lists(field(schema.get("items", {}), components), max_size=3)
    elif kind == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", ()))
        good = st.fixed_dictionaries(
            {k: field(v, components) for k, v in props.items() if k in required},
            optional={k: field(v, components) for k, v in props.items() if k not in required})
    else:
        good = ANY_JSON
    if schema.get("nullable"):
        good = good | st.none()
    return good


def field(schema: dict[str, Any], components: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A value the schema allows, most of the time; else any JSON value."""
    good = _conforming(schema, components)
    return st.one_of(good, good, good, ANY_JSON)


def _no_builds(body: Any) -> Any:
    env = body.get("runtime_env") if isinstance(body, dict) else None
    if isinstance(env, dict):
        for key in ("pip", "uv"):
            if isinstance(env.get(key), list | dict | str):
                env[key] = 5
        for key in ("working_dir", "py_modules"):
            if "http" in str(env.get(key, "")).lower():
                env[key] = "gcs://_ray_pkg_0000000000000000.zip"
    return body


def _path_params(path: str) -> st.SearchStrategy[str]:
    names = [seg[1:-1] for seg in path.split("/") if seg.startswith("{")]
    segment = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
    return st.fixed_dictionaries({n: segment for n in names}).map(
        lambda values: path.format(**{k: _quote(v) for k, v in values.items()}))


def _quote(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


@st.composite
def requests_from_schema(draw: st.DrawFn, schema: dict[str, Any]
                         ) -> tuple[str, str, dict[str, Any]]:
    """(method, path, httpx keyword arguments) for one operation of the document."""
    components = schema["components"]["schemas"]
    ops = [(method, path, op) for path, item in schema["paths"].items()
           for method, op in item.items() if method != "parameters"]
    method, path, op = draw(st.sampled_from(sorted(ops, key=lambda o: (o[1], o[0]))))
    url = draw(_path_params(path))
    kw: dict[str, Any] = {}
    content = (op.get("requestBody") or {}).get("content", {})
    if "application/json" in content:
        body = _no_builds(draw(field(content["application/json"]["schema"], components)))
        kw["content"] = draw(st.sampled_from([
            __import__("json").dumps(body), __import__("json").dumps(body)[:-1]]))
        kw["headers"] = {"content-type": "application/json"}
    elif content:
        kw["content"] = draw(st.binary(max_size=200))
    for param in op.get("parameters", ()):
        if param.get("in") == "query":
            kw["params"] = {param["name"]: draw(st.lists(st.text(max_size=80), max_size=3))}
    return method.upper(), url, kw
