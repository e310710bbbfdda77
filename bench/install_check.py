"""The install's self-check on a big cluster, on a real kube-apiserver 1.36 and etcd
(KUBEBUILDER_ASSETS): what its caches cost the controller, and what one comparison costs.

The cluster is seeded with the base's admission objects, 1,000 namespaces (half labelled for
ServiceAccount-bound credentials), three ServiceAccounts in each (one bound to credentials) and
200 ValidatingAdmissionPolicies with their bindings (each as large as the base's pod checks).

In a process of its own per round (as the controller would hold them): RSS after the imports,
then after the self-check's informers have listed (the caches' cost), the requests they made
(kube-apiserver's `apiserver_request_total`, before and after: lists and watches, one per kind),
and the wall time of one comparison over the caches, 20 times (the first generates what the
configuration implies; the others reuse it, as the controller does).

Run: `python -m bench.install_check [--namespaces N --policies N --rounds R] [--json FILE]`.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LABEL = "gpu-admission.io/serviceaccount-credentials"

CHILD = """
import json, sys, time
from kubernetes import config
from controllers.install_check.live import LiveInstall
from gpu_admission.config.model import Config
from webhooks.apiserver_policies.install_expectation import InstallExpectation

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

api = config.new_client_from_config(sys.argv[1])
cfg = Config()
judge = InstallExpectation(cfg)
before = rss()
live = LiveInstall(api, cfg, lambda: None)
started = time.perf_counter()
live.start()
while not live.synced():
    time.sleep(0.05)  # the bench's own wait for the first lists
listed = time.perf_counter() - started
after = rss()
times = []
for _ in range(20):
    t = time.perf_counter()
    report = judge.check(live.snapshot())
    times.append(time.perf_counter() - t)
live.stop()
print(json.dumps({
    "rss_imports": before, "rss_synced": after, "listed_s": listed, "check_s": times,
    "objects": len(live.snapshot().objects), "accounts": len(report.credentials),
}))
"""


def _seed(api: Any, namespaces: int, policies: int) -> None:
    from kubernetes import client, utils

    from tests.world.harness import installed_render

    kinds = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    kinds |= {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}
    kinds |= {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    base = [d for d in installed_render("manifests") if d["kind"] in kinds]
    for doc in base:
        doc["metadata"].pop("namespace", None)
    for doc in base:
        if doc["kind"].endswith("WebhookConfiguration"):
            # Never called: no pod, Secret or PVC is created in this cluster.
            for entry in doc["webhooks"]:
                entry["clientConfig"] = {"url": "https://127.0.0.1:1/never"}
    core = client.CoreV1Api(api)
    admission = client.AdmissionregistrationV1Api(api)
    template = next(d for d in base if d["metadata"]["name"] == "gpu-admission-pods")

    def namespace(i: int) -> None:
        name = f"team-{i}"
        labels = {LABEL: "true"} if i % 2 else {}
        core.create_namespace({"metadata": {"name": name, "labels": labels}})
        for j in range(3):
            meta: dict[str, Any] = {"name": f"sa-{j}"}
            if j == 0:
                meta["annotations"] = {"gpu-admission.io/cloud-credentials": "s3"}
            core.create_namespaced_service_account(name, {"metadata": meta})

    def policy(i: int) -> None:
        made = copy.deepcopy(template)
        made["metadata"] = {"name": f"other-policy-{i}"}
        admission.create_validating_admission_policy(made)
        binding = {
            "metadata": {"name": f"other-policy-{i}"},
            "spec": {"policyName": f"other-policy-{i}", "validationActions": ["Audit"]},
        }
        admission.create_validating_admission_policy_binding(binding)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(namespace, range(namespaces)))  # before the guards refuse the bindings
        utils.create_from_yaml(api, yaml_objects=base)
        list(pool.map(policy, range(policies)))


def _requests(url: str, token: str, ca: str) -> dict[str, float]:
    """kube-apiserver's request counts by verb and resource, for the admin's metrics read."""
    import ssl
    import urllib.request

    context = ssl.create_default_context(cafile=ca)
    request = urllib.request.Request(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, context=context, timeout=30) as answer:
        text = answer.read().decode()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, _, value = line.rpartition(" ")
        fields = dict(
            part.split("=", 1) for part in labels[len("apiserver_request_total{") : -1].split(",")
        )
        key = f"{fields.get('verb', '').strip(chr(34))} {fields.get('resource', '').strip(chr(34))}"
        counts[key] = counts.get(key, 0.0) + float(value)
    return counts


def _spread(values: list[float], scale: float, fmt: Callable[[float], str]) -> str:
    scaled = [v * scale for v in values]
    return f"{fmt(statistics.median(scaled))} ({fmt(min(scaled))}-{fmt(max(scaled))})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=1000)
    parser.add_argument("--policies", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, metavar="FILE")
    args = parser.parse_args()

    from kubernetes import config

    from tests.world import control_plane

    if not os.environ.get(control_plane.ASSETS_VARIABLE):
        print(f"set {control_plane.ASSETS_VARIABLE} (../shared/kube/unpack.sh prints it)")
        return 2
    plane = control_plane.start()
    try:
        api = config.new_client_from_config(str(plane.kubeconfig))
        _seed(api, args.namespaces, args.policies)
        print(f"seeded {args.namespaces} namespaces, {args.policies} policies", flush=True)
        runs = []
        for _ in range(args.rounds):
            before = _requests(plane.url, control_plane.ADMIN_TOKEN, str(plane.ca_path))
            done = subprocess.run(
                [sys.executable, "-c", CHILD, str(plane.kubeconfig)],
                capture_output=True,
                text=True,
                check=True,
                cwd=ROOT,
                timeout=600,
            )
            after = _requests(plane.url, control_plane.ADMIN_TOKEN, str(plane.ca_path))
            run = json.loads(done.stdout.strip().splitlines()[-1])
            run["requests"] = {
                k: v - before.get(k, 0.0)
                for k, v in after.items()
                if v - before.get(k, 0.0) > 0 and not k.endswith(" ")  # non-resource: /metrics
            }
            runs.append(run)
    finally:
        plane.stop()
    mib = 1 / 1024 / 1024
    caches = [r["rss_synced"] - r["rss_imports"] for r in runs]
    checks = [statistics.median(r["check_s"]) for r in runs]
    print(
        f"RSS after imports: {_spread([r['rss_imports'] for r in runs], mib, '{:.1f} MiB'.format)}"
    )
    print(f"RSS added by the caches: {_spread(caches, mib, '{:.1f} MiB'.format)}")
    print(f"first lists: {_spread([r['listed_s'] for r in runs], 1, '{:.2f} s'.format)}")
    print(f"one comparison (median of 20): {_spread(checks, 1000, '{:.1f} ms'.format)}")
    first = runs[0]
    print(f"admission objects cached: {first['objects']}; unrouted found: {first['accounts']}")
    print(f"requests of the last round (verb resource: count): {runs[-1]['requests']}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
