"""The console-script entry point."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (errors are handled in RtenvGroup)."""
    from rtenv_cli.cli import app

    try:
        app(args=argv, prog_name="rtenv")
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:
        from rtenv_cli.cli.group import silence_stdout

        silence_stdout()
        return 1
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
