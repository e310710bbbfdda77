"""Writes manifests/components/audit-mode/: the patches that turn the base's admission objects
into those of the audit-mode configuration (its `audit-mode.yaml` layer), as the project's own
generator makes them (`gpu-admission admission-policy`), and the component's kustomization.

    .venv/bin/python tools/manifests/audit_mode.py          # rewrite the component
    .venv/bin/python tools/manifests/audit_mode.py --check  # exit 1 if it is not current

Each patch is a JSON Patch from the default object to the audit-mode one; a policy that changes
kind (GPU visibility: a MutatingAdmissionPolicy that changes pods, then a ValidatingAdmission-
Policy that records) has its kind and spec replaced whole; the webhook configurations' patches
test each entry's name before they touch it, so they stop rather than patch the wrong entry.
tests/manifests/test_components.py holds the files current and the rendered install equal to
what the install's self-check expects.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpu_admission.config.model import Config, load_config  # noqa: E402
from webhooks.apiserver_policies.install_expectation import expected_objects  # noqa: E402
from webhooks.apiserver_policies.webhook_configurations import Layout  # noqa: E402

COMPONENT = ROOT / "manifests" / "components" / "audit-mode"
LAYER = "audit-mode.yaml"
PATCHES = "patches"
HEADER = """\
# Audit mode: nothing is refused and nothing is changed. A pod the policies would refuse is
# admitted with a warning to whoever created it; one they would change is admitted as written;
# both are recorded in the API server's audit log and, with the policy-reports component, in
# each namespace's report. The modes are in audit-mode.yaml; the admission objects follow them
# (the patches, written by tools/manifests/audit_mode.py from the project's own generator).
# Going to enforce is dropping this component. With a layout for older API servers, list the
# layout after this component.
"""
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def _short(kind: str) -> str:
    return {
        "ValidatingAdmissionPolicy": "policy",
        "ValidatingAdmissionPolicyBinding": "binding",
        "MutatingAdmissionPolicy": "policy",
        "MutatingAdmissionPolicyBinding": "binding",
        "MutatingWebhookConfiguration": "mutating-webhooks",
        "ValidatingWebhookConfiguration": "validating-webhooks",
    }[kind]


def _ops(default: dict[str, Any], audit: dict[str, Any]) -> list[dict[str, Any]]:
    if default["kind"] != audit["kind"]:
        return [
            {"op": "replace", "path": "/kind", "value": audit["kind"]},
            {"op": "replace", "path": "/spec", "value": audit["spec"]},
        ]
    ops = list(jsonpatch.make_patch(default, audit))
    if default["kind"] not in WEBHOOK_KINDS:
        return ops
    guarded: list[dict[str, Any]] = []
    tested: set[str] = set()
    for op in ops:
        entry = "/".join(op["path"].split("/")[:3])  # /webhooks/<i>
        if entry not in tested:
            index = int(entry.rsplit("/", 1)[1])
            name = default["webhooks"][index]["name"]
            guarded.append({"op": "test", "path": f"{entry}/name", "value": name})
            tested.add(entry)
        guarded.append(op)
    return guarded


def files() -> dict[str, str]:
    """Path under the component -> its text: the kustomization and one patch per object."""
    config = load_config(COMPONENT / LAYER, environ={})
    pairs = zip(
        expected_objects(Config(), Layout.BASE),
        expected_objects(config, Layout.BASE),
        strict=True,
    )
    out: dict[str, str] = {}
    patches = []
    for default, audit in pairs:
        d, a = default.obj, audit.obj
        assert d["metadata"]["name"] == a["metadata"]["name"], (d["metadata"], a["metadata"])
        ops = _ops(d, a)
        if not ops:
            continue
        name = f"{PATCHES}/{_short(d['kind'])}-{d['metadata']['name']}.yaml"
        out[name] = yaml.safe_dump(ops, sort_keys=False, width=100)
        patches.append({"target": {"kind": d["kind"], "name": d["metadata"]["name"]}, "path": name})
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1alpha1",
        "kind": "Component",
        "patches": patches,
        "configMapGenerator": [
            {
                "name": "gpu-admission-config",
                "namespace": "gpu-admission",
                "behavior": "merge",
                "files": [LAYER],
            }
        ],
    }
    out["kustomization.yaml"] = HEADER + yaml.safe_dump(kustomization, sort_keys=False)
    return out


def main(argv: list[str]) -> int:
    wanted = files()
    stale = [n for n, text in wanted.items() if not (COMPONENT / n).is_file()
             or (COMPONENT / n).read_text() != text]  # fmt: skip
    extra = [
        str(p.relative_to(COMPONENT))
        for p in (COMPONENT / PATCHES).glob("*.yaml")
        if str(p.relative_to(COMPONENT)) not in wanted
    ] if (COMPONENT / PATCHES).is_dir() else []  # fmt: skip
    if "--check" in argv:
        for name in stale + extra:
            print(f"{COMPONENT / name} is not current: run tools/manifests/audit_mode.py")
        return 1 if stale or extra else 0
    (COMPONENT / PATCHES).mkdir(exist_ok=True)
    for name in extra:
        (COMPONENT / name).unlink()
    for name, text in wanted.items():
        (COMPONENT / name).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
