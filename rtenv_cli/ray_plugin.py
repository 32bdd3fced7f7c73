"""rtenv's Ray runtime_env plugin: `rtenv_cli.ray_plugin.RtenvPlugin` (a stable class path).

Load it on every node before `ray start` (`rtenv ray-env` prints these)::

    export RAY_RUNTIME_ENV_PLUGINS='[{"class": "rtenv_cli.ray_plugin.RtenvPlugin", "priority": 9}]'
    export RAY_RUNTIME_ENV_RTENV_CACHE_SIZE_GB=0

then ask for `runtime_env={"rtenv": {"pip": ["six==1.16.0"]}}` (the `rtenv` field's schema is in
`rtenv_cli.core.rayplugin.schema`).

Ray's agent accepts only subclasses of its `RuntimeEnvPlugin` (`RuntimeEnvPluginManager.
validate_plugin_class`), so the class must derive from a Ray class; and nothing in rtenv_cli may
import Ray when it is imported (the CLI's start-up budget; tests/test_architecture.py). The
class is therefore made on first access of the attribute (PEP 562 `__getattr__`), which only
Ray's agent does, with Ray already imported. Importing this module or constructing the class
never raises: the store is opened, and uv looked for, by each setup that needs them.
"""

from __future__ import annotations

from typing import Any

from rtenv_cli.core.rayplugin.schema import FIELD, PLUGIN_CLASS, PRIORITY

__all__ = ["FIELD", "PLUGIN_CLASS", "PRIORITY", "RtenvPlugin"]  # noqa: F822 - made by __getattr__

_made: dict[str, type] = {}


def __getattr__(name: str) -> Any:
    if name != "RtenvPlugin":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _made:
        _made[name] = _make_class()
    return _made[name]


def _make_class() -> type:
    import logging

    from ray._private.runtime_env.plugin import RuntimeEnvPlugin

    from rtenv_cli.core.errors import RtenvError
    from rtenv_cli.core.rayplugin.engine import (
        URI_SCHEME,
        Engine,
        SetupError,
        apply_trees,
        drop_guard,
    )
    from rtenv_cli.core.rayplugin.limits import Guard, command_prefix, describe
    from rtenv_cli.core.rayplugin.schema import parse
    from rtenv_cli.core.trees.manifest import SCHEME

    class RtenvPlugin(RuntimeEnvPlugin):
        """Builds the `rtenv` field's venv with uv on the node's rtenv store."""

        name = FIELD
        priority = PRIORITY

        def __init__(self) -> None:
            import threading

            self._engine = Engine()
            self._limits = Guard()
            # the node's `n:` key in the cluster's KV, so a push sees this node loads rtenv
            threading.Thread(target=self._engine.announce, daemon=True,
                             name="rtenv-announce").start()

        @staticmethod
        def validate(runtime_env_dict: dict[str, Any]) -> None:
            try:
                parse(runtime_env_dict.get(FIELD), runtime_env_dict)
            except RtenvError as exc:
                raise ValueError(str(SetupError.of(exc))) from None

        def get_uris(self, runtime_env: Any) -> list[str]:
            return self._engine.uris(runtime_env)

        async def create(self, uri: str | None, runtime_env: Any, context: Any,
                         logger: logging.Logger) -> float:
            return await self._engine.create(uri, runtime_env, logger)

        def modify_context(self, uris: list[str], runtime_env: Any, context: Any,
                           logger: logging.Logger) -> None:
            drop_guard(runtime_env)
            try:
                spec = self._engine.spec(runtime_env)
                if spec.limits:
                    self._limits.check(spec.limits)
            except RtenvError as exc:
                raise SetupError.of(exc) from None
            if spec.trees:  # as Ray's working_dir and py_modules plugins apply theirs
                apply_trees(context, spec, self._engine)
            if spec.kind is not None:
                uris = [u for u in uris or self._engine.uris(runtime_env)
                        if u.startswith(URI_SCHEME)]
                if not uris:
                    raise SetupError(f"rtenv: runtime_env['{FIELD}'] changed during its setup")
                venv = self._engine.venv(uris[0])
                context.py_executable = f"{venv}/bin/python"
                # like Ray's pip plugin: an entrypoint's `python` is the venv's too
                context.command_prefix += ["source", f"{venv}/bin/activate", "1>&2", "&&"]
            if spec.limits:  # the worker execs into its own cgroup (rayplugin/limits.py)
                context.command_prefix += command_prefix(spec.limits)
                self._limits.watch()
                logger.info("rtenv: workers of this runtime_env run in a cgroup with %s",
                            describe(spec.limits))

        def delete_uri(self, uri: str, logger: logging.Logger) -> float:
            self._limits.sweep()
            if uri.startswith(SCHEME):
                return self._engine.release_tree(uri, logger)
            return self._engine.release(uri, logger)

    RtenvPlugin.__module__ = __name__
    RtenvPlugin.__qualname__ = "RtenvPlugin"
    return RtenvPlugin
