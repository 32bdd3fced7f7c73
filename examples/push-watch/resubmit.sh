#!/bin/sh
# `rtenv push --watch --on-change` runs this after every push, with the pushed runtime_env as JSON
# in $RTENV_RUNTIME_ENV and the working_dir's URI in $RTENV_URI. It runs the job on the new code
# and waits for it (its output goes to the watch's stderr).
set -eu
echo "resubmit: $RTENV_URI"
exec ray job submit --runtime-env-json "$RTENV_RUNTIME_ENV" -- python train.py
