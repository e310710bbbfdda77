"""What the node agent costs its node: CPU at a sweep interval, resident memory, and a sweep's
time split into NVML, /proc and the rest.

    python -m bench.gpu_usage [--processes 64] [--gpus 8] [--interval 1] [--seconds 30] [--runs 3]

The real `gpu-admission gpu-usage` process runs with NVML played (tests/gpu_usage/nvml_shim:
the binding's calls answered from a file, in microseconds) over `--processes` GPU processes
spread over `--gpus` GPUs, each in a container of its own (their /proc entries in real formats,
in a folder given to `--proc`), without an API server (pods named by UID). What is measured is
therefore the agent's own work: the played NVML costs next to nothing, so a real node adds
NVML's own cost (measured on an H200 with 64 processes: 1.15 ms for the process list, 1.54 ms
for per-process utilization, a sweep).

Per run: the process's CPU time over `--seconds` (from /proc/<pid>/stat) as a share of one
core; its resident memory at the end (VmRSS); and from its own histogram
(`gpu_admission_gpu_usage_sweep_seconds`) the mean time of a sweep by part. Figures: median
(min - max) over `--runs`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.admission import _cpu_seconds, _free_port

ROOT = Path(__file__).resolve().parent.parent
SHIM = ROOT / "tests" / "gpu_usage" / "nvml_shim"
GIB = 1024**3


def node(folder: Path, processes: int, gpus: int) -> Path:
    """/proc entries and the played NVML's file for `processes` containers on `gpus` GPUs."""
    proc = folder / "proc"
    layout: list[dict] = [
        {"uuid": f"GPU-{g}", "name": "NVIDIA H200", "processes": {}, "sm": {}} for g in range(gpus)
    ]
    for index in range(processes):
        pid = 100_000 + index
        uid = f"00000000-0000-0000-0000-{index:012d}"
        entry = proc / str(pid)
        entry.mkdir(parents=True)
        (entry / "cgroup").write_text(f"0::/kubepods/burstable/pod{uid}/{index:064x}\n")
        (entry / "comm").write_text("python\n")
        gpu = layout[index % gpus]
        gpu["processes"][str(pid)] = GIB + index * 1024**2
        gpu["sm"][str(pid)] = index % 100
    state = folder / "nvml.json"
    state.write_text(json.dumps({"gpus": layout}))
    return state


def _vm_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _sweep_parts(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "gpu_admission_gpu_usage_sweep_seconds":
            continue
        for sample in family.samples:
            part = sample.labels.get("part", "")
            if sample.name.endswith("_sum"):
                sums[part] = sample.value
            elif sample.name.endswith("_count"):
                counts[part] = sample.value
    return {part: 1000.0 * sums[part] / counts[part] for part in sums if counts.get(part)}


def run(args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        state = node(Path(tmp), args.processes, args.gpus)
        port = _free_port()
        command = [sys.executable, "-m", "commands", "gpu-usage", "--proc", str(Path(tmp) / "proc")]
        command += ["--metrics-port", str(port), "--interval", str(args.interval)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (SHIM, SHIM.parent, ROOT)))}
        env["GPU_USAGE_FAKE_NVML"] = str(state)
        env.pop("KUBERNETES_SERVICE_HOST", None)
        agent = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:  # ready: the first sweep has answered
                try:
                    with urllib.request.urlopen(f"{url}/readyz", timeout=2):
                        break
                except OSError:
                    if time.monotonic() > deadline or agent.poll() is not None:
                        raise RuntimeError("the agent did not get ready") from None
                    time.sleep(0.2)  # polling a condition, bounded by the deadline
            cpu_before, started = _cpu_seconds(agent.pid), time.monotonic()
            time.sleep(args.seconds)  # the measured period itself, not a wait for a result
            cpu = (_cpu_seconds(agent.pid) - cpu_before) / (time.monotonic() - started)
            figures = {"cpu %": 100.0 * cpu, "rss MiB": _vm_rss(agent.pid) / 1024**2}
            figures.update({f"sweep {k} ms": v for k, v in _sweep_parts(f"{url}/metrics").items()})
            return figures
        finally:
            agent.terminate()
            agent.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_usage", description=__doc__)
    parser.add_argument("--processes", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    runs = [run(args) for _ in range(args.runs)]
    print(
        f"{args.processes} GPU processes on {args.gpus} GPUs, a sweep every {args.interval:g} s, "
        f"{args.seconds:g} s per run: median (min - max) over {args.runs} runs"
    )
    for key in sorted({k for r in runs for k in r}):
        values = [r[key] for r in runs if key in r]
        print(f"{key:18s} {statistics.median(values):8.3f} ({min(values):.3f} - {max(values):.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
