"""The agent's OpenAPI schema: paths kept by hand (a test checks them against the app's routes),
request bodies from `agent_protocol.SCHEMAS`, the dicts the routes check bodies against."""

from __future__ import annotations

from typing import Any

from rtenv_cli import __version__
from rtenv_cli.core.errors import TABLE
from rtenv_cli.core.transport.agent_protocol import SCHEMAS


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERR = {"$ref": "#/components/schemas/Error"}
_ERRORS = {"401": _json(_ERR, "token missing"), "403": _json(_ERR, "token wrong"),
           "400": _json(_ERR, "a field is missing or of the wrong type or range"),
           "413": _json(_ERR, "body over the agent's limit"),
           "422": _json(_ERR, "content rejected"), "507": _json(_ERR, "the store's disk is full")}
_MANIFEST_BODY = {"required": True, "content": {"application/json": {
    "schema": {"$ref": "#/components/schemas/Manifest"}}}}
_RAW_BODY = {"required": True, "content": {"application/octet-stream": {
    "schema": {"type": "string", "format": "binary"}}}}
_NAME = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}]

SCHEMA: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "rtenv agent", "version": __version__,
             "description": "Ray-compatible package store, delta uploads and environments."},
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": {"type": "object", "properties": {"error": {
                "type": "object", "required": ["code", "message"], "properties": {
                    "code": {"enum": sorted(row.code for row in TABLE.values()),
                             "description": "stable: the client maps it back to its class"},
                    "message": {"type": "string"}, "hint": {"type": "string", "nullable": True},
                    "path": {"type": "string", "nullable": True}}}}},
            **SCHEMAS,
            "EnvHandle": {"type": "object", "properties": {
                "key": {"type": "string"}, "holder": {"type": "string"},
                "working_dir": {"type": "string", "nullable": True},
                "py_modules": {"type": "array", "items": {"type": "string"}},
                "venv": {"type": "string", "nullable": True},
                "env_vars": {"type": "object"}, "entries": {"type": "array"},
                "built": {"type": "array"}}},
        },
    },
    "security": [{"bearer": []}],
    "paths": {
        "/api/agent": {"get": {"summary": "Agent identity", "responses": {"200": _json({})}}},
        "/api/packages/gcs/{name}": {
            "parameters": _NAME,
            "head": {"summary": "Does the package exist", "responses": {
                "200": {"description": "exists"}, "404": {"description": "absent"}}},
            "get": {"summary": "Exists check (Ray's protocol); ?download=1 returns the zip",
                    "responses": {"200": {"description": "exists"},
                                  "404": {"description": "absent"}}},
            "put": {"summary": "Upload a package; verified against its Ray hash",
                    "description": "X-Rtenv-Hashed-Dirs (a JSON list of relpaths) names what "
                    "Ray hashed but its zip cannot show (folders whose files were all "
                    "excluded); without it such a package is refused (422). A name the "
                    "agent holds answers 200 to the same content again, 409 to other content",
                    "parameters": [{"name": "X-Rtenv-Hashed-Dirs", "in": "header",
                                    "required": False, "schema": {"type": "string"}}],
                    "requestBody": _RAW_BODY,
                    "responses": {"200": {"description": "stored"}, **_ERRORS,
                                  "409": _json(_ERR, "the name holds other content")}},
        },
        "/api/manifests": {"post": {
            "summary": "Which blobs of a manifest the agent lacks", "requestBody": _MANIFEST_BODY,
            "responses": {"200": _json({"type": "object", "properties": {
                "missing": {"type": "array", "items": {"type": "string"}}}}), **_ERRORS}}},
        "/api/manifests/commit": {"post": {
            "summary": "Verify the package's Ray URI from its blobs and publish it (a whole "
                       "manifest, or base + upsert + remove)",
            "requestBody": _MANIFEST_BODY,
            "responses": {"200": _json({"type": "object", "properties": {
                "uri": {"type": "string"}, "package_bytes": {"type": "integer"}}}),
                **_ERRORS}}},
        "/api/publish": {"post": {
            "summary": "A save in one request: '<size>\\n' and that many bytes of manifest "
                       "JSON (a whole manifest, or base + upsert + remove), then blob records "
                       "as /api/blobs takes them; the blobs are stored, then the manifest "
                       "committed as /api/manifests/commit does",
            "requestBody": _RAW_BODY,
            "responses": {"200": _json({"type": "object", "properties": {
                "uri": {"type": "string"}, "package_bytes": {"type": "integer"}}}),
                **_ERRORS}}},
        "/download/{cap}/{name}": {"get": {
            "summary": "A package as a remote zip for Ray's nodes (one top-level directory, "
                       "which Ray strips); `cap` is an HMAC of the name under the agent's token, "
                       "so the URL needs no bearer token",
            "security": [],
            "parameters": [{"name": "cap", "in": "path", "required": True,
                            "schema": {"type": "string"}}, *_NAME],
            "responses": {"200": {"description": "the zip", "content": {
                "application/zip": {"schema": {"type": "string", "format": "binary"}}}},
                "404": {"description": "unknown package or URL"}}}},
        "/api/blobs": {"post": {
            "summary": "Upload many blobs: records of '<sha256 hex> <size>\\n<bytes>', each "
                       "verified; made durable together",
            "requestBody": _RAW_BODY,
            "responses": {"200": _json({"type": "object", "properties": {
                "stored": {"type": "integer"}}}), **_ERRORS}}},
        "/api/blobs/{sha}": {"put": {
            "summary": "Upload one blob; verified against its sha256",
            "parameters": [{"name": "sha", "in": "path", "required": True,
                            "schema": {"type": "string"}}],
            "requestBody": _RAW_BODY,
            "responses": {"200": {"description": "stored"}, **_ERRORS}}},
        "/api/envs": {
            "post": {"summary": "Get or create an environment and hold a reference",
                     "requestBody": {"required": True, "content": {"application/json": {
                         "schema": {"$ref": "#/components/schemas/EnvRequest"}}}},
                     "responses": {"200": _json({"$ref": "#/components/schemas/EnvHandle"}),
                                   "501": _json(_ERR, "field not supported"), **_ERRORS,
                                   "403": _json(_ERR, "token wrong, or a field names a local "
                                                "path (a file of the agent's machine)")}},
            "get": {"summary": "List environments", "responses": {"200": _json({})}},
        },
        "/api/envs/{key}/refs/{holder}": {"delete": {
            "summary": "Release a holder's reference (the entries stay cached)",
            "parameters": [{"name": n, "in": "path", "required": True,
                            "schema": {"type": "string"}} for n in ("key", "holder")],
            "responses": {"200": _json({"type": "object"})}}},
        "/api/cache": {"get": {"summary": "Cache entries and totals",
                               "parameters": [{"name": "kind", "in": "query",
                                               "schema": {"type": "string"}}],
                               "responses": {"200": _json({})}}},
        "/api/gc": {"post": {"summary": "Plan and run a garbage collection",
                             "requestBody": {"content": {"application/json": {"schema": {
                                 "$ref": "#/components/schemas/GcRequest"}}}},
                             "responses": {"200": _json({}), **_ERRORS}}},
        "/openapi.json": {"get": {"summary": "This schema", "security": [],
                                  "responses": {"200": _json({})}}},
    },
}
