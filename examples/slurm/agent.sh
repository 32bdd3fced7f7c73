#!/bin/bash
# One per node (srun --ntasks-per-node=1): an rtenv agent on loopback with a node-local store.
# Once it answers, it touches READY_DIR/<node> on the shared filesystem: the batch script waits
# for one such file per node before it starts the job step. PKGS_DIR is the shared directory the
# job's packages were pushed to: the agent may unpack file:// archives there (--allow-file-root).
# It requires the user's token (RTENV_HOME/agent-token), which the job's `rtenv run` reads.
# The store is a fresh directory of this user's alone (mktemp -d: 0700, a name nobody could
# have made first in a shared /tmp), removed when the agent stops.
set -euo pipefail
ready_dir=$1
pkgs_dir=$2
port=${RTENV_AGENT_PORT:-8790}
store=$(mktemp -d "${TMPDIR:-/tmp}/rtenv-agent-${SLURM_JOB_ID}.XXXXXX")
rtenv agent --port "$port" --root "$store" --allow-file-root "$pkgs_dir" &
agent=$!
stop() { kill "$agent" 2>/dev/null; wait "$agent" 2>/dev/null || true; rm -rf "$store"; }
trap stop EXIT
trap 'exit 143' TERM INT
until python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/openapi.json', timeout=2)" \
    2>/dev/null; do
  kill -0 "$agent" || exit 1   # the agent died: no ready file, the batch script gives up
  sleep 0.5
done
touch "$ready_dir/$SLURMD_NODENAME"
wait "$agent"
