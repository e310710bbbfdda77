"""What several sub-commands' command lines share, without their stacks: the port flag's check
and the flags that override the config file. `gpu-usage` starts without the full parser
(commands/cli.py), so these live apart from it."""

from __future__ import annotations

import argparse
from typing import Any


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (0-65535)")
    return value


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Only the flags given: an absent flag must not override the config file. A sub-command
    without one of these flags simply has none to give."""
    server = {
        key: value
        for key in ("host", "port", "metrics_port", "log_level", "log_format")
        if (value := getattr(args, key, None)) is not None
    }
    overrides: dict[str, Any] = {}
    if server:
        overrides["server"] = server
    if getattr(args, "cert_dir", None) is not None:
        overrides["certs"] = {"cert_dir": str(args.cert_dir)}
    if getattr(args, "kubeconfig", None) is not None:
        overrides["kubeconfig"] = str(args.kubeconfig)
    return overrides
