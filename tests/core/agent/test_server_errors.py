"""The one error table: each class's exit code, HTTP status and wire code, and the client
decoding a reply back to the class the agent raised."""

from __future__ import annotations

import errno
import subprocess
import sys

import pytest

from rtenv_cli.core.errors import (
    TABLE,
    AgentError,
    CacheBusyError,
    DiskFullError,
    ExitCode,
    PackagingError,
    RtenvError,
    UnsupportedError,
    UsageError,
    ValidationError,
    from_os_error,
)
from rtenv_cli.core.spec.normalize import RuntimeEnvValueError, normalize_pip
from rtenv_cli.core.transport.agent_protocol import decode_error, error_body


@pytest.mark.parametrize("cls", list(TABLE), ids=lambda c: c.__name__)
def test_every_class_round_trips_through_its_wire_code(cls: type[RtenvError]) -> None:
    exc = cls("boom", hint="do this")
    back = decode_error(error_body(exc), "unused")
    assert type(back) is cls
    assert back.hint == "do this"
    assert back.exit_code == exc.exit_code


def test_statuses_and_exit_codes_of_the_main_categories() -> None:
    rows = {cls: (cls("x").http_status, cls("x").exit_code) for cls in (
        UsageError, ValidationError, PackagingError, UnsupportedError, CacheBusyError,
        DiskFullError, AgentError)}
    assert rows == {UsageError: (400, ExitCode.USAGE), ValidationError: (422, ExitCode.USAGE),
                    PackagingError: (422, ExitCode.FAILURE),
                    UnsupportedError: (501, ExitCode.FAILURE),
                    CacheBusyError: (409, ExitCode.FAILURE),
                    DiskFullError: (507, ExitCode.FAILURE),
                    AgentError: (500, ExitCode.FAILURE)}


def test_a_runtime_env_value_error_keeps_ray_s_type_apart_from_its_category() -> None:
    with pytest.raises(RuntimeEnvValueError) as info:
        normalize_pip(5, None)  # type: ignore[arg-type]
    exc = info.value
    assert isinstance(exc, ValidationError)
    assert exc.python_type == "TypeError"
    assert (exc.code, exc.http_status, exc.exit_code) == ("invalid", 422, ExitCode.USAGE)
    assert exc.to_dict()["python_type"] == "TypeError"
    assert type(decode_error(error_body(exc), "")) is ValidationError


def test_an_unknown_or_missing_code_is_an_agent_error_and_old_kinds_still_decode() -> None:
    assert type(decode_error({"error": {"code": "from-the-future", "message": "m"}}, "")) \
        is AgentError
    assert type(decode_error("not json", "HTTP 500")) is AgentError
    assert type(decode_error({"error": {"kind": "unsupported", "message": "m"}}, "")) \
        is UnsupportedError


def test_a_full_disk_is_its_own_error_and_other_os_errors_are_not_mapped() -> None:
    full = from_os_error(OSError(errno.ENOSPC, "No space left", "/store/tmp/x"), "PUT /x")
    assert isinstance(full, DiskFullError)
    assert full.http_status == 507
    assert "/store/tmp/x" in full.message
    assert from_os_error(OSError(errno.EACCES, "denied")) is None


def test_the_client_does_not_import_the_server() -> None:
    code = ("import sys, rtenv_cli.core.transport.agent_http as _\n"
            "print(sorted(m for m in sys.modules if m.startswith('rtenv_cli.core.agent')\n"
            "             or m.split('.')[0] in ('starlette', 'uvicorn')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
