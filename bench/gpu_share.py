"""Do the memory-share profiles hold on the real frameworks? Tenants on one GPU, one of them greedy.

    python -m bench.gpu_share                       # every framework installed, 4 tenants
    python -m bench.gpu_share --tenants 4 --frameworks pytorch,jax --json gpu-share.json
    python -m bench.gpu_share --simulate            # the harness alone, on a pretend GPU

Needs a CUDA GPU (it says so and stops without one). For each framework, twice: once with no env
at all, once with exactly the env the project writes for that framework's profile. That env is
computed by the project's own admission chain
(`webhooks.dispatch.registry.build_policy_set`) for a pod annotated
`gpu-admission.io/gpu-app: <profile>` that asks for `nvidia.com/gpu.shared: 1`, on a node
labelled as gpu-feature-discovery labels a GPU time-sliced N ways with this GPU's memory: no value
is copied by hand.

A run starts N tenant processes (`bench.gpu_tenant`) one after the other on GPU 0, then lets
tenant 0 allocate until it hits its own limit (the greedy neighbour), then has the others grow
their working set to `--grow-fraction` of an equal split of the GPU, then asks each for a small
computation. A survivor is a tenant that runs on the GPU (not fallen back to the CPU), reached its
goal (the greedy one: its own limit) and still computes. Never part of `make test`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpu_admission.cluster.view import NodeInfo, StaticClusterView
from gpu_admission.config.model import Config
from webhooks.core.review import AdmissionRequest
from webhooks.dispatch import chain
from webhooks.dispatch.registry import build_policy_set
from webhooks.policies.interface import MutatingPolicy

FRAMEWORKS = {"pytorch": "torch", "jax": "jax", "tensorflow": "tensorflow"}
SHARED = "nvidia.com/gpu.shared"
REPLY_SECONDS = 300.0


def profile_env(profile: str, replicas: int, memory_mib: int) -> dict[str, str]:
    """The env the project's pod mutations write for `profile` on a GPU shared `replicas` ways."""
    config = Config()
    node = NodeInfo(
        "gpu-node",
        {"nvidia.com/gpu.replicas": str(replicas), "nvidia.com/gpu.memory": str(memory_mib)},
        {SHARED: str(replicas)},
    )
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "tenant",
            "namespace": "bench",
            "annotations": {config.names.gpu_app: profile},
        },
        "spec": {
            "containers": [{"name": "app", "image": "app", "resources": {"limits": {SHARED: "1"}}}]
        },
    }
    request = AdmissionRequest(
        uid="bench",
        kind="Pod",
        resource="pods",
        sub_resource="",
        operation="CREATE",
        namespace="bench",
        name="tenant",
        object=pod,
        old_object=None,
        dry_run=True,
    )
    policies: tuple[MutatingPolicy, ...] = build_policy_set(config).mutating_for("Pod")
    outcome = chain.run_mutating(
        request,
        policies,
        StaticClusterView(nodes=[node]),
        config.failure_mode("/mutate/pods"),
        lambda: pod,
    )
    if not outcome.allowed:
        raise RuntimeError(f"the project refused the tenant pod: {outcome.message}")
    container = request.object["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}


@dataclass
class Tenant:
    index: int
    process: subprocess.Popen[str]
    platform: str = ""
    error: str = ""
    reached: bool = False
    held_mib: int = 0
    alive: bool = False

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def reply(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if not line:
            self.process.wait(REPLY_SECONDS)
            return f"error exited with code {self.process.returncode}"
        return line

    @property
    def survived(self) -> bool:
        return self.platform == "gpu" and self.reached and self.alive


@dataclass
class Run:
    framework: str
    with_env: bool
    env: dict[str, str]
    tenants: int
    survivors: int = 0
    details: list[dict[str, Any]] = field(default_factory=list)


def run_tenants(
    framework: str, count: int, env: dict[str, str], grow_mib: int, extra: list[str]
) -> Run:
    base = {k: v for k, v in os.environ.items() if k not in env}
    run = Run(framework, bool(env), env, count)
    tenants: list[Tenant] = []
    try:
        for index in range(count):  # one after the other: who starts first is fixed
            process = subprocess.Popen(
                [sys.executable, "-m", "bench.gpu_tenant", "--framework", framework, *extra],
                env={**base, **env, "PYTHONUNBUFFERED": "1"},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            tenant = Tenant(index, process)
            tenants.append(tenant)
            word, _, rest = tenant.reply().partition(" ")
            if word == "ready":
                tenant.platform = rest
            else:
                tenant.error = rest
        ready = [t for t in tenants if t.platform]
        if ready:
            greedy, others = ready[0], ready[1:]
            greedy.send("fill")
            word, _, rest = greedy.reply().partition(" ")
            greedy.reached, greedy.held_mib = word == "full", int(rest or 0)
            for tenant in others:
                tenant.send(f"grow {grow_mib}")
                word, _, rest = tenant.reply().partition(" ")
                tenant.reached, tenant.held_mib = word == "ok", int(rest or 0)
            for tenant in ready:
                tenant.send("check")
                tenant.alive = tenant.reply() == "alive"
    finally:
        for tenant in tenants:
            if tenant.process.poll() is None:
                try:
                    tenant.send("exit")
                    tenant.process.wait(30)
                except (OSError, subprocess.TimeoutExpired):
                    tenant.process.kill()
    run.survivors = sum(t.survived for t in tenants)
    run.details = [
        {
            "tenant": t.index,
            "role": "greedy" if t.index == 0 else "grower",
            "platform": t.platform or "none",
            "error": t.error,
            "held_mib": t.held_mib,
            "reached": t.reached,
            "alive": t.alive,
        }
        for t in tenants
    ]
    return run


def gpu_memory_mib() -> int | None:
    """GPU 0's total memory, from nvidia-smi; None when there is no CUDA GPU."""
    if shutil.which("nvidia-smi") is None:
        return None
    done = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        return int(done.stdout.strip().splitlines()[0])
    except (IndexError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_share", description=__doc__)
    parser.add_argument("--tenants", type=int, default=4)
    parser.add_argument("--frameworks", default="pytorch,jax,tensorflow")
    parser.add_argument(
        "--grow-fraction",
        type=float,
        default=0.8,
        help="each grower's goal, as a fraction of an equal split of the GPU (default 0.8)",
    )
    parser.add_argument("--simulate", action="store_true", help="a pretend 16 GiB GPU")
    parser.add_argument("--json", type=Path, help="write every run's details here")
    args = parser.parse_args(argv)
    memory = 16384 if args.simulate else gpu_memory_mib()
    if memory is None:
        print("skipped: no CUDA GPU on this machine (nvidia-smi found none)")
        return 0
    grow_mib = int(memory / args.tenants * args.grow_fraction)
    print(f"GPU 0: {memory} MiB; {args.tenants} tenants; growers aim for {grow_mib} MiB each")
    frameworks = ["simulated"] if args.simulate else args.frameworks.split(",")
    runs: list[Run] = []
    lines = []
    for framework in frameworks:
        module = FRAMEWORKS.get(framework)
        if module is not None and importlib.util.find_spec(module) is None:
            lines.append(f"{framework:<12} skipped: not installed")
            continue
        profile = "generic" if framework == "simulated" else framework
        env = profile_env(profile, args.tenants, memory)
        pair = []
        for with_env in (False, True):
            extra: list[str] = []
            if framework == "simulated":
                pool = Path(tempfile.mkstemp(prefix="gpu-share-pool-")[1])
                extra = ["--pool", str(pool), "--capacity-mib", str(memory)]
            pair.append(
                run_tenants(framework, args.tenants, env if with_env else {}, grow_mib, extra)
            )
        runs.extend(pair)
        shown = " ".join(f"{k}={v}" for k, v in sorted(env.items()))
        lines.append(
            f"{framework:<12} without env {pair[0].survivors}/{args.tenants}  "
            f"with env {pair[1].survivors}/{args.tenants}  env: {shown}"
        )
    print("\n".join(lines))
    for run in runs:
        label = "with env" if run.with_env else "without env"
        for detail in run.details:
            print(f"  {run.framework} {label}: {json.dumps(detail)}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in runs], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
