"""`python -m commands`: the same as the `gpu-admission` command."""

from commands.cli import main

raise SystemExit(main())
