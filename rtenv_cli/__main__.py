"""`python -m rtenv_cli` runs the CLI."""

from rtenv_cli.launch import main

raise SystemExit(main())
