"""The optional parts as kustomize Components: each renders with the base alone and beside
every other, each layout for older API servers with every feature component, and every
rendered install holds exactly the admission objects its own self-check expects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient

from certs.serving import ServingCertificates
from certs.store import FileStore
from gpu_admission.admission.installed import (
    ADMISSION_KINDS,
    MUTATING_POLICY,
    MUTATING_WEBHOOKS,
    VALIDATING_POLICY,
    VALIDATING_WEBHOOKS,
    LiveAdmission,
)
from gpu_admission.config.install import COMPONENTS
from gpu_admission.config.policy_modes import audit_mode
from tests import ROOT
from tests.manifests.compositions import (
    FEATURES,
    LAYOUTS,
    RenderError,
    compositions,
    render_composition,
)
from tests.world.harness import controller_objects, installed_config
from webhooks.apiserver_policies.install_expectation import InstallExpectation

COMPONENTS_DIR = ROOT / "manifests" / "components"
ADMISSION = {k.kind for k in ADMISSION_KINDS}
# What each layout's API servers serve: 1.36, 1.30 to 1.35, older.
SERVED = {
    (): frozenset(ADMISSION),
    ("webhook-pod-mutations",): frozenset(ADMISSION)
    - {MUTATING_POLICY, f"{MUTATING_POLICY}Binding"},
    ("webhook-pod-checks",): frozenset({MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS}),
}


def _served(components: tuple[str, ...]) -> frozenset[str]:
    layouts = tuple(c for c in components if c in LAYOUTS)
    return SERVED[layouts]


def test_every_component_is_a_kustomize_component_that_names_itself(tmp_path: Path) -> None:
    assert sorted(p.name for p in COMPONENTS_DIR.iterdir()) == sorted(COMPONENTS)
    for name in COMPONENTS:
        document = yaml.safe_load((COMPONENTS_DIR / name / "kustomization.yaml").read_text())
        assert document["kind"] == "Component", name
        config = installed_config(render_composition([name]), tmp_path / name)
        assert config.install.in_use() == [name]


def test_the_audit_mode_layer_sets_every_policy_to_its_admitting_mode() -> None:
    layer = yaml.safe_load((COMPONENTS_DIR / "audit-mode" / "audit-mode.yaml").read_text())
    assert {n: s["mode"] for n, s in layer["policies"].items()} == audit_mode()


def _written(
    components: tuple[str, ...] | list[str], served: frozenset[str] | None = None
) -> tuple[dict[str, Any], ...]:
    """A composition rendered, and what its controller writes on the server its layout is for."""
    docs = render_composition(components)
    return docs + controller_objects(docs, served or _served(tuple(components)))


@pytest.mark.parametrize("components", compositions(), ids="+".join)
def test_each_composition_holds_what_its_self_check_expects(
    components: tuple[str, ...], tmp_path: Path
) -> None:
    """No composition ships an admission object (the controller writes them all), and what the
    controller writes for its configuration is what its self-check then finds ok."""
    docs = render_composition(components)
    assert [d["kind"] for d in docs if d["kind"] in ADMISSION] == []
    config = installed_config(docs, tmp_path)
    assert config.install.in_use() == [c for c in COMPONENTS if c in components]
    assert _misnamed_rbac(docs) == []
    written = controller_objects(docs, _served(components))
    objects = {(d["kind"], d["metadata"]["name"]): d for d in written}
    report = InstallExpectation(config).check(LiveAdmission(objects, _served(components)))
    assert [(o.kind, o.name, o.detail) for o in report.problems] == []
    assert len(report.objects) == len(written) >= 2
    relaxed = {"audit-mode", "without-gpu-visibility"} & set(components)
    assert report.isolation_enforced == (not relaxed)
    assert report.isolation_by_nodes == ("without-gpu-visibility" in components)
    assert report.layout.startswith("manifests/ with component")


def _misnamed_rbac(docs: tuple[dict[str, Any], ...]) -> list[str]:
    """RBAC rules whose resourceNames kustomize re-pointed at a generated ConfigMap (it rewrites
    any resourceName equal to a ConfigMap's name, whatever the rule's resources): each would
    then grant nothing on the object it was written for."""
    config_maps = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    return [
        f"{d['kind']}/{d['metadata']['name']}: {rule}"
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
        for rule in d.get("rules") or []
        if set(rule.get("resourceNames") or []) & config_maps
        and "configmaps" not in rule.get("resources", [])
    ]


def test_one_layout_per_install_stops_at_the_second() -> None:
    with pytest.raises(RenderError, match="gpu-admission-layout"):
        render_composition(LAYOUTS)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_layout_and_audit_mode_compose_in_either_order(layout: str) -> None:
    assert _written([layout, "audit-mode"]) == _written(["audit-mode", layout])


def _policies(docs: tuple[dict[str, Any], ...]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"].endswith("AdmissionPolicyBinding")}


def test_audit_mode_refuses_nothing_and_changes_nothing() -> None:
    docs = _written(["audit-mode"])
    kinds = {d["kind"] for d in docs}
    assert MUTATING_POLICY not in kinds  # nothing changes pods
    for name, binding in _policies(docs).items():
        assert "Deny" not in binding["spec"].get("validationActions", ["Deny"]), name
    assert _policies(docs)["gpu-admission-pods"]["spec"]["validationActions"] == ["Warn", "Audit"]
    visibility = next(d for d in docs if d["metadata"]["name"] == "gpu-admission-gpu-visibility")
    assert visibility["kind"] == VALIDATING_POLICY  # it records what it would change


@pytest.mark.parametrize("layout", [(), *((layout,) for layout in LAYOUTS)], ids=str)
def test_audit_mode_refuses_nothing_while_the_service_is_down(layout: tuple[str, ...]) -> None:
    docs = _written(["audit-mode", *layout])
    webhooks = [
        (d["kind"], w["name"], w["failurePolicy"])
        for d in docs
        if d["kind"].endswith("WebhookConfiguration")
        for w in d["webhooks"]
    ]
    assert webhooks and all(policy == "Ignore" for _, _, policy in webhooks), webhooks


def test_the_users_settings_win_over_every_components_and_keep_the_rest(tmp_path: Path) -> None:
    settings = "audit:\n  interval: 30m\npolicies:\n  gpu-env-guard: {mode: enforce}\n"
    docs = render_composition([*FEATURES], settings=settings)
    config = installed_config(docs, tmp_path)
    assert config.audit.interval == 1800  # policy-reports' 10m, replaced by the user's
    assert config.mode_of("gpu-env-guard") == "enforce"  # audit-mode's warn, replaced
    assert config.mode_of("shared-gpu-limit") == "warn"  # audit-mode's, kept
    assert config.certs.manage_ca_bundle is False  # cert-manager's, kept
    assert config.certs.secret_name is None  # cert-manager's, over the base's


def test_with_cert_manager_the_service_serves_the_secret_cert_manager_writes(
    tmp_path: Path,
) -> None:
    """The Certificate's Secret is mounted at --cert-dir, and the configuration keeps no Secret
    of the service's own: with cluster access the service still reads the mounted files (a
    Secret store of its own would serve a CA that cert-manager's injector never publishes)."""
    docs = render_composition(["cert-manager"])
    [certificate] = [
        d
        for d in docs
        if d["kind"] == "Certificate" and d["metadata"]["name"] == "gpu-admission-serving"
    ]
    [deployment] = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gpu-admission"
    ]
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    [cert_dir] = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--cert-dir=")]
    [mount] = [m for m in container["volumeMounts"] if m["mountPath"] == cert_dir]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == certificate["spec"]["secretName"]
    config = installed_config(docs, tmp_path)
    certs = config.certs.model_copy(update={"cert_dir": Path(cert_dir)})
    store = ServingCertificates(certs, ApiClient()).store
    assert isinstance(store, FileStore) and store.directory == Path(cert_dir)
    injected = {
        d["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        for d in controller_objects(docs)
        if d["kind"].endswith("WebhookConfiguration")
    }
    assert injected == {f"gpu-admission/{certificate['metadata']['name']}"}


def test_the_users_image_reaches_every_program(tmp_path: Path) -> None:
    image = {"name": "gpu-admission", "newName": "registry.example.com/ml/gpu-admission"}
    docs = render_composition(["gpu-usage"], images=[{**image, "newTag": "0.1.0"}])
    images = {
        c["image"]
        for d in docs
        if d["kind"] in ("Deployment", "DaemonSet")
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"registry.example.com/ml/gpu-admission:0.1.0"}
    # Loader Jobs run the controller's own image unless a setting names another.
    assert installed_config(docs, tmp_path).dataset.loader_image is None
