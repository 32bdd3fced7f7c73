"""The rtenv part of `rtenv cache ls --address ... --format json`, one line per node and
environment (the full text output also lists Ray's own caches, with paths of this machine)."""

import json
import sys

for node in json.load(sys.stdin)["nodes"]:
    store = node.get("rtenv") or {}
    for entry in store.get("entries", []):
        if entry["kind"] in ("pip", "uv"):
            print(f"node {node['node_id'][:12]}: {entry['kind']} {entry['label']}  "
                  f"refs={entry['refs']}  on disk: {entry['size_bytes'] > 0}")
