"""The agent's wire protocol, shared by the server (`agent.server`) and its HTTP client
(`transport.agent_http`): request schemas and their validation, the environment handle a create
returns (`store.handle.EnvHandle`), download capabilities, body-size limits and the error envelope.

No Starlette or uvicorn here: the client imports this module.

The request schemas are a small subset of JSON Schema (type, nullable, properties, required,
additionalProperties, items, minimum, maximum, maxLength, maxItems, enum). `/openapi.json`
publishes the same dicts, so the document and the checks cannot drift apart.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rtenv_cli.core.errors import (
    AgentError,
    PayloadTooLargeError,
    RtenvError,
    UsageError,
    class_for_code,
)

TOKEN_ENV = "RTENV_AGENT_TOKEN"  # noqa: S105 - the variable's name, not a secret

MAX_DEPTH = 32  # nesting of any JSON body; deeper is refused before anything walks it
_PID_MAX = 2**22  # Linux's PID_MAX_LIMIT: no process id is larger
_LEASE_MAX_S = 366 * 86400.0
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Limits:
    """The largest request body each kind of route reads (HTTP 413 above it, before reading).

    A package is at most what Ray's GCS stores (512 MiB); a blob or a batch of them at most what
    one package may unpack to; a manifest lists every file of a tree, so it gets more room than
    the other JSON bodies."""

    json_bytes: int = 1 << 20
    manifest_bytes: int = 64 << 20
    package_bytes: int = 512 << 20
    blob_bytes: int = 8 << 30


# -- schemas -----------------------------------------------------------------------------------
_STR = {"type": "string", "maxLength": 4096}
_ENTRY = {"type": "object", "required": ["path"], "additionalProperties": False, "properties": {
    "path": _STR, "is_dir": {"type": "boolean"},
    "mode": {"type": "integer", "minimum": 0, "maximum": 0o7777},
    "size": {"type": "integer", "minimum": 0, "maximum": _INT64_MAX},
    "sha256": {"type": "string", "nullable": True, "maxLength": 64},
    "in_zip": {"type": "boolean", "description": "a directory: whether Ray's zip has it (empty "
               "on disk) or only hashes its name; default true"},
    "zip_time": {"type": "array", "nullable": True, "maxItems": 6,
                 "items": {"type": "integer", "minimum": 0, "maximum": 9999},
                 "description": "the member's date_time in the client's zip (local mtime); "
                 "default 1980-01-01"}}}
_URI = {"type": "string", "maxLength": 4096}

SCHEMAS: dict[str, dict[str, Any]] = {
    "ManifestEntry": _ENTRY,
    "Manifest": {"type": "object", "required": ["uri"], "additionalProperties": False,
                 "properties": {
                     "uri": _URI, "kind": {"enum": ["working_dir", "py_module"]},
                     "name": {"type": "string", "nullable": True, "maxLength": 255},
                     "entries": {"type": "array", "items": _ENTRY},
                     "base": {**_URI, "nullable": True,
                              "description": "a package the agent holds; with upsert/remove "
                                             "instead of entries"},
                     "upsert": {"type": "array", "items": _ENTRY},
                     "remove": {"type": "array", "items": _STR}}},
    "RuntimeEnv": {"type": "object", "description": "Ray's runtime_env; fields the agent does "
                   "not handle are ignored (conda, container, ... are refused with 501)",
                   "properties": {
                       "working_dir": {**_URI, "nullable": True},
                       "py_modules": {"type": "array", "nullable": True, "items": _URI},
                       "env_vars": {"type": "object", "nullable": True,
                                    "additionalProperties": {"type": "string"}},
                       "pip": {"description": "a list of requirements or Ray's dict form"},
                       "uv": {"description": "a list of requirements or Ray's dict form"}}},
    "EnvRequest": {"type": "object", "required": ["runtime_env", "holder"],
                   "additionalProperties": False, "properties": {
                       "runtime_env": {"$ref": "#/components/schemas/RuntimeEnv"},
                       "holder": {"type": "string", "minLength": 1, "maxLength": 256},
                       "pid": {"type": "integer", "nullable": True, "minimum": 1,
                               "maximum": _PID_MAX, "description": "held while this process "
                               "lives (loopback clients only)"},
                       "lease_s": {"type": "number", "nullable": True, "minimum": 1,
                                   "maximum": _LEASE_MAX_S,
                                   "description": "held this long (default 24 h without pid)"}}},
    "GcRequest": {"type": "object", "additionalProperties": False, "properties": {
        "older_than_s": {"type": "number", "nullable": True, "minimum": 0, "maximum": 1e12},
        "keep_storage": {"type": "integer", "nullable": True, "minimum": 0,
                         "maximum": _INT64_MAX},
        "kinds": {"type": "array", "nullable": True, "maxItems": 16,
                  "items": {"type": "string", "maxLength": 64}},
        "purge": {"type": "boolean"}, "dry_run": {"type": "boolean"}}},
}

# What the agent answers, checked by its client before use (`agent_http`): a server that is not
# an rtenv agent, or not this protocol's, is told apart from one (a clear error, not a KeyError).
_STRS = {"type": "array", "items": {"type": "string"}}
_PATH = {"type": "string", "nullable": True}
_COUNT = {"type": "integer", "minimum": 0}
_ROW = {"type": "object", "required": ["kind", "uri", "label", "size_bytes", "created_at",
                                       "last_used_at", "refs"], "properties": {
    "kind": {"type": "string"}, "uri": {"type": "string"}, "key": {"type": "string"},
    "label": {"type": "string"}, "size_bytes": _COUNT, "refs": _COUNT,
    "pinned": {"type": "boolean"}, "created_at": {"type": "number"},
    "last_used_at": {"type": "number"}}}
_ROWS = {"type": "array", "items": _ROW}
REPLIES: dict[str, dict[str, Any]] = {
    "AgentInfo": {"type": "object", "required": ["agent", "version"], "properties": {
        "agent": {"enum": ["rtenv"]}, "version": {"type": "string"},
        "root": {"type": "string"}}},
    "EnvHandle": {"type": "object", "required": ["key", "holder", "working_dir", "py_modules",
                                                 "venv", "env_vars", "entries"], "properties": {
        "key": {"type": "string"}, "holder": {"type": "string"}, "working_dir": _PATH,
        "py_modules": _STRS, "venv": _PATH,
        "env_vars": {"type": "object", "additionalProperties": {"type": "string"}},
        "entries": _STRS, "built": _STRS}},
    "Released": {"type": "object", "required": ["released"], "properties": {
        "released": _COUNT}},
    "Missing": {"type": "object", "required": ["missing"], "properties": {"missing": _STRS}},
    "Committed": {"type": "object", "required": ["uri"], "properties": {
        "uri": {"type": "string"}, "package_bytes": {**_COUNT, "nullable": True}}},
    "CacheListing": {"type": "object", "required": ["entries"], "properties": {
        "source": {"type": "string"}, "entries": _ROWS, "building": _STRS,
        "totals": {"type": "object", "properties": {
            "uv_cache_bytes": {**_COUNT, "nullable": True}}}}},
    "GcResult": {"type": "object", "required": ["dry_run", "plan", "removed", "skipped"],
                 "properties": {
                     "dry_run": {"type": "boolean"}, "removed": _ROWS, "skipped": _ROWS,
                     "plan": {"type": "object", "required": ["remove", "keep_bytes",
                                                             "referenced", "reason"],
                              "properties": {"remove": _ROWS, "keep_bytes": _COUNT,
                                             "referenced": _COUNT,
                                             "reason": {"type": "string"}}},
                     "uv_cache_pruned_bytes": {**_COUNT, "nullable": True}}},
}

_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,),
                                       "number": (int, float), "boolean": (bool,),
                                       "object": (dict,), "array": (list,)}


def _resolve(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    return SCHEMAS[ref.rsplit("/", 1)[1]] if ref else schema


def _where(path: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".") or \
        "the body"


def _type_ok(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return kind == "boolean"
    if kind == "number" and isinstance(value, float):
        return value == value and abs(value) != float("inf")  # noqa: PLR0124 - NaN test
    return isinstance(value, _TYPES[kind])


def _check_scalar(value: Any, schema: Mapping[str, Any], path: tuple[Any, ...]) -> None:
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        raise UsageError(f"{_where(path)} must be one of {', '.join(map(str, enum))}")
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise UsageError(f"{_where(path)} = {value!r} is out of range [{lo}, {hi}]")
    if isinstance(value, str | list):
        longest = schema.get("maxLength" if isinstance(value, str) else "maxItems")
        shortest = schema.get("minLength", 0)
        if (longest is not None and len(value) > longest) or len(value) < shortest:
            raise UsageError(f"{_where(path)} must have {shortest} to {longest} "
                             f"{'characters' if isinstance(value, str) else 'items'}")


def check(value: Any, schema: Mapping[str, Any], path: tuple[Any, ...] = ()) -> None:
    """Raise UsageError naming the first field of `value` that `schema` refuses."""
    schema = _resolve(schema)
    if value is None:
        if schema.get("nullable") or "type" not in schema:
            return
        raise UsageError(f"{_where(path)} must not be null")
    kind = schema.get("type")
    if kind is not None and not _type_ok(value, kind):
        raise UsageError(f"{_where(path)} must be {'an' if kind[0] in 'aeiou' else 'a'} {kind}, "
                         f"not {type(value).__name__}")
    _check_scalar(value, schema, path)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            check(item, schema["items"], (*path, i))
    if isinstance(value, dict):
        _check_object(value, schema, path)


def _check_object(value: dict[str, Any], schema: Mapping[str, Any], path: tuple[Any, ...],
                  skip: str | None = None) -> None:
    props = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            raise UsageError(f"{_where((*path, name))} is required")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name == skip:
            continue
        if name in props:
            check(item, props[name], (*path, name))
        elif extra is False:
            raise UsageError(f"{_where((*path, name))} is not a field of this request",
                             hint=f"known fields: {', '.join(props)}")
        elif isinstance(extra, dict):
            check(item, extra, (*path, name))


def depth_ok(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether `value` nests at most `limit` containers deep (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            if level > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return True


def parse_json(body: bytes, schema_name: str) -> dict[str, Any]:
    """A request body as a checked JSON object (UsageError: HTTP 400 naming the field)."""
    try:
        data = json.loads(body or b"{}")
    except RecursionError:
        raise UsageError(f"request body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise UsageError(f"request body is not JSON: {exc}") from None
    if not depth_ok(data):
        raise UsageError(f"request body nests deeper than {MAX_DEPTH} levels")
    if not isinstance(data, dict):
        raise UsageError("request body must be a JSON object")
    check(data, SCHEMAS[schema_name])
    return data


def check_but(data: dict[str, Any], schema_name: str, known: str) -> bool:
    """What parse_json checks of a body already decoded, but for its field `known`, which the
    caller has seen pass within a body of this schema (the same value). Only when every other
    field is a scalar (the body then nests no deeper than that one did): False, and nothing
    checked, otherwise."""
    for name, value in data.items():
        if name != known and isinstance(value, dict | list):
            return False
    _check_object(data, SCHEMAS[schema_name], (), skip=known)
    return True


def check_length(declared: str | None, limit: int) -> int | None:
    """The request's Content-Length, refused (413) over `limit` before the body is read."""
    if declared is None:
        return None
    try:
        size = int(declared)
    except ValueError:
        raise UsageError(f"Content-Length {declared[:40]!r} is not a number") from None
    if size < 0:
        raise UsageError("Content-Length is negative")
    if size > limit:
        raise too_large(limit)
    return size


def too_large(limit: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(f"request body over the agent's limit of {limit} bytes",
                                hint="the limits are options of `rtenv agent`")


# -- the create request and its answer ----------------------------------------------------------
def env_request(data: Mapping[str, Any], *, trusted_pid: bool) -> dict[str, Any]:
    """A checked `POST /api/envs` body (parse_json(..., "EnvRequest")) as get_or_create's
    arguments. A pid only means something on this host: `trusted_pid` is False for a remote
    client, whose pid is dropped (it holds by lease)."""
    pid = data.get("pid") if trusted_pid else None
    lease = data.get("lease_s")
    if pid is None and lease is None:
        lease = 24 * 3600.0
    return {"runtime_env": data["runtime_env"], "holder": data["holder"], "pid": pid,
            "lease_s": lease}


def download_capability(token: str | None, name: str) -> str:
    """The secret path segment of a package's download URL for Ray's nodes (which send no
    bearer token): an HMAC of the name under the agent's token, so only holders of the token
    can mint one, and one URL opens one package. A token-less agent (loopback only) keys it
    with a fixed string: anyone who can reach it may download anyway."""
    return hmac.new((token or "rtenv-agent").encode(), name.encode(), "sha256").hexdigest()[:32]


# -- errors on the wire -------------------------------------------------------------------------
def error_body(exc: RtenvError) -> dict[str, Any]:
    return {"error": exc.to_dict()}


def is_error_body(body: Any) -> bool:
    """Whether `body` is the agent's error envelope (`{"error": {"code"|"kind", "message"}}`)."""
    err = body.get("error") if isinstance(body, dict) else None
    return isinstance(err, dict) and isinstance(err.get("code", err.get("kind")), str) \
        and "message" in err


def decode_error(body: Any, fallback: str) -> RtenvError:
    """The error an agent's reply carries, as the class its `code` names (an older agent's
    `kind` is read the same way); AgentError for anything else."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return AgentError(f"agent: {fallback}")
    cls = class_for_code(err.get("code", err.get("kind")), AgentError)
    hint = err.get("hint")
    return cls(f"agent: {err.get('message')}", hint=hint if isinstance(hint, str) else None)
