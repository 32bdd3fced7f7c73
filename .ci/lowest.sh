#!/usr/bin/env bash
# The declared dependency floors are true: install rtenv with every direct dependency at the
# lowest version pyproject.toml allows (`uv pip install --resolution lowest-direct`) in a venv of
# its own, and run the quick tests of the CLI shell, the config and packaging against them.
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
VIRTUAL_ENV=$venv "$uv" pip list 2>/dev/null | grep -iE '^(typer|click|rich|pathspec|platformdirs|filelock|starlette|uvicorn|h2|pyyaml|requests|watchdog|httptools|uvloop|uv|nvidia-ml-py|pytest|hypothesis|httpx) '
# the test runs cover the CLI shell and the config, the ignore rules that use pathspec, and the
# watch (watchdog's polling and non-Linux observers)
"$venv/bin/python" -m pytest -q -p no:cacheprovider -m "not ray and not slow" \
  tests/cli tests/core/test_config.py tests/core/packaging tests/core/watch "$@"
