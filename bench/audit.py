"""The audit of a big cluster, on a real kube-apiserver 1.36 and etcd (KUBEBUILDER_ASSETS).

The cluster is seeded with 10,000 pods, 2,000 credential Secrets and 500 dataset PVCs (by
default) over 50 namespaces, and 100 GPU nodes; a third of the pods are CPU pods that can see
GPUs, a tenth of the Secrets are malformed, and no dataset PVC carries its label yet.

Measured, in rounds that alternate the two:
- `gpu-admission audit --kubeconfig ... -o json`, as a user runs it (its own process): wall
  time, peak RSS, and the API requests it made (kube-apiserver's own
  `apiserver_request_total`, before and after);
- baseline: a process that makes the same paginated lists of pods, credential Secrets and PVCs
  with the same client and does nothing with them; the ratio is the cost of judging.
Then the controller's background scan (in this process, the lookup caches synced): the first
scan (it creates the PolicyReports) and the following ones (nothing changed: nothing is
written), with their API requests.

Run: `python -m bench.audit [--pods N --secrets N --pvcs N --rounds R] [--json FILE]`.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import ssl
import statistics
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CRDS = ROOT.parent / "shared" / "crds"
NAMESPACES = 50

BASELINE = """
import sys
from kubernetes import client, config
from gpu_admission.cluster.pages import Pages
from gpu_admission.names import CREDENTIAL_TYPES
api = config.new_client_from_config(sys.argv[1])
core, pages, count = client.CoreV1Api(api), Pages(), 0
for _ in pages.items(core.list_pod_for_all_namespaces):
    count += 1
for secret_type in CREDENTIAL_TYPES:
    for _ in pages.items(core.list_secret_for_all_namespaces, field_selector=f"type={secret_type}"):
        count += 1
for _ in pages.items(core.list_persistent_volume_claim_for_all_namespaces):
    count += 1
print(count, pages.requests)
"""


def _pod(i: int) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "nvidia/cuda:12.4.1-base"}
    if i % 3 == 1:
        container["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
    elif i % 3 == 2:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return {"metadata": {"name": f"pod-{i}"}, "spec": {"containers": [container]}}


def _secret(i: int) -> dict[str, Any]:
    key = "AWS_SECRET_KEY" if i % 10 == 0 else "AWS_SECRET_ACCESS_KEY"
    data = {"AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE", key: f"{i:040d}"}
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {"metadata": {"name": f"s3-{i}"}, "type": "aws-credential", "data": encoded}


def _pvc(i: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"data-{i}",
            "annotations": {"gpu-admission.io/data-source": f"s3://bench-data/set-{i}"},
        },
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def _node(i: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"gpu-{i}",
            "labels": {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "8"},
        },
        "status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": "8"}},
    }


def seed(api: Any, pods: int, secrets: int, pvcs: int) -> float:
    from kubernetes import client

    core = client.CoreV1Api(api)
    started = time.monotonic()
    for n in range(NAMESPACES):
        name = f"team-{n}"
        core.create_namespace({"metadata": {"name": name}})
        core.create_namespaced_service_account(name, {"metadata": {"name": "default"}})
    jobs: list[Callable[[], Any]] = [lambda i=i: core.create_node(_node(i)) for i in range(100)]
    for count, make, create in (
        (pods, _pod, core.create_namespaced_pod),
        (secrets, _secret, core.create_namespaced_secret),
        (pvcs, _pvc, core.create_namespaced_persistent_volume_claim),
    ):
        jobs += [
            lambda i=i, make=make, create=create: create(f"team-{i % NAMESPACES}", make(i))
            for i in range(count)
        ]
    with ThreadPoolExecutor(32) as pool:
        for future in [pool.submit(job) for job in jobs]:
            future.result()
    return time.monotonic() - started


def api_requests(plane: Any) -> Counter[str]:
    """kube-apiserver's own count of the requests it served, by verb and resource."""
    from tests.world.control_plane import ADMIN_TOKEN

    request = urllib.request.Request(f"{plane.url}/metrics")
    request.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    counted: Counter[str] = Counter()
    with urllib.request.urlopen(request, context=context, timeout=30) as answer:
        for line in answer.read().decode().splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels = dict(
                part.split("=", 1)
                for part in line[line.index("{") + 1 : line.index("}")].split(",")
            )
            resource_name = labels.get("resource", "").strip('"')
            verb = labels.get("verb", "").strip('"')
            counted[f"{verb} {resource_name}"] += int(float(line.rsplit(" ", 1)[1]))
    return counted


def _ours(before: Counter[str], after: Counter[str]) -> dict[str, int]:
    judged = (
        "pods",
        "secrets",
        "persistentvolumeclaims",
        "nodes",
        "serviceaccounts",
        "namespaces",
        "resourceclaims",
        "resourceclaimtemplates",
        "deviceclasses",
        "volumesnapshots",
        "policyreports",
    )
    return {
        key: after[key] - before[key]
        for key in sorted(after)
        if key.split(" ")[1] in judged and after[key] - before[key] > 0
    }


def measured(argv: list[str]) -> dict[str, Any]:
    """Run `argv` in a fresh interpreter that reports its own peak RSS on exit."""
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent across exec.
    wrapper = [
        sys.executable,
        "-c",
        "import atexit, runpy, sys; sys.argv = sys.argv[1:];"
        "atexit.register(lambda: sys.stderr.write(next(l for l in open('/proc/self/status')"
        " if l.startswith('VmHWM')).replace('VmHWM:', 'PEAK_RSS_KIB').replace(' kB', '')));"
        "runpy.run_path(sys.argv[0], run_name='__main__') if sys.argv[0].endswith('.py')"
        " else runpy.run_module(sys.argv[0], run_name='__main__')",
        *argv,
    ]
    started = time.monotonic()
    done = subprocess.run(wrapper, capture_output=True, text=True, check=False, cwd=ROOT)
    wall = time.monotonic() - started
    assert done.returncode in (0, 1), done.stderr[-2000:]
    peak = [
        int(line.split()[1]) for line in done.stderr.splitlines() if line.startswith("PEAK_RSS_KIB")
    ]
    return {
        "seconds": wall,
        "peak_rss_mib": (peak[-1] if peak else 0) / 1024,
        "stdout": done.stdout,
    }


def spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--secrets", type=int, default=2_000)
    parser.add_argument("--pvcs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scans", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from kubernetes import config

    from tests.world import control_plane

    if not os.environ.get(control_plane.ASSETS_VARIABLE):
        print(f"set {control_plane.ASSETS_VARIABLE} (../shared/kube/unpack.sh prints it)")
        return 2
    plane = control_plane.start()
    figures: dict[str, Any] = {
        "objects": {"pods": args.pods, "secrets": args.secrets, "pvcs": args.pvcs}
    }
    try:
        api = config.new_client_from_config(str(plane.kubeconfig))
        api.configuration.connection_pool_maxsize = 32
        figures["seed_seconds"] = round(seed(api, args.pods, args.secrets, args.pvcs), 1)
        subprocess.run(
            [
                str(ROOT / ".venv" / "bin" / "kubectl"),
                "--kubeconfig",
                str(plane.kubeconfig),
                "apply",
                "--server-side",
                "-f",
                str(CRDS / "wgpolicyk8s.io_policyreports.yaml"),
            ],
            check=True,
            capture_output=True,
        )
        script = Path(plane.folder) / "baseline.py"
        script.write_text(BASELINE)
        audit_argv = [
            "commands.__main__",
            "audit",
            "--kubeconfig",
            str(plane.kubeconfig),
            "-o",
            "json",
        ]
        rounds: dict[str, list[dict[str, Any]]] = {"audit": [], "baseline": []}
        for _ in range(args.rounds):
            for name, argv in (
                ("baseline", [str(script), str(plane.kubeconfig)]),
                ("audit", audit_argv),
            ):
                before = api_requests(plane)
                run = measured(argv)
                run["requests"] = _ours(before, api_requests(plane))
                if name == "audit":
                    report = json.loads(run["stdout"])
                    run["findings"] = len(report["findings"])
                    run["by_policy"] = report["summary"]["findingsByPolicy"]
                run.pop("stdout")
                rounds[name].append(run)
        ratios = [
            a["seconds"] / b["seconds"]
            for a, b in zip(rounds["audit"], rounds["baseline"], strict=True)
        ]
        figures["audit"] = {
            "seconds": spread([r["seconds"] for r in rounds["audit"]]),
            "peak_rss_mib": spread([r["peak_rss_mib"] for r in rounds["audit"]]),
            "requests": rounds["audit"][-1]["requests"],
            "findings": rounds["audit"][-1]["findings"],
            "by_policy": rounds["audit"][-1]["by_policy"],
        }
        figures["baseline"] = {
            "seconds": spread([r["seconds"] for r in rounds["baseline"]]),
            "peak_rss_mib": spread([r["peak_rss_mib"] for r in rounds["baseline"]]),
            "requests": rounds["baseline"][-1]["requests"],
        }
        figures["audit_over_baseline"] = spread(ratios)
        figures["scan"] = scans(plane, api, args.scans)
    finally:
        plane.stop()
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def scans(plane: Any, api: Any, count: int) -> list[dict[str, Any]]:
    """The controller's scan, as its leader runs it: caches synced once, then `count` scans."""
    import asyncio

    from commands.controller import audit_scan
    from controllers.reports.scanner import AuditScanner, ScanMetrics
    from gpu_admission.cluster.live_view import LiveClusterView
    from gpu_admission.config.model import Config
    from gpu_admission.process.metrics import Metrics

    config = Config.model_validate({"audit": {"interval": 3600}})
    view = LiveClusterView(api, config)
    view.start()
    results = []
    try:
        leading = asyncio.Event()
        leading.set()
        scanner = AuditScanner(
            api,
            config,
            ScanMetrics(Metrics(process_metrics=False)),
            lambda: audit_scan(config, api, view),
            leading,
        )
        for _ in range(count):
            before = api_requests(plane)
            started = time.monotonic()
            assert asyncio.run(scanner.run_once())
            seconds = time.monotonic() - started
            results.append(
                {"seconds": round(seconds, 3), "requests": _ours(before, api_requests(plane))}
            )
    finally:
        view.stop()
    return results


if __name__ == "__main__":
    raise SystemExit(main())
