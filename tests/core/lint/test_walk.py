"""One walk over a runtime_env value (lint.context.walk): the rules that look at every node
(RTE104's YAML coercions) and at every string (RTE139's credentials) see the same paths."""

from __future__ import annotations

from rtenv_cli.core.lint.context import walk
from rtenv_cli.core.lint.rules.uris import uri_secrets

DATA = {"pip": {"packages": ["six", {"odd": 1}], "pip_install_options": [
    "--index-url", "https://user:s3cretpass@pypi.example.com/simple"]},
        "env_vars": {"A": "1"}}


def test_walk_yields_every_node_with_its_json_path_depth_first() -> None:
    paths = [p for p, _ in walk(DATA["pip"], ("pip",))]
    assert paths == [("pip",), ("pip", "packages"), ("pip", "packages", 0),
                     ("pip", "packages", 1), ("pip", "packages", 1, "odd"),
                     ("pip", "pip_install_options"), ("pip", "pip_install_options", 0),
                     ("pip", "pip_install_options", 1)]


def test_the_credential_rule_reads_strings_at_any_depth() -> None:
    assert uri_secrets(DATA) == {"s3cretpass"}
