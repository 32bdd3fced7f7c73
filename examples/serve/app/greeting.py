"""A module of the working_dir, imported by hello.py: the reply names the package it runs from."""

import os
from pathlib import Path


def reply() -> str:
    # Ray unpacks the pushed working_dir into .../working_dir_files/_ray_pkg_<hash>/
    return f"{os.environ['GREETING']}, from package {Path(__file__).parent.name}"
