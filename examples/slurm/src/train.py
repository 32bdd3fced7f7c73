"""One task per node: proves the environment each node's agent built (package, env var, node)."""

import os

import six

print(f"{os.environ.get('SLURMD_NODENAME', '?')}: six {six.__version__}, MODEL={os.environ['MODEL']}")
