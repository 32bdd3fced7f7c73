"""One task per node: proves the environment each node's agent built (package, env var, node)."""

import os

import six

node = os.environ.get("SLURMD_NODENAME", "?")
print(f"{node}: six {six.__version__}, MODEL={os.environ['MODEL']}")
