"""`gpu-admission usage`: what the node agents measured, from Prometheus. `--by workload` (the
default): each workload's peak GPU memory against its share, the share it needs and the
`nvidia.com/gpu.replicas` that allows on each GPU model. `--by namespace`: GPU-hours held and
GPU memory-hours used per namespace, a bill from Kubernetes data. `--idle`: the workloads
holding GPUs they have not used for an hour, since when, and the GPU-hours held idle (per
namespace with `--by namespace`). Needs the monitoring overlay's recording rules
(docs/gpu-usage.md).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _duration(text: str) -> str:
    from gpu_usage.usage_report import checked_duration

    try:
        return checked_duration(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_usage_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "usage",
        help="GPU use per workload (share needed) or per namespace (GPU-hours), from Prometheus",
        description=__doc__,
    )
    parser.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus's base URL")
    parser.add_argument("--by", choices=("workload", "namespace"), default="workload")
    parser.add_argument(
        "--since", type=_duration, default="7d", metavar="DURATION", help="the period (default 7d)"
    )
    parser.add_argument(
        "--idle",
        action="store_true",
        help="the workloads idle now (--by namespace: GPU-hours held idle over the period)",
    )
    parser.add_argument("-o", "--output", choices=("table", "csv", "json"), default="table")
    parser.set_defaults(func=usage_command)


def _idle(args: argparse.Namespace) -> tuple[list[Any], str]:
    import time

    from gpu_admission.process.prometheus_api import query_range
    from gpu_usage import idle_report as idle
    from gpu_usage.usage_report import duration_seconds

    period = duration_seconds(args.since)
    step, now = idle.range_step(period), time.time()
    matrix = query_range(args.prometheus, idle.IDLE_SERIES, now - period, now, step)
    if args.by == "workload":
        rows: list[Any] = idle.idle_workloads(matrix, now, step)
        return rows, idle.render_idle_workloads(rows, args.output)
    rows = idle.idle_namespaces(matrix, now, step)
    return rows, idle.render_idle_namespaces(rows, args.output)


def usage_command(args: argparse.Namespace) -> int:
    from gpu_admission.process.prometheus_api import PrometheusError, query
    from gpu_usage import usage_report as report

    def ask(promql: str) -> Any:
        return query(args.prometheus, promql.format(since=args.since))

    try:
        if args.idle:
            rows, text = _idle(args)
        elif args.by == "workload":
            rows = report.workload_rows(
                ask(report.PEAK_QUERY), ask(report.SHARE_QUERY), ask(report.MODELS_QUERY)
            )
            text = report.render_workloads(rows, args.output)
        else:
            rows = report.namespace_rows(
                ask(report.hours_query(report.GPUS_HELD, args.since)),
                ask(report.hours_query(report.MEMORY_USED, args.since)),
            )
            text = report.render_namespaces(rows, args.output)
    except PrometheusError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
    if not rows and args.idle:
        print(f"no workload held GPUs idle in the last {args.since}", file=sys.stderr)
    elif not rows:
        print(
            f"no series over the last {args.since}: is the gpu-usage agent installed and scraped, "
            "and are the monitoring overlay's recording rules loaded?",
            file=sys.stderr,
        )
    if text:
        print(text)
    return EXIT_OK
