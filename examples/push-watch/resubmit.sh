#!/bin/sh
# `rtenv push --watch --on-change` runs this after every push, with the pushed runtime_env as JSON
# in $RTENV_RUNTIME_ENV and the working_dir's URI in $RTENV_URI. It stops the job it submitted
# last (if still running) and submits the job again on the new code, without waiting for it, so
# the watch goes on at once; `ray job logs -f <id>` follows a job.
set -eu
last=${TMPDIR:-/tmp}/rtenv-push-watch.last-job
if [ -f "$last" ]; then
    ray job stop --no-wait "$(cat "$last")" >/dev/null 2>&1 || true
fi
id="push-watch-$(date +%s)-$$"
ray job submit --no-wait --submission-id "$id" --runtime-env-json "$RTENV_RUNTIME_ENV" \
    -- python train.py >/dev/null 2>&1
echo "$id" > "$last"
echo "submitted $id on $RTENV_URI"
