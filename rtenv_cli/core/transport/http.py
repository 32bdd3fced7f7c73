"""HTTP calls to push targets (rtenv agent, Ray dashboard) with every wait bounded.

A target may accept and never answer, stall or trickle its reply, loop redirects, cut a reply
short, answer something that is not the protocol, or send a huge error body. Each call here has
a connect and a read timeout, an overall deadline that grows with the bytes sent (with a floor),
a cap on redirects and on the bytes read back; retries (with exponential backoff) are only for
idempotent calls, only on refused/reset connections and 502/503/504. Every failure is a
`TransportError` that names the target and what went wrong.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from rtenv_cli.core.errors import TransportError

MAX_REDIRECTS = 5
ERROR_BODY_LIMIT = 64 * 1024  # an error reply is read this far, then the connection dropped
REPLY_LIMIT = 64 * 2**20  # a successful reply larger than this is not what the protocol sends
TRANSIENT_STATUS = (502, 503, 504)
_READ_SIZE = 64 * 1024


@dataclass(frozen=True)
class Timeouts:
    """connect/read: seconds of silence allowed; a call's deadline is `floor + bytes / min_rate`
    seconds for the whole exchange (retries included)."""

    connect: float = 10.0
    read: float = 60.0
    floor: float = 120.0
    min_rate: float = 256 * 1024
    retries: int = 4
    backoff: float = 0.5

    def deadline(self, size: int = 0) -> float:
        return self.floor + size / self.min_rate


DEFAULT_TIMEOUTS = Timeouts()  # what clients built without `timeouts=` use (tests shorten it)


class _DeadlinePassed(Exception):
    pass


class Unreachable(TransportError):
    """The target refused or reset the connection, every try: nothing answered there."""


@dataclass
class Reply:
    """A reply whose body was read (bounded) and whose connection is released."""

    status_code: int
    headers: Mapping[str, str]  # names in any case
    content: bytes
    target: str = field(repr=False, default="")
    call: str = field(repr=False, default="")
    hint: str | None = field(repr=False, default=None)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        try:
            return json.loads(self.content)
        except ValueError:
            snippet = self.text[:200] or "an empty body"
            raise TransportError(f"{self.target} answered {self.call} with a body that is not "
                                 f"JSON (HTTP {self.status_code}): {snippet!r}",
                                 hint=self.hint) from None


class _FileBody:
    """A request body read from a file that stops at the deadline (a server reading slowly)."""

    def __init__(self, fh: BinaryIO, size: int, end: float) -> None:
        self._fh, self._size, self._end = fh, size, end

    def __len__(self) -> int:
        return self._size

    def read(self, n: int = -1) -> bytes:
        if time.monotonic() > self._end:
            raise _DeadlinePassed
        return self._fh.read(n)


def _until(chunks: Iterable[bytes], end: float) -> Iterator[bytes]:
    for chunk in chunks:
        if time.monotonic() > end:
            raise _DeadlinePassed
        yield chunk


def session_for(url: str) -> Any:
    """A requests Session for `url`. A loopback URL never goes through a proxy from the
    environment (http_proxy, ALL_PROXY...: requests bypasses none for loopback unless NO_PROXY
    says so): the proxy could not reach this machine's loopback, and it would read each request,
    a token the agent's owner check let through included. Only the CA bundle variables are kept
    from what `trust_env` reads."""
    import requests

    from rtenv_cli.core.transport.agent_token import is_loopback_url

    session = requests.Session()
    if is_loopback_url(url):
        session.trust_env = False
        bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        if bundle:
            session.verify = bundle
    return session


class HttpClient:
    """One target's base URL, session and limits; `who` names it in errors ("rtenv agent")."""

    def __init__(self, url: str, who: str, *, hint: str | None = None,
                 timeouts: Timeouts | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            url = f"http://{url}"
        self.url = url.rstrip("/")
        self.who = who
        self.hint = hint
        self.timeouts = timeouts or DEFAULT_TIMEOUTS
        self.headers: dict[str, str] = {}
        # headers decided before each request, e.g. a token that goes only to a listener its
        # user owns (agent_token.FileBearer); it may refuse the request with a TransportError
        self.per_request: Callable[[], dict[str, str]] | None = None
        self._session: Any = None

    @property
    def target(self) -> str:
        return f"the {self.who} at {self.url}"

    def session(self) -> Any:
        if self._session is None:
            self._session = session_for(self.url)
            self._session.max_redirects = MAX_REDIRECTS
        return self._session

    def _error(self, message: str, exc: BaseException | None = None) -> TransportError:
        err = TransportError(f"{self.target} {message}", hint=self.hint)
        if exc is not None:
            err.__cause__ = exc
        return err

    def request(self, method: str, path: str, *, idempotent: bool, body_path: Path | None = None,
                data: Iterable[bytes] | None = None, size: int = 0, wait: float = 0,
                ok: Callable[[int], bool] = lambda s: 200 <= s < 300,  # noqa: PLR2004 - 2xx
                limit: int = REPLY_LIMIT, sink: BinaryIO | None = None, **kw: Any) -> Reply:
        """`method path`, its body a file (`body_path`, re-read on a retry) or chunks (`data`,
        `size` bytes in all, never retried). A reply whose status `ok` refuses is read only up
        to ERROR_BODY_LIMIT, one it accepts up to `limit` (more is an error), into `sink` if
        given (a download: the deadline then grows with `limit` as with bytes sent). `wait`: the
        seconds the target may work before it answers (an environment build), which lengthen
        the read timeout and the deadline."""
        import requests

        t = self.timeouts
        call = f"{method} {path}"
        if body_path is not None:
            size = body_path.stat().st_size
        read = max(t.read, wait)
        allowed = t.deadline(size + (limit if sink is not None else 0)) + wait
        end = time.monotonic() + allowed
        attempts = t.retries if idempotent and data is None else 1
        delay = t.backoff
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                resp = self._send(method, path, body_path=body_path, data=data, size=size,
                                  end=end, read=read, kw=dict(kw))
            except _DeadlinePassed as exc:
                raise self._error(f"did not take {call} ({size} bytes) within the {allowed:.0f} "
                                  "s allowed (deadline)", exc) from None
            except requests.ConnectTimeout as exc:
                raise self._error(f"did not accept a connection within {t.connect:g} s "
                                  "(connect timeout)", exc) from None
            except requests.ReadTimeout as exc:
                raise self._error(f"accepted the connection but sent no reply to {call} "
                                  f"within {read:g} s (read timeout)", exc) from None
            except requests.TooManyRedirects as exc:
                raise self._error(f"redirected {call} more than {MAX_REDIRECTS} times "
                                  "(a redirect loop?)", exc) from None
            except requests.ConnectionError as exc:
                text = str(exc).lower()
                reason = ("connection refused" if "refused" in text else
                          "connection reset" if "reset" in text or "aborted" in text else
                          type(exc).__name__)
                if last or time.monotonic() + delay > end:
                    raise Unreachable(f"cannot reach {self.target} ({reason}; {call})",
                                      hint=self.hint) from exc
            except requests.RequestException as exc:
                raise self._error(f"failed {call}: {type(exc).__name__}: {exc}", exc) from None
            else:
                status = resp.status_code
                if status in TRANSIENT_STATUS and not last and time.monotonic() + delay < end:
                    resp.close()
                else:
                    good = ok(status)
                    body = self._read(resp, call, end, allowed, read,
                                      limit if good else min(limit, ERROR_BODY_LIMIT),
                                      strict=good, sink=sink if good else None)
                    # headers as requests keeps them: names looked up in any case
                    return Reply(status, resp.headers, body, self.target, call, self.hint)
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    def _send(self, method: str, path: str, *, body_path: Path | None,
              data: Iterable[bytes] | None, size: int, end: float, read: float,
              kw: dict[str, Any]) -> Any:
        timeout = (self.timeouts.connect, read)
        extra = self.per_request() if self.per_request is not None else {}
        headers = {**self.headers, **extra, **kw.pop("headers", {})}
        args = {"timeout": timeout, "stream": True, "headers": headers, **kw}
        if body_path is not None:
            with body_path.open("rb") as fh:
                return self.session().request(method, self.url + path,
                                              data=_FileBody(fh, size, end), **args)
        if data is not None:
            args["data"] = _until(data, end)
        return self.session().request(method, self.url + path, **args)

    def _read(self, resp: Any, call: str, end: float, allowed: float,  # noqa: PLR0917 - private
              read: float, limit: int, *, strict: bool, sink: BinaryIO | None = None) -> bytes:
        """At most `limit` bytes of the body (written to `sink` instead, if given); past it a
        reply the caller wants is an error, an error reply is cut (the connection is closed,
        the rest never read)."""
        from urllib3.exceptions import HTTPError, ReadTimeoutError

        chunks: list[bytes] = []
        n = 0
        try:
            while n <= limit:
                if time.monotonic() > end:
                    raise self._error(f"was still sending its reply to {call} when the "
                                      f"{allowed:.0f} s allowed ran out (deadline)")
                try:
                    chunk = resp.raw.read1(_READ_SIZE)
                except ReadTimeoutError as exc:
                    raise self._error(f"stopped sending its reply to {call} for {read:g} s "
                                      "(read timeout)", exc) from None
                except (HTTPError, OSError) as exc:
                    raise self._error(f"sent a truncated reply to {call} (the connection ended "
                                      "mid-body)", exc) from None
                if not chunk:
                    break
                n += len(chunk)
                if sink is None:
                    chunks.append(chunk)
                elif n <= limit:  # a write's error (a full disk) is the caller's, as it is
                    sink.write(chunk)
        finally:
            resp.close()
        body = b"".join(chunks)
        if n > limit:
            if strict:
                raise self._error(f"answered {call} with more than {limit} bytes, more than "
                                  "rtenv reads from it")
            body = body[:limit]
        return body


def download(url: str, dest: Path, *, limit: int) -> None:
    """`url` (http or https) into the file `dest`, through HttpClient: a deadline for the whole
    download (its floor plus `limit` at the minimum rate), at most `limit` bytes, retried on a
    refused connection; any status but 200 is an error naming it."""
    from urllib.parse import urlsplit

    split = urlsplit(url)
    base = f"{split.scheme}://{split.netloc}"
    client = HttpClient(base, "server", hint="check that the URL is reachable from this node "
                        "and that the archive is not larger than it may be")
    with dest.open("wb") as out:
        # identity: the bytes as stored (an archive), never a compressed transfer of them
        reply = client.request("GET", url[len(base):] or "/", idempotent=True, limit=limit,
                               sink=out, ok=lambda s: s == 200,  # noqa: PLR2004 - HTTP OK
                               headers={"Accept-Encoding": "identity"})
    if reply.status_code != 200:  # noqa: PLR2004 - HTTP OK
        raise TransportError(f"{url}: HTTP {reply.status_code} {reply.text[:200]}",
                             hint=client.hint)


def fetch_archive(url: str, dest: Path) -> None:
    """A runtime_env's http(s) archive (working_dir, py_modules) into `dest`: `download`, at
    most what one archive may unpack to (store.unpack's limit). What every Environments that
    serves a request is given (the agent, rtenv's Ray plugin, `rtenv run`)."""
    from rtenv_cli.core.store.unpack import MAX_TOTAL_BYTES

    download(url, dest, limit=MAX_TOTAL_BYTES)
