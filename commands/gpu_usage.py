"""`gpu-admission gpu-usage`: the node agent. What each container really uses of its GPU, from
NVML per process, mapped through `/proc/<pid>/cgroup` to its container and through the API
server to its pod; served as metrics on the metrics port, with a Warning Event on a pod whose
container passes its memory share.

`--once` prints the node's table (utilization over one second) and exits: `kubectl exec` it in
the agent's pod, or run it on a node; without access to the API server, processes in pods are
named by pod UID and container ID, and processes outside any pod by their command.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from commands.flags import config_overrides, port
from gpu_admission.cluster.kube import ClusterConfigError, api_client, in_cluster
from gpu_admission.config.model import ConfigError, GpuConfig, load_config
from gpu_admission.process.http_probes import create_metrics_app
from gpu_admission.process.logging_setup import LOG_FORMATS, LOG_LEVELS, setup_logging
from gpu_admission.process.metrics import Metrics

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEFAULT_INTERVAL = 5.0
ONCE_WINDOW_SECONDS = 1.0  # `--once`: the utilization window its table is over
DEFAULT_ALLOWANCE_MIB = 1024
EXIT_DRIVER_CHANGED = 3  # the kubelet restarts the container, with the new driver's library
log = logging.getLogger("gpu_admission.gpu_usage")


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{value:g} s is out of range (0.1 to 3600 seconds)")
    return value


def _allowance(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of MiB") from None
    if not 0 <= value <= 65536:
        raise argparse.ArgumentTypeError(f"{value} MiB is out of range (0 to 65536)")
    return value


def add_gpu_usage_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "gpu-usage",
        help="the node agent: what each container really uses of its GPU",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", type=Path, metavar="FILE", help="YAML config file")
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="FILE",
        help="kubeconfig to list this node's pods (default: the pod's in-cluster "
        "ServiceAccount; with neither, pods are named by UID)",
    )
    parser.add_argument(
        "--metrics-port", type=port, metavar="PORT", help="plain-HTTP metrics port (default 9090)"
    )
    parser.add_argument(
        "--interval",
        type=_interval,
        default=DEFAULT_INTERVAL,
        metavar="S",
        help=f"seconds between sweeps (default {DEFAULT_INTERVAL:g})",
    )
    parser.add_argument(
        "--context-allowance-mib",
        type=_allowance,
        default=DEFAULT_ALLOWANCE_MIB,
        metavar="MIB",
        help="GPU memory allowed per process above a container's share before it is over it: "
        "one CUDA context with its libraries' kernels (default "
        f"{DEFAULT_ALLOWANCE_MIB}; docs/gpu-usage.md has the measured sizes)",
    )
    parser.add_argument(
        "--release-nvml",
        action="store_true",
        help="shut NVML down after each sweep, each then opening every GPU again (seconds per "
        "GPU without persistence mode); default: held, and released while the GPU Operator's "
        "driver manager takes the driver off the node (docs/gpu-usage.md)",
    )
    # Before NVML was held by default: the flag that asked for it is accepted and changes nothing.
    parser.add_argument("--hold-nvml", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--once", action="store_true", help="print the node's table and exit")
    parser.add_argument(
        "--proc",
        type=Path,
        default=Path("/proc"),
        metavar="DIR",
        help="the host's /proc (default /proc, with hostPID; or a hostPath mount of it)",
    )
    parser.add_argument(
        "--node",
        default=os.environ.get("NODE_NAME") or socket.gethostname(),
        help="this node's name (default: $NODE_NAME, else the host name)",
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, help="default: info")
    parser.add_argument("--log-format", choices=LOG_FORMATS, help="default: json")
    parser.set_defaults(func=gpu_usage_command)
    return parser


def main(argv: list[str]) -> int:
    """`gpu-admission gpu-usage ...` without the full parser (commands/cli.py says why)."""
    parser = argparse.ArgumentParser(prog="gpu-admission")
    add_gpu_usage_parser(parser.add_subparsers())
    try:
        args = parser.parse_args(["gpu-usage", *argv])
    except SystemExit as exc:  # argparse already printed usage and the error
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    return int(args.func(args))


def _node_pods(args: argparse.Namespace, gpu: GpuConfig) -> Any:
    """The node's pods through the API server, or None (said on stderr) without access."""
    from gpu_usage.node_pods import NodePods

    if args.kubeconfig is None and not in_cluster():
        print(
            "not in a pod and no --kubeconfig: processes in pods are named by pod UID",
            file=sys.stderr,
        )
        return None
    return NodePods(api_client(args.kubeconfig), args.node, gpu)


def gpu_usage_command(args: argparse.Namespace) -> int:
    from gpu_usage.agent import Agent
    from gpu_usage.driver_pause import DriverPause
    from gpu_usage.host_processes import ProcessTable
    from gpu_usage.nvml_faults import DriverChanged, NvmlUnavailable
    from gpu_usage.nvml_reader import GPU_TIMEOUT_SECONDS, NvmlReader
    from gpu_usage.over_share import OverShareWatch
    from gpu_usage.table import render
    from gpu_usage.units import MIB

    try:
        config = load_config(args.config, config_overrides(args))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        pods = _node_pods(args, config.gpu)
    except ClusterConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # A GPU whose calls hang is named before the sweep is due again, the others read.
    gpu_timeout = min(GPU_TIMEOUT_SECONDS, 0.8 * args.interval)
    reader = NvmlReader(release_between_sweeps=args.release_nvml, gpu_timeout=gpu_timeout)
    watch = OverShareWatch(args.context_allowance_mib * MIB)
    pause = None if pods is None or args.once else DriverPause(pods.api, args.node)
    agent = Agent(
        reader, ProcessTable(args.proc), pods, instance=args.node, watch=watch, pause=pause
    )
    if args.once:
        try:
            # NVML's first answer opens the utilization window; the table is over the next.
            agent.sweep()
            time.sleep(ONCE_WINDOW_SECONDS)  # the window measured, not a wait for a state
            result = agent.sweep()
        except NvmlUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_FAILED
        finally:
            agent.reader.stop()
        if pods is not None and pods.error:
            print(f"warning: {pods.error}", file=sys.stderr)
        print(render(result.rows))
        return EXIT_OK
    setup_logging(config.server.log_level, config.server.log_format)
    try:
        asyncio.run(_serve(agent, config.server.host, config.server.metrics_port, args.interval))
    except OSError as exc:  # the metrics port is taken
        log.error("cannot start: %s", exc)
        return EXIT_FAILED
    except DriverChanged as exc:
        log.error("exiting: %s", exc)
        return EXIT_DRIVER_CHANGED
    return EXIT_OK


async def _serve(agent: Any, host: str, port: int, interval: float) -> None:
    from gpu_usage.usage_metrics import AgentMetrics

    metrics = Metrics()
    agent.metrics = AgentMetrics(metrics)
    runner = web.AppRunner(
        create_metrics_app(metrics, agent.readiness, agent.liveness), access_log=None
    )
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    log.info(
        "gpu-usage agent on node %s: metrics on :%d, a sweep every %g s",
        agent.instance,
        port,
        interval,
    )
    if agent.pause is not None:
        agent.pause.start()
    try:
        await agent.run(interval, stop)
    finally:
        if agent.pause is not None:
            agent.pause.stop()
        agent.reader.stop()
        await runner.cleanup()
