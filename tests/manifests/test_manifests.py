"""The kustomize base and its overlays (each the base and one component: cert-manager,
monitoring, webhook-pod-checks, gpu-usage) render, and say what the install promises."""

from __future__ import annotations

from typing import Any

import pytest

from tests.world.harness import installed_config, installed_render

EXEMPT = "gpu-admission.io/exempt"


def one(docs: tuple[dict[str, Any], ...], kind: str, name: str = "gpu-admission") -> dict:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


@pytest.fixture(
    params=[
        "manifests",
        "manifests/overlays/cert-manager",
        "manifests/overlays/monitoring",
        "manifests/overlays/webhook-pod-checks",
        "manifests/overlays/gpu-usage",
    ]
)
def docs(request):
    return installed_render(request.param)


def test_the_namespace_is_exempt_from_the_webhooks(docs):
    namespace = one(docs, "Namespace")
    assert namespace["metadata"]["labels"][EXEMPT] == "true"


def test_deployment_is_highly_available_non_root_and_read_only(docs):
    deployment = one(docs, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert "podAntiAffinity" not in spec.get("affinity", {})  # a one-node cluster runs both
    (spread,) = spec["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["maxSkew"] == 1
    assert spread["whenUnsatisfiable"] == "DoNotSchedule" and spread["nodeTaintsPolicy"] == "Honor"
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert spec["securityContext"]["runAsNonRoot"] is True
    container = spec["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1


@pytest.mark.parametrize("name", ["gpu-admission", "gpu-admission-controller"])
def test_no_service_variables_reach_the_pods(docs, name):
    # The kubelet's GPU_ADMISSION_SERVICE_HOST etc. are nothing the processes read.
    assert one(docs, "Deployment", name)["spec"]["template"]["spec"]["enableServiceLinks"] is False


def test_webhooks_follow_the_contract(docs):
    paths = set()
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for webhook in one(docs, kind)["webhooks"]:
            assert webhook["sideEffects"] == "None"
            assert webhook["admissionReviewVersions"] == ["v1"]
            assert webhook["timeoutSeconds"] <= 5
            assert webhook["failurePolicy"] in ("Fail", "Ignore")
            expression = webhook["namespaceSelector"]["matchExpressions"][0]
            assert expression == {"key": EXEMPT, "operator": "NotIn", "values": ["true"]}
            if kind.startswith("Mutating"):
                assert webhook["reinvocationPolicy"] == "IfNeeded"
            paths.add(webhook["clientConfig"]["service"]["path"])
    assert paths == {
        "/mutate/pods",
        "/validate/pods",
        "/validate/secrets",
        "/mutate/persistentvolumeclaims",
        "/validate/persistentvolumeclaims",
        "/validate/workloads",
    }


def test_mirror_pods_are_excluded_from_the_pod_mutations(docs):
    pods = one(docs, "MutatingWebhookConfiguration")["webhooks"][0]
    assert "kubernetes.io/config.mirror" in pods["matchConditions"][0]["expression"]


def test_rbac_grants_no_wildcards(docs):
    for kind in ("ClusterRole", "Role"):
        for rule in one(docs, kind)["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"]


def test_self_managed_base_publishes_its_own_ca_bundle(tmp_path):
    config = installed_config(installed_render("manifests"), tmp_path)
    assert config.certs.secret_name == "gpu-admission-tls"
    assert config.certs.manage_ca_bundle is True


def test_cert_manager_overlay_injects_the_ca_and_mounts_its_certificate(tmp_path):
    docs = installed_render("manifests/overlays/cert-manager")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotations = one(docs, kind)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == (
            "gpu-admission/gpu-admission-serving"
        )
    volumes = one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    certs = next(v for v in volumes if v["name"] == "certs")
    assert certs == {"name": "certs", "secret": {"secretName": "gpu-admission-serving"}}
    config = installed_config(docs, tmp_path)
    assert config.certs.manage_ca_bundle is False  # cert-manager's injector writes caBundle
    assert config.certs.service_name == "gpu-admission"  # the rest as the base ships it
    serving = one(docs, "Certificate", "gpu-admission-serving")
    assert "gpu-admission.gpu-admission.svc" in serving["spec"]["dnsNames"]


def test_the_shipped_config_is_valid(docs, tmp_path):
    config = installed_config(docs, tmp_path)
    assert config.certs.service_name == one(docs, "Service")["metadata"]["name"]
    for kind in ("Deployment", "DaemonSet"):
        for workload in (d for d in docs if d["kind"] == kind):
            for container in workload["spec"]["template"]["spec"]["containers"]:
                assert "--config=/etc/gpu-admission" in container["args"]  # the whole folder


def _rules(docs: tuple[dict[str, Any], ...], account: str) -> list[dict[str, Any]]:
    """Every rule bound to the ServiceAccount `account` (ClusterRoles and Roles)."""
    rules = []
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        if any(s.get("name") == account for s in binding["subjects"]):
            role = one(docs, binding["roleRef"]["kind"], binding["roleRef"]["name"])
            rules += role["rules"]
    return rules


def _may(rules: list[dict[str, Any]], verb: str, resource: str) -> bool:
    return any(verb in r["verbs"] and resource in r["resources"] for r in rules)


def test_the_controller_is_its_own_deployment_with_only_its_own_rights(docs):
    controller = one(docs, "Deployment", "gpu-admission-controller")
    spec = controller["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "gpu-admission-controller"
    (container,) = spec["containers"]
    assert container["args"][0] == "controller"
    assert (
        container["image"]
        == one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    )  # one image
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # Not behind the webhook Service, which must reach webhook pods only.
    selector = one(docs, "Service")["spec"]["selector"]
    labels = controller["spec"]["template"]["metadata"]["labels"]
    assert not all(labels.get(k) == v for k, v in selector.items())
    webhook = _rules(docs, "gpu-admission")
    mine = _rules(docs, "gpu-admission-controller")
    assert _may(mine, "create", "jobs") and not _may(webhook, "create", "jobs")
    assert _may(mine, "patch", "persistentvolumeclaims/status")
    assert not _may(webhook, "patch", "persistentvolumeclaims/status")
    assert _may(mine, "update", "leases") and not _may(webhook, "update", "leases")
    assert not _may(mine, "get", "secrets")  # the controller never reads a Secret
    assert _may(mine, "get", "pods/log") and not _may(webhook, "get", "pods/log")
    # The dataset cache: the controller takes and prunes snapshots, the webhooks only watch them.
    assert _may(mine, "create", "volumesnapshots") and _may(mine, "delete", "volumesnapshots")
    assert _may(webhook, "watch", "volumesnapshots")
    assert not _may(webhook, "create", "volumesnapshots")
    assert _may(mine, "get", "storageclasses") and _may(mine, "list", "volumesnapshotclasses")
    log_rules = [r for r in mine if "pods/log" in r["resources"]]
    assert all(r["verbs"] == ["get"] and r["resources"] == ["pods/log"] for r in log_rules)
    assert _may(webhook, "update", "mutatingwebhookconfigurations")


def _pods_validating_webhook(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    validating = one(docs, "ValidatingWebhookConfiguration")
    return next(w for w in validating["webhooks"] if w["name"] == "pods.validate.gpu-admission.io")


def test_the_base_runs_the_pod_checks_in_the_api_server_and_the_webhook_for_the_rest():
    docs = installed_render("manifests")
    policy = one(docs, "ValidatingAdmissionPolicy", "gpu-admission-pods")
    binding = one(docs, "ValidatingAdmissionPolicyBinding", "gpu-admission-pods")
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert binding["spec"] == {"policyName": "gpu-admission-pods", "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    (condition,) = _pods_validating_webhook(docs)["matchConditions"]
    # DRA claims, and plain GPU names asked more than once (shared or not by the nodes' labels).
    assert condition["name"] == "claims-or-plain-gpu-over-one"


def test_the_overlay_for_older_api_servers_calls_the_webhook_for_every_pod(tmp_path):
    docs = installed_render("manifests/overlays/webhook-pod-checks")
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    assert "matchConditions" not in _pods_validating_webhook(docs)
    # The workloads webhook refuses there, so it fails closed, and is told to (the config).
    workloads = "workloads.validate.gpu-admission.io"
    config = installed_config(docs, tmp_path)
    assert config.workloads.pod_checks == "webhook"
    assert config.install.layout == "webhook-pod-checks"
    # The other webhooks keep their conditions.
    base = {
        w["name"]: w
        for w in one(installed_render("manifests"), "ValidatingWebhookConfiguration")["webhooks"]
    }
    assert base[workloads]["failurePolicy"] == "Ignore"
    for hook in one(docs, "ValidatingWebhookConfiguration")["webhooks"]:
        if hook["name"] == workloads:
            assert hook == {**base[workloads], "failurePolicy": "Fail"}
        elif hook["name"] != "pods.validate.gpu-admission.io":
            assert hook == base[hook["name"]]


def _pod_mutations(docs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    mutating = one(docs, "MutatingWebhookConfiguration")
    return [
        w for w in mutating["webhooks"] if w["clientConfig"]["service"]["path"] == "/mutate/pods"
    ]


def test_the_base_makes_the_stateless_pod_changes_in_the_api_server_and_routes_the_rest():
    docs = installed_render("manifests")
    policy = one(docs, "MutatingAdmissionPolicy", "gpu-admission-gpu-visibility")
    binding = one(docs, "MutatingAdmissionPolicyBinding", "gpu-admission-gpu-visibility")
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["reinvocationPolicy"] == "IfNeeded"
    plain, labelled = _pod_mutations(docs)
    assert [c["name"] for c in plain["matchConditions"]] == [
        "not-a-mirror-pod",
        "needs-cluster-state",
    ]
    assert [c["name"] for c in labelled["matchConditions"]] == [
        "not-a-mirror-pod",
        "not-refused-by-the-policy",
    ]
    for guard in (
        "gpu-admission-serviceaccount-credentials",
        "gpu-admission-credential-namespaces",
    ):
        assert one(docs, "ValidatingAdmissionPolicyBinding", guard)["spec"][
            "validationActions"
        ] == ["Deny"]


def test_the_overlay_for_1_30_to_1_35_calls_the_mutating_webhook_for_every_pod():
    docs = installed_render("manifests/overlays/webhook-pod-mutations")
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}
    names = {d["metadata"]["name"] for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    # No routing guards; the schedulers' ConfigMaps keep theirs (admission policies are served).
    assert names == {
        "gpu-admission-pods",
        "gpu-admission-workloads",
        "gpu-admission-scheduler-configmaps",
    }
    (pods,) = _pod_mutations(docs)  # one entry: every namespace that is not exempt
    assert [c["name"] for c in pods["matchConditions"]] == ["not-a-mirror-pod"]
    assert pods["namespaceSelector"] == {
        "matchExpressions": [{"key": EXEMPT, "operator": "NotIn", "values": ["true"]}]
    }
    # Everything else as the base has it.
    base = {
        w["name"]: w
        for w in one(installed_render("manifests"), "MutatingWebhookConfiguration")["webhooks"]
    }
    for hook in one(docs, "MutatingWebhookConfiguration")["webhooks"][1:]:
        assert hook == base[hook["name"]]
    # Before 1.30 (webhook-pod-checks), as it and more: no admission policy at all.
    older = installed_render("manifests/overlays/webhook-pod-checks")
    assert not {d["kind"] for d in older} & {
        "MutatingAdmissionPolicy",
        "ValidatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicyBinding",
    }
    assert _pod_mutations(older) == [pods]


def test_the_gpu_usage_agent_sees_every_gpu_and_host_pids_with_the_least_rights():
    docs = installed_render("manifests/overlays/gpu-usage")
    agent = one(docs, "DaemonSet", "gpu-admission-gpu-usage")
    assert agent["metadata"]["namespace"] == "gpu-admission"  # exempt: its env stands
    assert one(docs, "Namespace")["metadata"]["labels"][EXEMPT] == "true"
    spec = agent["spec"]["template"]["spec"]
    assert spec["hostPID"] is True and not spec.get("hostNetwork")
    assert spec["serviceAccountName"] == "gpu-admission-gpu-usage"
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    assert container["args"][0] == "gpu-usage"
    assert (
        container["image"]
        == one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    )  # one image
    env = {e["name"]: e for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert "utility" in env["NVIDIA_DRIVER_CAPABILITIES"]["value"]
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # Asks for no GPU: it would take one from the workloads it watches.
    assert not any("nvidia.com" in r for r in container["resources"].get("limits", {}))
    context = container["securityContext"]
    assert context["capabilities"]["drop"] == ["ALL"] and "add" not in context["capabilities"]
    assert context["allowPrivilegeEscalation"] is False and not context.get("privileged")
    assert context["readOnlyRootFilesystem"] is True
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = {e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]}
    assert "nvidia.com/gpu.present" in keys  # GPU nodes only
    mine = _rules(docs, "gpu-admission-gpu-usage")
    assert _may(mine, "list", "pods") and _may(mine, "create", "events")
    # Its own Node's labels: the driver manager's pause (gpu_usage/driver_pause.py).
    assert _may(mine, "list", "nodes") and _may(mine, "watch", "nodes")
    assert not _may(mine, "get", "secrets") and not _may(mine, "patch", "pods")
    assert not _may(mine, "patch", "nodes")
    assert sum(len(r["verbs"]) * len(r["resources"]) for r in mine) == 4  # nothing else
