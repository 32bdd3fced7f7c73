"""Print a Serve config with its application's runtime_env replaced by the one `rtenv push` wrote.

    python with_pushed_env.py SERVE_CONFIG PUSHED_RUNTIME_ENV > deploy.yaml

`rtenv push` of a Serve config pushes the runtime_env of its one application (or of `--app NAME`)
and writes that runtime_env, with local paths replaced by URIs; this puts it back in place.
"""

import sys
from pathlib import Path

import yaml


def main(config_path: str, pushed_path: str, app: str | None = None) -> None:
    config = yaml.safe_load(Path(config_path).read_text())
    pushed = yaml.safe_load(Path(pushed_path).read_text())
    apps = [a for a in config["applications"] if app is None or a.get("name") == app]
    if len(apps) != 1:
        sys.exit(f"error: {config_path}: name the application (one of "
                 f"{[a.get('name') for a in config['applications']]}) as a third argument")
    apps[0]["runtime_env"] = pushed
    yaml.safe_dump(config, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main(*sys.argv[1:4])
