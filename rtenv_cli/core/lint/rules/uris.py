"""RTE139: credentials inside URIs (working_dir, py_modules, pip/uv requirements and options,
conda, java_jars, images). env_vars are RTE133's."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from rtenv_cli.core.lint.context import Context, walk
from rtenv_cli.core.lint.diagnostic import Diagnostic

_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_SCHEME_CHARS = _LETTERS | frozenset("0123456789+.-")
_URL_REST = r"[^\s'\"<>]+"  # what follows `://`, up to a space or quote
# query parameters that carry a credential: tokens, keys, signed-URL signatures (S3, GCS, Azure)
_SECRET_PARAMS = (
    r"(?:access_token|token|auth|api_?key|apikey|key|secret|password|passwd|pwd|sig|signature|"  # noqa: S105 - names
    r"x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature|x-goog-credential)")
# a user name that is itself a token (https://ghp_xxx@github.com/...)
_TOKEN_USER = (
    r"^(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{16,}|"  # noqa: S105 - shapes
    r"hf_[A-Za-z0-9]{16,}|[A-Fa-f0-9]{40}|[A-Za-z0-9_-]{32,})$")
_MIN_SECRET = 4  # shorter values are placeholders (`x`, `pw`), not credentials


def _is_reference(value: str) -> bool:
    return value.startswith("$") or value.startswith("%") or value.startswith("{")


def urls(text: str) -> Iterator[str]:
    """The URLs in `text`, as `[A-Za-z][A-Za-z0-9+.-]*://[^\\s'"<>]+` finds them, in linear
    time: that regex, searched, tries the scheme at every letter of a long word (quadratic: a
    140,000-character value took 37 s). Here each `://` is found once and its scheme read
    backwards, never past the previous URL or `://` (neither `:` nor `/` is a scheme
    character), so every character is looked at a bounded number of times."""
    rest = re.compile(_URL_REST)
    floor = 0  # where the previous URL ended
    while (sep := text.find("://", floor)) >= 0:
        start = sep
        while start > floor and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        while start < sep and text[start] not in _LETTERS:
            start += 1  # a scheme begins with a letter: the leftmost one that can
        body = rest.match(text, sep + 3) if start < sep else None  # (a body is consumed)
        if body is None:
            floor = sep + 1
            continue
        yield text[start:body.end()]
        floor = body.end()


def credentials(text: str) -> list[tuple[str, str]]:
    """(what, secret) for each credential inside URLs of `text`."""
    from urllib.parse import parse_qsl, unquote, urlsplit

    found: list[tuple[str, str]] = []
    for url in urls(text):
        try:
            parts = urlsplit(url)
        except ValueError:
            continue
        netloc = parts.netloc
        if "@" in netloc:
            userinfo = netloc.rsplit("@", 1)[0]
            user, has_password, password = userinfo.partition(":")
            if has_password and len(password) >= _MIN_SECRET and not _is_reference(password):
                found.append(("a password", password))
            elif not has_password and re.match(_TOKEN_USER, unquote(user)):
                found.append(("a token as the user name", user))
        for name, value in parse_qsl(parts.query, keep_blank_values=False):
            if re.fullmatch(_SECRET_PARAMS, name, re.IGNORECASE) and \
                    len(value) >= _MIN_SECRET and not _is_reference(value):
                found.append((f"a `{name}` parameter", value))
    return found


def _strings(value: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], str]]:
    return ((p, v) for p, v in walk(value, path) if isinstance(v, str))


def uri_secrets(data: Mapping[Any, Any]) -> set[str]:
    """Every credential in the runtime_env's URIs (the renderer hides them in excerpts)."""
    return {secret for _path, text in _strings(dict(data), ()) for _w, secret in
            credentials(text)}


def _redacted(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "****")
    return text


def secret_in_uri(ctx: Context) -> Iterator[Diagnostic]:
    if not isinstance(ctx.data, Mapping):
        return
    for field, value in ctx.data.items():
        if field == "env_vars":
            continue
        for path, text in _strings(value, (field,)):
            yield from _report(ctx, path, text, None)
    from rtenv_cli.core.lint.rules.requirements import requirements

    for reqs in requirements(ctx).values():  # requirements files: their lines are sent too
        for req in reqs:
            if req.origin:
                yield from _report(ctx, req.path, req.text, req.origin)


def _report(ctx: Context, path: tuple[Any, ...], text: str, origin: str | None
            ) -> Iterator[Diagnostic]:
    found = credentials(text)
    if not found:
        return
    what = " and ".join(dict.fromkeys(w for w, _s in found))
    shown = _redacted(text.strip(), [s for _w, s in found])
    where = f" ({origin})" if origin else ""
    index = "pip_install_options" in path or "uv_pip_install_options" in path or \
        "--index-url" in text or "--extra-index-url" in text
    hint = ("set the index on the nodes instead (PIP_INDEX_URL / UV_INDEX_URL in their "
            "environment, or a .netrc): the URL itself must not carry the credential" if index
            else "give the nodes access another way (an IAM role or service account, a .netrc "
            "or git credential helper baked into the image) and drop it from the URI")
    yield ctx.diag("RTE139", f"`{shown}` carries {what}{where}: runtime_envs are stored in the "
                   "GCS and shown in the dashboard, the job's info and logs", path,
                   prefer="value", hint=hint)


CHECKS = (secret_in_uri,)
