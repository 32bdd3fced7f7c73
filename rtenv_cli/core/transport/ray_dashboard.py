"""Ray 2.60's dashboard package API: `GET|PUT /api/packages/gcs/<name>` (job_head.py).

GET answers 200/404 and pins the URI for 10 minutes (even when absent); PUT takes the whole zip
as the body, streamed here from the file. The head's aiohttp refuses bodies over 100 MiB (413;
older Ray: 500 with HTTPRequestEntityTooLarge), so the size is checked before sending. Token
auth (RAY_AUTH_MODE=token) is detected via the public `/api/authentication_mode`; the token comes
from RAY_AUTH_TOKEN, the file at RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token, like Ray's loader.
No browser User-Agent/Origin is sent: the dashboard refuses PUTs from "browsers" (405).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

from rtenv_cli.core.errors import PackageTooLargeError, TransportError
from rtenv_cli.core.transport.base import RAY_HTTP_LIMIT, ZipLayout
from rtenv_cli.core.transport.http import HttpClient, Reply, Timeouts


def load_token(env: Mapping[str, str] | None = None, *, to: str | None = None) -> str | None:
    """RAY_AUTH_TOKEN, then the first line of RAY_AUTH_TOKEN_PATH, then ~/.ray/auth_token.

    `to`: where the token is about to go (a URL or host:port). A token read from a file is held
    to the rule of rtenv's own token file: to a loopback port only while no other user listens
    there (another user on 8265 or 6379 while this user's Ray is down gets a TransportError's
    refusal, not the cluster's token). RAY_AUTH_TOKEN is given: it goes where it is told."""
    env = os.environ if env is None else env
    if env.get("RAY_AUTH_TOKEN", "").strip():
        return env["RAY_AUTH_TOKEN"].strip()
    candidates = [env["RAY_AUTH_TOKEN_PATH"]] if env.get("RAY_AUTH_TOKEN_PATH") else []
    candidates.append(str(Path.home() / ".ray" / "auth_token"))
    for c in candidates:
        try:
            lines = Path(c).expanduser().read_text().splitlines()
        except OSError:
            continue
        if lines and lines[0].strip():
            if to is not None:
                from rtenv_cli.core.transport.agent_token import check_file_token_target

                check_file_token_target(
                    to, f"the Ray token in {c}", expected="this user's Ray",
                    hint="start Ray on ports of its own; if that user's cluster is the one "
                    "you mean, give its token with RAY_AUTH_TOKEN")
            return lines[0].strip()
    return None


def too_large_error(uri: str, size: int, limit: int, offenders: list[tuple[str, int]] | None,
                    label: str, *, route: str = "") -> PackageTooLargeError:
    """`route`: a way to the same cluster with a larger limit (a dashboard's GCS)."""
    top = ""
    if offenders:
        top = "; largest: " + ", ".join(f"{n} ({s / 2**20:.1f} MiB)" for n, s in offenders[:5])
    return PackageTooLargeError(
        f"{uri} is {size / 2**20:.1f} MiB compressed, over the {limit / 2**20:.0f} MiB upload "
        f"limit of {label}{top}",
        hint=f"{route}exclude what the job does not need (`excludes`, .rayignore; see `rtenv "
        "push --dry-run`), or publish it where Ray's nodes can fetch it: `rtenv push "
        "--stage-to file:///shared/dir` or `--stage-to http://<rtenv agent>`")


class RayDashboardTarget:
    """Push to a Ray cluster through its dashboard (default port 8265)."""

    max_upload_bytes: int | None = RAY_HTTP_LIMIT
    pins = True
    layout: ZipLayout = "ray"
    verifies_packages = False

    def __init__(self, base_url: str, token: str | None = None, *,
                 env: Mapping[str, str] | None = None, timeouts: Timeouts | None = None) -> None:
        self.http = HttpClient(base_url, "Ray dashboard", timeouts=timeouts,
                               hint="check --address (the dashboard URL, default port 8265) "
                               "and that the cluster is up")
        # never a browser UA: Ray refuses their PUTs
        self.http.headers["User-Agent"] = "rtenv"
        self.url = self.http.url
        self.label = f"Ray cluster {self.url}"
        host = urlsplit(self.url).hostname or "<head>"
        # the GCS takes what the dashboard's 100 MiB limit refuses (ray_gcs.GRPC_MAX)
        self.larger_route = (f"push straight to the cluster's GCS, whose limit is 512 MiB: "
                             f"--address {host}:6379 (its default port; `ray status` on the "
                             "head prints it); or ")
        self._env = dict(os.environ if env is None else env)
        self._token = token
        self._ready = False
        self.offenders: dict[str, list[tuple[str, int]]] = {}  # uri -> largest inputs

    # -- http ---------------------------------------------------------------------------------
    def _prepare(self) -> None:
        """Token auth: discovered once, before the first package call."""
        if self._ready:
            return
        token = self._token
        if token is None and self._auth_mode() == "token":
            token = load_token(self._env, to=self.url)
            if token is None:
                raise TransportError(f"{self.label} requires a token (RAY_AUTH_MODE=token)",
                                     hint="set RAY_AUTH_TOKEN, or RAY_AUTH_TOKEN_PATH to "
                                     "the token file (default ~/.ray/auth_token)")
        if token:
            self.http.headers["Authorization"] = f"Bearer {token}"
        self._ready = True

    def _auth_mode(self) -> str:
        try:
            r = self.http.request("GET", "/api/authentication_mode", idempotent=True)
            body = r.json() if r.status_code == 200 else {}  # noqa: PLR2004 - HTTP OK
        except TransportError:
            return "disabled"  # older Ray, or unreachable: the real call reports it
        return str(body.get("authentication_mode", "disabled")) if isinstance(body, dict) \
            else "disabled"

    def _call(self, method: str, name: str, body_path: Path | None = None) -> Reply:
        """GET checks and PUTs of content-addressed packages are idempotent: both retried on
        refused/reset connections and 502/503/504 (HttpClient)."""
        self._prepare()
        headers = {} if body_path is None else {"Content-Type": "application/octet-stream"}
        resp = self.http.request(method, f"/api/packages/gcs/{name}", idempotent=True,
                                 body_path=body_path, headers=headers,
                                 ok=lambda s: s in (200, 404))
        self._check_auth(resp)
        return resp

    def _check_auth(self, resp: Reply) -> None:
        if resp.status_code == 401:  # noqa: PLR2004 - HTTP Unauthorized
            raise TransportError(f"{self.label} requires a token (HTTP 401: missing token)",
                                 hint="set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH")
        if resp.status_code == 403:  # noqa: PLR2004 - HTTP Forbidden
            raise TransportError(f"{self.label} refused the token (HTTP 403: invalid token)",
                                 hint="use the cluster's token (RAY_AUTH_TOKEN / "
                                 "RAY_AUTH_TOKEN_PATH / ~/.ray/auth_token)")

    # -- Target -------------------------------------------------------------------------------
    def exists(self, uri: str) -> bool:
        resp = self._call("GET", package_name(uri))
        if resp.status_code == 200:  # noqa: PLR2004
            return True
        if resp.status_code == 404:  # noqa: PLR2004
            return False
        raise TransportError(f"{self.label} answered HTTP {resp.status_code} for {uri}: "
                             f"{resp.text[:300]}")

    def upload(self, uri: str, path: Path, *,
               on_progress: Callable[[int], None] | None = None) -> None:
        path = Path(path)
        size = path.stat().st_size
        if self.max_upload_bytes is not None and size > self.max_upload_bytes:
            raise too_large_error(uri, size, self.max_upload_bytes, self.offenders.get(uri),
                                  self.label, route=self.larger_route)
        resp = self._call("PUT", package_name(uri), body_path=path)
        text = resp.text[:300] if resp.status_code != 200 else ""  # noqa: PLR2004
        if resp.status_code == 413 or (resp.status_code == 500  # noqa: PLR2004
                                       and "EntityTooLarge" in text):
            raise too_large_error(uri, size, self.max_upload_bytes or size,
                                  self.offenders.get(uri), self.label, route=self.larger_route)
        if resp.status_code != 200:  # noqa: PLR2004
            raise TransportError(f"{self.label} refused {uri}: HTTP {resp.status_code} {text}")
        if on_progress is not None:
            on_progress(size)

    def published_uri(self, uri: str) -> str:
        return uri

    @property
    def env(self) -> Mapping[str, str]:
        return self._env

    @property
    def token(self) -> str | None:
        """The token given for the cluster (None: Ray's own, read where each call goes)."""
        return self._token


def package_name(uri: str) -> str:
    """`_ray_pkg_<hash>.zip` of a gcs:// URI; any other URI cannot go to a Ray cluster."""
    if not uri.startswith("gcs://"):
        raise TransportError(f"only gcs:// packages can be pushed to a Ray cluster, not {uri}")
    return uri.removeprefix("gcs://")
