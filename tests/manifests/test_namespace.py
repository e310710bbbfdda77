"""Another namespace than gpu-admission, as docs/install.md#another-namespace says: one
`namespace:` line in the user's kustomization (and, with cert-manager, the replacements block the
same section shows) moves every object, and what the programs derive from where they run
follows (the Service's namespace in the webhook configurations, the certificate's names,
cert-manager's inject-ca-from, the Lease)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from certs.issue import service_dns_names
from gpu_admission.config.model import Config
from tests.manifests.compositions import (
    FEATURES,
    kustomization,
    namespace_replacements,
    render_folder,
)
from tests.world.harness import controller_objects, installed_config

NAMESPACE = "ml-platform"


def _render(*, replacements: bool) -> tuple[dict[str, Any], ...]:
    with tempfile.TemporaryDirectory(prefix="namespace-") as folder:
        mine = kustomization(Path(folder), FEATURES, settings="memory_share:\n  headroom: 0.8\n")
        document = yaml.safe_load((mine / "kustomization.yaml").read_text())
        document["namespace"] = NAMESPACE
        if replacements:
            document["replacements"] = namespace_replacements()
        (mine / "kustomization.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
        return render_folder(mine)


@pytest.fixture(scope="module")
def moved() -> tuple[dict[str, Any], ...]:
    return _render(replacements=True)


def _named_namespaces(value: Any, key: str = "") -> list[str]:
    """Every value under a `namespace` key or in a monitor's `matchNames`, anywhere."""
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in _named_namespaces(v, k)]
    if isinstance(value, list):
        return [n for v in value for n in _named_namespaces(v, key)]
    return [value] if key in ("namespace", "matchNames") and isinstance(value, str) else []


def test_every_object_and_every_reference_moves(moved: tuple[dict[str, Any], ...]) -> None:
    assert set(_named_namespaces(list(moved))) == {NAMESPACE}
    [namespace] = [d for d in moved if d["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == NAMESPACE
    labels = namespace["metadata"]["labels"]
    assert labels["gpu-admission.io/exempt"] == "true"
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"  # the agent's hostPID
    assert "gpu-admission.gpu-admission" not in yaml.safe_dump_all(moved)


def test_the_programs_follow_the_namespace_they_run_in(moved: tuple[dict[str, Any], ...]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        config: Config = installed_config(moved, Path(folder))
    assert (config.certs.namespace, config.leader_election.namespace) == (NAMESPACE, NAMESPACE)
    assert config.memory_share.headroom == 0.8  # the user's settings still merged
    webhooks = [d for d in controller_objects(moved) if d["kind"].endswith("WebhookConfiguration")]
    assert len(webhooks) == 2
    for configuration in webhooks:
        assert {w["clientConfig"]["service"]["namespace"] for w in configuration["webhooks"]} == {
            NAMESPACE
        }
        annotations = configuration["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/gpu-admission-serving"


def test_cert_managers_certificate_names_the_service_where_it_runs(
    moved: tuple[dict[str, Any], ...],
) -> None:
    def dns_names(docs: tuple[dict[str, Any], ...]) -> list[str]:
        [certificate] = [
            d
            for d in docs
            if d["kind"] == "Certificate" and d["metadata"]["name"] == "gpu-admission-serving"
        ]
        return certificate["spec"]["dnsNames"]

    assert dns_names(moved) == service_dns_names("gpu-admission", NAMESPACE)
    # Why the block is the user's: a component's replacements run before the `namespace:`.
    assert dns_names(_render(replacements=False)) == service_dns_names(
        "gpu-admission", "gpu-admission"
    )
