"""Writes tests/fixtures/installed-admission/base-live-<version>.json: the admission objects the
controller writes for the default configuration on a 1.36 server, as a real kube-apiserver holds
them. `kubectl kustomize manifests/` and those objects (what `gpu-admission admission-policy`
and `--webhook-configurations` print) are applied with `kubectl apply` to the real control plane
(KUBEBUILDER_ASSETS, as the tests start it), and each admission object is read back with
`kubectl get KIND NAME -o json`, its `managedFields` and kubectl's last-applied annotation left
out, nothing else changed (the fixture's README).

    KUBEBUILDER_ASSETS=$(../shared/kube/unpack.sh) .venv/bin/python tools/manifests/live_fixture.py

Run it after a change to what the default configuration's admission objects are; the install's
self-check must find every object of the fixture ok (tests/webhooks/apiserver_policies/
test_install_expectation.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpu_admission.admission.installed import ADMISSION_KINDS  # noqa: E402
from gpu_admission.config.model import Config  # noqa: E402
from tests.world import control_plane  # noqa: E402
from webhooks.apiserver_policies.install_expectation import expected_objects  # noqa: E402
from webhooks.apiserver_policies.webhook_configurations import Layout  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "installed-admission"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    done = subprocess.run(
        ["kubectl", *args], input=stdin, capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _trimmed(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    meta.pop("managedFields", None)
    annotations = meta.get("annotations") or {}
    annotations.pop(LAST_APPLIED, None)
    if not annotations:
        meta.pop("annotations", None)
    return obj


def main() -> int:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "manifests")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    written = [e.obj for e in expected_objects(Config(), Layout.BASE)]
    rendered += "".join(f"---\n{json.dumps(o)}\n" for o in written)
    plane = control_plane.start()
    try:
        _kubectl(plane.kubeconfig, "apply", "-f", "-", stdin=rendered)
        kinds = {k.kind for k in ADMISSION_KINDS}
        docs = [d for d in _split(rendered) if d.get("kind") in kinds]
        items = [
            _trimmed(json.loads(_kubectl(plane.kubeconfig, "get", d["kind"], name, "-o", "json")))
            for d in docs
            if (name := d["metadata"]["name"])
        ]
        version = plane.version.lstrip("v") or "unknown"
    finally:
        plane.stop()
    out = FIXTURE / f"base-live-{version}.json"
    document = {"apiVersion": "v1", "kind": "List", "items": items}
    out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}: {len(items)} objects")
    return 0


def _split(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


if __name__ == "__main__":
    raise SystemExit(main())
