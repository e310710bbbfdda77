"""The `gpu-admission` command.

`load` is what every loader Job runs, so it starts without importing the service (aiohttp, the
kubernetes client, the policies): that import costs over a second, which on small datasets
would be most of a load. `gpu-usage`, the node agent on every GPU node, starts without the
webhooks' and the controller's modules too (about 30 MiB resident it would hold for nothing).
Every other sub-command goes through the full parser.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["load"] and not {"-h", "--help"} & set(args):
        from commands.load import main as load

        return load(args[1:])
    if args[:1] == ["gpu-usage"]:
        from commands.gpu_usage import main as gpu_usage

        return gpu_usage(args[1:])
    from commands.parser import main as run

    return run(args)
