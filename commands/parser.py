"""The `gpu-admission` sub-commands (`serve`, `controller`, `review`, `audit`, `certs issue`,
`load`, `admission-policy`, `gpu-usage`, `usage`) and their parser.

Each sub-command's parser sets `func(args) -> int`, the exit status. Usage and configuration
errors exit 2 with a message that names the flag or config field; failures to start exit 1.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from certs.cli import add_certs_parser
from commands.admission_policy import add_admission_policy_parser
from commands.audit import add_audit_parser
from commands.flags import config_overrides, port
from commands.gpu_usage import add_gpu_usage_parser
from commands.load import add_load_parser
from commands.review import add_review_parser
from commands.usage import add_usage_parser
from gpu_admission import __version__
from gpu_admission.cluster.kube import ClusterConfigError, api_client
from gpu_admission.config.model import Config, ConfigError, load_config
from gpu_admission.process.logging_setup import LOG_FORMATS, LOG_LEVELS, setup_logging

log = logging.getLogger("gpu_admission")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _common_flags(parser: argparse.ArgumentParser, offline: str) -> None:
    parser.add_argument("--config", type=Path, metavar="FILE", help="YAML config file")
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="FILE",
        help=f"kubeconfig to reach the cluster (default: the pod's in-cluster ServiceAccount; "
        f"{offline})",
    )
    parser.add_argument("--host", metavar="H", help="address to listen on (default 0.0.0.0)")
    parser.add_argument(
        "--metrics-port",
        type=port,
        metavar="PORT",
        help="plain-HTTP metrics port (default 9090; 0 turns the metrics listener off)",
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, help="default: info")
    parser.add_argument("--log-format", choices=LOG_FORMATS, help="default: json")


def add_serve_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the admission webhooks",
        description="Serve the admission webhooks over HTTPS and metrics over HTTP. Flags "
        "override the config file, which overrides the defaults. With an empty --cert-dir a "
        "CA and serving certificate are issued there. The dataset controller runs apart: "
        "`gpu-admission controller`.",
    )
    _common_flags(parser, "with neither, run offline without cluster caches")
    parser.add_argument("--port", type=port, metavar="PORT", help="HTTPS port (default 8443)")
    parser.add_argument(
        "--cert-dir", type=Path, metavar="DIR", help="directory of ca.crt, tls.crt and tls.key"
    )
    parser.set_defaults(func=serve_command)


def add_controller_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "controller",
        help="run the dataset controller (its own process, beside `serve`)",
        description="Run the dataset loader controller: every replica campaigns for the "
        "leader Lease, the leader reconciles. Serves /metrics, /healthz and /readyz over plain "
        "HTTP on the metrics port. Flags override the config file.",
    )
    _common_flags(parser, "the controller needs one of the two")
    parser.set_defaults(func=controller_command)


def _configured(args: argparse.Namespace) -> Config | None:
    """The config, with logging set up from it; None (after saying why) when it is unusable."""
    try:
        config: Config = load_config(args.config, config_overrides(args))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    setup_logging(config.server.log_level, config.server.log_format)
    return config


# `serve` and `controller` each import their own stack when they run, not the other's: the
# webhook service never holds the controller's modules, the controller never holds the
# certificate code and the webhook server (about 13 MiB resident between them).


def serve_command(args: argparse.Namespace) -> int:
    from certs.pem import CertificateError
    from commands.serve import serve

    config = _configured(args)
    if config is None:
        return EXIT_USAGE
    try:
        asyncio.run(serve(config))
    except (ConfigError, ClusterConfigError) as exc:
        log.error("cannot start: %s", exc)
        return EXIT_USAGE
    except (CertificateError, OSError) as exc:
        # OSError: the port is taken or the certificate directory is not writable.
        log.error("cannot start: %s", exc)
        return EXIT_FAILED
    return EXIT_OK


def controller_command(args: argparse.Namespace) -> int:
    from commands.controller import run_controller
    from gpu_admission.process import event_loop

    config = _configured(args)
    if config is None:
        return EXIT_USAGE
    try:
        api = api_client(config.kubeconfig)
    except ClusterConfigError as exc:
        log.error("cannot start: %s", exc)
        return EXIT_USAGE
    try:
        event_loop.run(run_controller(config, api))
    except OSError as exc:  # the metrics port is taken
        log.error("cannot start: %s", exc)
        return EXIT_FAILED
    finally:
        api.close()
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-admission",
        description="Admission webhooks and a dataset-loading controller for Kubernetes GPU "
        "clusters.",
    )
    parser.add_argument("--version", action="version", version=f"gpu-admission {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_serve_parser(subparsers)
    add_controller_parser(subparsers)
    add_review_parser(subparsers)
    add_audit_parser(subparsers)
    add_certs_parser(subparsers)
    add_load_parser(subparsers)
    add_admission_policy_parser(subparsers)
    add_gpu_usage_parser(subparsers)
    add_usage_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed usage and the error
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    return int(args.func(args))
