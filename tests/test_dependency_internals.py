"""The private parts of dependencies rtenv relies on: each one is capped in pyproject.toml, fails a
test here the day the dependency changes it, and has an ablation row in benchmarks/results that
shows what it buys (or a test that shows what it guards).

- typer: `_TyperParameter.get_runtime_param` and `_coercion.RuntimeParam`, patched by
  cli/_fastcoerce.py (validate.json's "... without cli/_fastcoerce" row; tests/cli/test_app.py
  checks the patch applies); `display_type`/`display_type_rich`, patched by cli/_helptypes.py
  (help text only; tests/cli/test_help.py fails when the patch does not apply).
- uvicorn: `HttpToolsProtocol` subclassed, its `flow.read_paused` and `connections` read by
  agent/serving.py's slow-client guard (no public option times out a request's headers;
  tests/security/test_http_api.py checks stalled connections are closed).
- h2: `H2Connection._get_stream_by_id` and its windows debited by hand in
  transport/grpc_unary.py (push.json's "ablation: GCS re-push without sendfile").
- pathspec: the text of `GitIgnoreSpec`'s regexes, edited by packaging/ignore.py (Ray's 0.8.1
  negations; ignore.json's "ablation: ... one regex per pattern").
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the 3.10 floor
    import tomli as tomllib

# dependency -> the cap pyproject.toml must give it (the next minor or major: untested ground)
CAPS = {"typer": "<0.30", "uvicorn": "<0.55", "h2": "<5", "pathspec": "<2"}
# benchmarks/results/<file>.json -> the ablation rows the private paths are measured by
ABLATIONS = {
    "validate": ["ablation: validate train_runtime_env.yaml without cli/_fastcoerce"],
    "push": ["ablation: GCS re-push without sendfile"],
    "ignore": [
        "ablation: match 20,000 paths against 40 ignore patterns, one regex per pattern"],
}


def _requirements() -> dict[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = {}
    for dep in deps:
        m = re.match(r"([A-Za-z0-9_.-]+)(.*)", dep.split(";")[0].strip())
        assert m, dep
        out[m.group(1).lower()] = m.group(2).replace(" ", "")
    return out


@pytest.mark.parametrize("name", sorted(CAPS))
def test_each_dependency_used_privately_is_capped(name: str) -> None:
    spec = _requirements()[name]
    assert CAPS[name] in spec.split(","), (
        f"pyproject.toml: {name}{spec} needs the cap {CAPS[name]}: rtenv uses its private API")


@pytest.mark.parametrize(("result", "metric"),
                         [(r, m) for r, ms in ABLATIONS.items() for m in ms])
def test_each_private_path_has_its_ablation_row(result: str, metric: str) -> None:
    data = json.loads((ROOT / "benchmarks" / "results" / f"{result}.json").read_text())
    assert metric in {row["metric"] for row in data["rows"]}


def test_uvicorn_protocol_has_what_the_agent_s_guard_reads() -> None:
    """agent/serving.py's GuardedHttp subclasses uvicorn's HttpToolsProtocol and reads its
    `loop`, `transport`, `flow.read_paused` and `connections`, and extends its parser callbacks."""
    from uvicorn.config import Config
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    from uvicorn.server import ServerState

    from rtenv_cli.core.agent import serving

    cls = serving.guarded_http()
    assert HttpToolsProtocol in cls.__mro__
    for hook in ("connection_made", "connection_lost", "data_received", "on_message_begin",
                 "on_headers_complete", "on_message_complete"):
        assert callable(getattr(HttpToolsProtocol, hook, None)), (
            f"uvicorn's HttpToolsProtocol has no {hook}: agent/serving.py's guard needs it")

    async def app(scope: object, receive: object, send: object) -> None:  # never called
        raise AssertionError

    async def connect() -> None:
        config = Config(app=app, http=cls, log_level="warning")
        config.load()
        state = ServerState()
        ours, theirs = socket.socketpair()
        try:
            loop = asyncio.get_running_loop()
            transport, proto = await loop.connect_accepted_socket(
                lambda: cls(config=config, server_state=state, app_state={}), ours)
            assert proto.loop is loop
            assert proto.transport is transport
            assert proto.flow.read_paused is False
            assert proto in proto.connections
            assert proto.connections is state.connections
            transport.close()
        finally:
            theirs.close()

    asyncio.run(connect())


def test_h2_stream_object_and_windows_are_what_grpc_unary_debits() -> None:
    """transport/grpc_unary.py sends a file's DATA frames itself (sendfile) and debits h2's
    connection and stream send windows by hand, through h2's private `_get_stream_by_id`."""
    import h2.config
    import h2.connection

    from rtenv_cli.core.transport import grpc_unary

    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", "/x"),
                            (":authority", "h")])
    channel = object.__new__(grpc_unary.Channel)
    channel._conn = conn
    stream = channel._h2_stream(sid)
    assert stream is not None, "h2 lost _get_stream_by_id: push would silently copy every frame"
    before = conn.local_flow_control_window(sid)
    conn.outbound_flow_control_window -= 1000
    stream.outbound_flow_control_window -= 1000
    assert conn.local_flow_control_window(sid) == before - 1000
    conn.end_stream(sid)  # h2's own state machine still owns the stream


def test_pathspec_regex_text_is_what_ignore_edits() -> None:
    """packaging/ignore.py strips the "and everything below" ending from a negated pattern's
    regex (Ray's pathspec 0.8.1 has none) and renames its `ps_d` group to join patterns into one
    alternation: both read the text of pathspec's generated regexes."""
    from pathspec import GitIgnoreSpec

    from rtenv_cli.core.packaging import ignore

    negated = GitIgnoreSpec.from_lines(["!build"]).patterns[0]
    assert negated.regex is not None
    assert negated.regex.pattern.endswith(ignore._DESCENDANTS), negated.regex.pattern
    assert ignore._pattern("!build").regex.search("build/x") is None
    positive = GitIgnoreSpec.from_lines(["build"]).patterns[0]
    assert positive.regex is not None
    assert "(?P<ps_d>" in positive.regex.pattern
    matcher = ignore.compile_lines([("a", "build"), ("b", "*.pyc")], ".")
    assert matcher is not None
    assert matcher.combined is not None
    assert matcher.decide("src/build/x.py") == "a"
