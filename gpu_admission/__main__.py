"""`python -m gpu_admission`: the same as the `gpu-admission` command."""

from gpu_admission.cli import main

raise SystemExit(main())
