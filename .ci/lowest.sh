#!/usr/bin/env bash
# The declared dependency floors are true: install rtenv with every direct dependency at the
# lowest version pyproject.toml allows (`uv pip install --resolution lowest-direct`) in a venv of
# its own, and run the quick (not ray, not slow) tests of every part whose dependency has a floor:
# the CLI shell (typer, click, rich), the config (platformdirs, tomli), packaging (pathspec), the
# agent (starlette, uvicorn, httptools, uvloop), the transports (h2, requests) and watch
# (watchdog).
#
#   bash .ci/lowest.sh                 # venv in .ci/lowest-venv (kept for re-runs)
#   LOWEST_VENV=/tmp/x bash .ci/lowest.sh -k config   # extra args go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${LOWEST_VENV:-.ci/lowest-venv}
uv=$(command -v uv || echo .ci/venv/bin/uv)
[ -x "$uv" ] || { echo "lowest.sh: needs uv on PATH (or .ci/venv from .ci/run)" >&2; exit 2; }
python=${LOWEST_PYTHON:-python3}
"$uv" venv --quiet --allow-existing --python "$python" "$venv"
VIRTUAL_ENV=$venv "$uv" pip install --quiet --resolution lowest-direct -e '.[test]'
# The test tools lift two floors (ray[serve] needs starlette>=1.0.1, mypy pathspec>=1.0): the
# tests below use neither Serve's HTTP side nor mypy, so put rtenv's own floors back.
lifted=$("$venv/bin/python" -c '
import re, sys
try:
    import tomllib
except ModuleNotFoundError:
    import tomli as tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
print(" ".join(d for d in deps if re.match(r"(starlette|pathspec)\b", d)))')
# shellcheck disable=SC2086 # one word per requirement
VIRTUAL_ENV=$venv "$uv" pip install --quiet --upgrade --resolution lowest-direct $lifted
VIRTUAL_ENV=$venv "$uv" pip list 2>/dev/null | grep -iE '^(typer|click|rich|pathspec|platformdirs|filelock|starlette|uvicorn|h2|pyyaml|requests|watchdog|httptools|uvloop|uv|nvidia-ml-py|pytest|hypothesis|httpx) '
"$venv/bin/python" -m pytest -q -p no:cacheprovider -m "not ray and not slow" \
  tests/cli tests/core/test_config.py tests/core/packaging \
  tests/core/agent tests/core/transport tests/core/watch "$@"
