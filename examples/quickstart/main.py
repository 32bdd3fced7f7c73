"""Proof that `rtenv run` built the environment: a package, a working_dir file, an env var."""

import os
import sys
from pathlib import Path

import six

print(f"six {six.__version__} from {Path(six.__file__).parent}")
print(f"data.txt: {Path('data.txt').read_text().strip()}")
print(f"GREETING={os.environ.get('GREETING')}")
print(f"python: {sys.executable}")
