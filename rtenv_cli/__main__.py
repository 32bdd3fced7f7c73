"""`python -m rtenv_cli` runs the CLI."""

from rtenv_cli.cli.main import main

raise SystemExit(main())
