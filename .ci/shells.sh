#!/usr/bin/env bash
# The completion tests drive zsh and fish as they drive bash (tests/test_completions.py): install
# Debian's packages when they are absent (CI runs as root on a Debian machine).
set -euo pipefail
missing=()
for shell in zsh fish; do command -v "$shell" >/dev/null || missing+=("$shell"); done
if [ "${#missing[@]}" -gt 0 ]; then
    # a mirror that does not answer must not fail CI: the tests then skip, saying which shell
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
        || echo "warning: could not install ${missing[*]}; their completion tests will skip" >&2
fi
