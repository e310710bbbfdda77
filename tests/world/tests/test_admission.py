"""The emulator's webhook admission behaves like kube-apiserver's.

Webhooks here are real HTTPS servers with their own CA; the admission chain is driven directly
through its AdmissionHook interface (the emulator core calls the same two methods), and, at the
end of the file, through the emulator with the real kubernetes client.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests import REVIEW_FIXTURES
from tests.world.kubeapi.admission import WebhookAdmission
from tests.world.kubeapi.admission_match import (
    SelectorError,
    rule_matches,
    selector_matches,
)
from tests.world.kubeapi.admission_types import AdmissionAttributes
from tests.world.kubeapi.admission_warnings import ITEM_RUNES, cap_warnings
from tests.world.kubeapi.admission_webhook_server import TestWebhook, json_patch
from tests.world.kubeapi.errors import StatusError

FIXTURES = REVIEW_FIXTURES
SERVICE_NS, SERVICE_NAME = "gpu-admission", "gpu-admission"
SERVICE_HOST = f"{SERVICE_NAME}.{SERVICE_NS}.svc"


# --- helpers -------------------------------------------------------------------------------


class Objects:
    """Stored objects by resource, served through the lister signature the core provides."""

    def __init__(self) -> None:
        self.by_resource: dict[str, list[dict[str, Any]]] = {
            "namespaces": [
                {"metadata": {"name": "ml", "labels": {"team": "ml"}}},
                {
                    "metadata": {
                        "name": "kube-system",
                        "labels": {"gpu-admission.io/exempt": "true"},
                    }
                },
            ]
        }

    def list(self, resource: str, namespace: str | None) -> list[dict[str, Any]]:
        return list(self.by_resource.get(resource, []))

    def add(self, resource: str, obj: dict[str, Any]) -> None:
        self.by_resource.setdefault(resource, []).append(obj)


def webhook(
    name: str,
    hook: TestWebhook,
    path: str,
    *,
    resources: list[str] | None = None,
    operations: list[str] | None = None,
    service: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    client_config: dict[str, Any] = {"caBundle": hook.ca_bundle}
    if service:
        client_config["service"] = {"namespace": SERVICE_NS, "name": SERVICE_NAME, "path": path}
    else:
        client_config["url"] = hook.url(path)
    spec: dict[str, Any] = {
        "name": name,
        "clientConfig": client_config,
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": operations or ["CREATE", "UPDATE"],
                "resources": resources or ["pods"],
            }
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    spec.update(extra)
    return spec


def configuration(kind: str, name: str, *webhooks: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": list(webhooks),
    }


def mutating(name: str, *webhooks: dict[str, Any]) -> dict[str, Any]:
    return configuration("MutatingWebhookConfiguration", name, *webhooks)


def validating(name: str, *webhooks: dict[str, Any]) -> dict[str, Any]:
    return configuration("ValidatingWebhookConfiguration", name, *webhooks)


def pod(name: str = "train", namespace: str = "ml", labels: dict[str, str] | None = None) -> dict:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def pod_create(obj: dict[str, Any] | None = None, **overrides: Any) -> AdmissionAttributes:
    obj = obj or pod()
    attrs = AdmissionAttributes(
        operation="CREATE",
        group="",
        version="v1",
        resource="pods",
        subresource="",
        kind_group="",
        kind_version="v1",
        kind="Pod",
        namespace=obj["metadata"].get("namespace", ""),
        name=obj["metadata"].get("name", ""),
        object=obj,
        old_object=None,
        dry_run=False,
        options={"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        user_info={"username": "admin", "groups": ["system:masters", "system:authenticated"]},
    )
    for key, value in overrides.items():
        setattr(attrs, key, value)
    return attrs


def allow(path: str, review: dict[str, Any]) -> dict[str, Any]:
    return {"allowed": True}


# --- pure matching -------------------------------------------------------------------------


def rule(resources: list[str], scope: str | None = None, ops: list[str] | None = None) -> dict:
    r: dict[str, Any] = {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ops or ["*"],
        "resources": resources,
    }
    if scope:
        r["scope"] = scope
    return r


@pytest.mark.parametrize(
    ("resources", "subresource", "expected"),
    [
        (["pods"], "", True),
        (["pods"], "status", False),
        (["pods/*"], "ephemeralcontainers", True),
        (["pods/*"], "", True),  # "*" matches "no subresource" too, as in rules.go
        (["*/status"], "status", True),
        (["*/status"], "ephemeralcontainers", False),
        (["*"], "", True),
        (["*"], "status", False),
        (["*/*"], "status", True),
        (["pods/ephemeralcontainers"], "ephemeralcontainers", True),
        (["secrets"], "", False),
    ],
)
def test_rule_resources_and_subresources(resources, subresource, expected):
    attrs = pod_create(subresource=subresource)
    assert rule_matches(rule(resources), attrs) is expected


def test_rule_operations_groups_versions_and_scope():
    attrs = pod_create()
    assert rule_matches(rule(["pods"], ops=["CREATE"]), attrs)
    assert not rule_matches(rule(["pods"], ops=["UPDATE", "DELETE"]), attrs)
    assert not rule_matches({**rule(["pods"]), "apiGroups": ["batch"]}, attrs)
    assert rule_matches({**rule(["pods"]), "apiGroups": ["*"], "apiVersions": ["*"]}, attrs)
    assert not rule_matches({**rule(["pods"]), "apiVersions": ["v2"]}, attrs)
    assert rule_matches(rule(["pods"], scope="Namespaced"), attrs)
    assert not rule_matches(rule(["pods"], scope="Cluster"), attrs)
    namespace = pod_create(resource="namespaces", kind="Namespace", namespace="ml")
    assert rule_matches(rule(["namespaces"], scope="Cluster"), namespace)
    assert not rule_matches(rule(["namespaces"], scope="Namespaced"), namespace)
    node = pod_create(resource="nodes", kind="Node", namespace="")
    assert rule_matches(rule(["nodes"], scope="Cluster"), node)
    assert not rule_matches(rule(["nodes"], scope="Namespaced"), node)


def test_label_selector_operators():
    labels = {"tier": "gpu", "team": "ml"}
    assert selector_matches({}, labels)
    assert selector_matches(None, {})
    assert selector_matches({"matchLabels": {"tier": "gpu"}}, labels)
    assert not selector_matches({"matchLabels": {"tier": "cpu"}}, labels)
    expr = "matchExpressions"
    assert selector_matches({expr: [{"key": "tier", "operator": "In", "values": ["gpu"]}]}, labels)
    assert not selector_matches({expr: [{"key": "x", "operator": "In", "values": ["a"]}]}, labels)
    assert selector_matches({expr: [{"key": "x", "operator": "NotIn", "values": ["a"]}]}, labels)
    assert not selector_matches(
        {expr: [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]}, labels
    )
    assert selector_matches({expr: [{"key": "team", "operator": "Exists"}]}, labels)
    assert not selector_matches({expr: [{"key": "team", "operator": "DoesNotExist"}]}, labels)
    with pytest.raises(SelectorError):
        selector_matches({expr: [{"key": "team", "operator": "In"}]}, labels)


def test_warnings_are_deduplicated_sanitized_and_capped_like_the_recorder():
    assert cap_warnings(["a", "", "a", "b\x07bell", "c"]) == ["a", "c"]
    long = ["x" * 1000 + str(i) for i in range(6)]  # 6006 runes: over the 4096 cap
    capped = cap_warnings(long)
    assert capped == [text[:ITEM_RUNES] for text in long]
    many = [f"{i:04d}" + "y" * 300 for i in range(40)]
    capped = cap_warnings(many)
    assert all(len(text) == ITEM_RUNES for text in capped)
    assert len(capped) == 16  # 4096 / 256, later ones omitted


# --- calls to real HTTPS webhooks ----------------------------------------------------------


async def test_mutating_webhooks_run_in_configuration_name_order_on_the_previous_output():
    objects = Objects()

    def answer(path: str, review: dict[str, Any]) -> dict[str, Any]:
        annotations = review["request"]["object"]["metadata"].get("annotations")
        if path == "/first":
            # The first webhook must see the untouched object.
            assert annotations is None
            return {
                "allowed": True,
                **json_patch(
                    [{"op": "add", "path": "/metadata/annotations", "value": {"order": "first"}}]
                ),
            }
        assert annotations == {"order": "first"}
        return {
            "allowed": True,
            **json_patch([{"op": "replace", "path": "/metadata/annotations/order", "value": "b"}]),
        }

    async with TestWebhook(answer) as hook:
        # Listed out of order on purpose: kube-apiserver sorts configurations by name.
        objects.add(
            "mutatingwebhookconfigurations", mutating("b-second", webhook("b.x", hook, "/second"))
        )
        objects.add(
            "mutatingwebhookconfigurations", mutating("a-first", webhook("a.x", hook, "/first"))
        )
        admission = WebhookAdmission(objects.list)
        patched, warnings = await admission.mutate(pod_create())
    assert hook.paths() == ["/first", "/second"]
    assert patched is not None
    assert patched["metadata"]["annotations"] == {"order": "b"}
    assert warnings == []


async def test_mutate_returns_none_when_no_webhook_changed_the_object():
    objects = Objects()
    async with TestWebhook(allow) as hook:
        objects.add("mutatingwebhookconfigurations", mutating("m", webhook("m.x", hook, "/m")))
        patched, _ = await WebhookAdmission(objects.list).mutate(pod_create())
    assert patched is None
    assert hook.paths() == ["/m"]


async def test_reinvocation_reruns_earlier_if_needed_webhooks_once():
    objects = Objects()

    def answer(path: str, review: dict[str, Any]) -> dict[str, Any]:
        annotations = review["request"]["object"]["metadata"].get("annotations") or {}
        if path == "/late" and "late" not in annotations:
            return {
                "allowed": True,
                **json_patch(
                    [{"op": "add", "path": "/metadata/annotations", "value": {"late": "1"}}]
                ),
            }
        return {"allowed": True}

    async with TestWebhook(answer) as hook:
        objects.add(
            "mutatingwebhookconfigurations",
            mutating(
                "a",
                webhook("early-ifneeded.x", hook, "/early-ifneeded", reinvocationPolicy="IfNeeded"),
                webhook("early-never.x", hook, "/early-never"),
                webhook("late.x", hook, "/late", reinvocationPolicy="IfNeeded"),
                webhook("after.x", hook, "/after", reinvocationPolicy="IfNeeded"),
            ),
        )
        patched, _ = await WebhookAdmission(objects.list).mutate(pod_create())
    # Only the IfNeeded webhook that ran before the change is called again, and only once; the
    # changing webhook itself and the ones after it are not.
    assert hook.paths() == ["/early-ifneeded", "/early-never", "/late", "/after", "/early-ifneeded"]
    second_look = hook.calls[-1].review["request"]["object"]["metadata"]["annotations"]
    assert second_look == {"late": "1"}
    assert patched is not None


async def test_reinvocation_does_not_happen_without_a_change():
    objects = Objects()
    async with TestWebhook(allow) as hook:
        objects.add(
            "mutatingwebhookconfigurations",
            mutating(
                "a",
                webhook("a.x", hook, "/a", reinvocationPolicy="IfNeeded"),
                webhook("b.x", hook, "/b"),
            ),
        )
        await WebhookAdmission(objects.list).mutate(pod_create())
    assert hook.paths() == ["/a", "/b"]


async def test_denial_uses_kube_apiserver_words_and_passes_code_through():
    objects = Objects()

    def answer(path: str, review: dict[str, Any]) -> dict[str, Any]:
        if path == "/deny":
            return {"allowed": False, "status": {"code": 403, "message": "test denial"}}
        if path == "/bare":
            return {"allowed": False}
        return {"allowed": False, "status": {"code": 422, "reason": "Invalid", "message": "bad"}}

    async with TestWebhook(answer) as hook:
        objects.add(
            "validatingwebhookconfigurations", validating("v", webhook("deny.x", hook, "/deny"))
        )
        admission = WebhookAdmission(objects.list)
        with pytest.raises(StatusError) as denied:
            await admission.validate(pod_create())
        assert denied.value.code == 403
        assert denied.value.reason == ""
        assert denied.value.message == 'admission webhook "deny.x" denied the request: test denial'

        objects.by_resource["validatingwebhookconfigurations"] = [
            validating("v", webhook("bare.x", hook, "/bare"))
        ]
        with pytest.raises(StatusError) as bare:
            await admission.validate(pod_create())
        # No status: kube-apiserver never pairs a rejection with a success code.
        assert bare.value.code == 400
        assert (
            bare.value.message
            == 'admission webhook "bare.x" denied the request without explanation'
        )

        objects.by_resource["validatingwebhookconfigurations"] = [
            validating("v", webhook("reason.x", hook, "/reason"))
        ]
        with pytest.raises(StatusError) as reasoned:
            await admission.validate(pod_create())
        assert (reasoned.value.code, reasoned.value.reason) == (422, "Invalid")


async def test_all_validating_webhooks_run_even_when_one_denies():
    objects = Objects()

    def answer(path: str, review: dict[str, Any]) -> dict[str, Any]:
        if path == "/deny":
            return {"allowed": False, "status": {"code": 403, "message": "no"}}
        return {"allowed": True}

    async with TestWebhook(answer) as hook:
        objects.add(
            "validatingwebhookconfigurations",
            validating("v", webhook("deny.x", hook, "/deny"), webhook("ok.x", hook, "/ok")),
        )
        with pytest.raises(StatusError):
            await WebhookAdmission(objects.list).validate(pod_create())
    assert sorted(hook.paths()) == ["/deny", "/ok"]


async def test_failure_policy_on_connection_refused():
    objects = Objects()
    async with TestWebhook(allow) as hook:
        closed_port_hook = webhook("down.x", hook, "/x")
    # The server is gone now: its port refuses connections.
    closed_port_hook["failurePolicy"] = "Fail"
    objects.add("mutatingwebhookconfigurations", mutating("m", closed_port_hook))
    admission = WebhookAdmission(objects.list)
    with pytest.raises(StatusError) as failed:
        await admission.mutate(pod_create())
    assert failed.value.code == 500
    assert failed.value.reason == "InternalError"
    assert failed.value.message.startswith(
        'Internal error occurred: failed calling webhook "down.x": failed to call webhook: '
        f'Post "{hook.url("/x")}?timeout=10s": dial tcp 127.0.0.1:{hook.port}: '
    )
    assert "connection refused" in failed.value.message

    closed_port_hook["failurePolicy"] = "Ignore"
    assert await admission.mutate(pod_create()) == (None, [])


async def test_failure_policy_on_timeout():
    objects = Objects()
    release = asyncio.Event()

    async def hang(path: str, review: dict[str, Any]) -> dict[str, Any]:
        await release.wait()
        return {"allowed": True}

    async with TestWebhook(hang) as hook:
        slow = webhook("slow.x", hook, "/slow", timeoutSeconds=1)
        objects.add("validatingwebhookconfigurations", validating("v", slow))
        admission = WebhookAdmission(objects.list)
        try:
            with pytest.raises(StatusError) as failed:
                await admission.validate(pod_create())
            assert failed.value.code == 500
            assert failed.value.message == (
                'Internal error occurred: failed calling webhook "slow.x": failed to call webhook: '
                f'Post "{hook.url("/slow")}?timeout=1s": context deadline exceeded'
            )
            assert hook.calls[0].query == {"timeout": "1s"}
            slow["failurePolicy"] = "Ignore"
            assert await admission.validate(pod_create()) == []
        finally:
            release.set()


async def test_undecodable_patch_follows_failure_policy_but_unappliable_patch_never_does():
    objects = Objects()

    def answer(path: str, review: dict[str, Any]) -> dict[str, Any]:
        if path == "/bad-base64":
            return {"allowed": True, "patchType": "JSONPatch", "patch": "not base64!"}
        if path == "/bad-json":
            return {
                "allowed": True,
                "patchType": "JSONPatch",
                "patch": base64.b64encode(b"{[").decode(),
            }
        return {
            "allowed": True,
            **json_patch([{"op": "replace", "path": "/spec/nodeName", "value": "n1"}]),
        }

    async with TestWebhook(answer) as hook:
        admission = WebhookAdmission(objects.list)
        for path in ("/bad-base64", "/bad-json"):
            spec = webhook("undecodable.x", hook, path)
            objects.by_resource["mutatingwebhookconfigurations"] = [mutating("m", spec)]
            with pytest.raises(StatusError) as failed:
                await admission.mutate(pod_create())
            assert failed.value.code == 500
            assert 'failed calling webhook "undecodable.x"' in failed.value.message
            spec["failurePolicy"] = "Ignore"
            assert await admission.mutate(pod_create()) == (None, [])

        spec = webhook("unappliable.x", hook, "/missing-path", failurePolicy="Ignore")
        objects.by_resource["mutatingwebhookconfigurations"] = [mutating("m", spec)]
        with pytest.raises(StatusError) as failed:
            await admission.mutate(pod_create())
    assert failed.value.code == 500
    assert failed.value.message == (
        "Internal error occurred: replace operation does not apply: doc is missing key: "
        "/spec/nodeName: missing value"
    )


async def test_patch_may_not_change_kind_or_name():
    objects = Objects()

    def answer(path: str, review: dict[str, Any]) -> dict[str, Any]:
        target = "/kind" if path == "/kind" else "/metadata/name"
        return {
            "allowed": True,
            **json_patch([{"op": "replace", "path": target, "value": "Other"}]),
        }

    async with TestWebhook(answer) as hook:
        admission = WebhookAdmission(objects.list)
        objects.add(
            "mutatingwebhookconfigurations", mutating("m", webhook("kind.x", hook, "/kind"))
        )
        with pytest.raises(StatusError) as kind_changed:
            await admission.mutate(pod_create())
        objects.by_resource["mutatingwebhookconfigurations"] = [
            mutating("m", webhook("name.x", hook, "/name"))
        ]
        with pytest.raises(StatusError) as name_changed:
            await admission.mutate(pod_create())
    assert kind_changed.value.code == 500
    assert "v1/Pod to v1/Other" in kind_changed.value.message
    assert name_changed.value.code == 400


async def test_invalid_responses_are_call_failures():
    objects = Objects()

    def answer(path: str, review: dict[str, Any]) -> dict[str, Any] | tuple[int, bytes]:
        if path == "/uid":
            return {"uid": "someone-else", "allowed": True}
        if path == "/patch-type":
            return {"allowed": True, "patch": base64.b64encode(b"[]").decode()}
        return (500, b"boom")

    async with TestWebhook(answer) as hook:
        admission = WebhookAdmission(objects.list)
        expectations = {
            "/uid": 'received invalid webhook response: expected response.uid="',
            "/patch-type": "webhook returned response.patch but not response.patchType",
            "/server-error": 'an error on the server ("boom") has prevented the request',
        }
        for path, expected in expectations.items():
            objects.by_resource["mutatingwebhookconfigurations"] = [
                mutating("m", webhook("w.x", hook, path))
            ]
            with pytest.raises(StatusError) as failed:
                await admission.mutate(pod_create())
            assert expected in failed.value.message
            assert failed.value.code == 500


async def test_namespace_selector_uses_namespace_labels_and_object_selector_uses_object_labels():
    objects = Objects()
    async with TestWebhook(allow) as hook:
        objects.add(
            "validatingwebhookconfigurations",
            validating(
                "v",
                webhook(
                    "ns.x",
                    hook,
                    "/ns",
                    namespaceSelector={
                        "matchExpressions": [
                            {
                                "key": "gpu-admission.io/exempt",
                                "operator": "NotIn",
                                "values": ["true"],
                            }
                        ]
                    },
                ),
                webhook("obj.x", hook, "/obj", objectSelector={"matchLabels": {"gpu": "yes"}}),
                webhook(
                    "nsobj.x",
                    hook,
                    "/ns-object",
                    resources=["namespaces"],
                    namespaceSelector={"matchLabels": {"team": "ml"}},
                ),
            ),
        )
        admission = WebhookAdmission(objects.list)
        await admission.validate(pod_create(pod(namespace="ml")))
        assert hook.paths() == ["/ns"]
        hook.calls.clear()
        await admission.validate(pod_create(pod(namespace="kube-system", labels={"gpu": "yes"})))
        assert hook.paths() == ["/obj"]
        hook.calls.clear()
        # UPDATE: the old object's labels match too.
        new, old = pod(labels={}), pod(labels={"gpu": "yes"})
        await admission.validate(pod_create(new, operation="UPDATE", old_object=old))
        assert sorted(hook.paths()) == ["/ns", "/obj"]
        hook.calls.clear()
        # A Namespace being created is matched on its own labels.
        namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "new", "labels": {"team": "ml"}},
        }
        await admission.validate(
            pod_create(
                namespace, resource="namespaces", kind="Namespace", namespace="new", name="new"
            )
        )
        assert hook.paths() == ["/ns-object"]
        hook.calls.clear()
        with pytest.raises(StatusError) as missing:
            await admission.validate(pod_create(pod(namespace="absent")))
    assert missing.value.code == 404
    assert missing.value.message == 'namespaces "absent" not found'


async def test_dry_run_with_side_effects_is_rejected_with_400():
    objects = Objects()
    async with TestWebhook(allow) as hook:
        objects.add(
            "mutatingwebhookconfigurations",
            mutating("m", webhook("effects.x", hook, "/m", sideEffects="Some")),
        )
        admission = WebhookAdmission(objects.list)
        with pytest.raises(StatusError) as rejected:
            await admission.mutate(pod_create(dry_run=True))
        assert (rejected.value.code, rejected.value.reason) == (400, "BadRequest")
        assert rejected.value.message == 'admission webhook "effects.x" does not support dry run'
        assert hook.calls == []
        # Without dryRun the same webhook is called; with NoneOnDryRun a dry run is fine.
        await admission.mutate(pod_create())
        objects.by_resource["mutatingwebhookconfigurations"][0]["webhooks"][0]["sideEffects"] = (
            "NoneOnDryRun"
        )
        await admission.mutate(pod_create(dry_run=True))
    assert len(hook.calls) == 2
    assert hook.calls[1].review["request"]["dryRun"] is True


async def test_warnings_are_collected_from_mutating_and_validating_webhooks():
    objects = Objects()

    def answer(path: str, review: dict[str, Any]) -> dict[str, Any]:
        return {"allowed": True, "warnings": [f"from {path}", "shared", "bad\nline"]}

    async with TestWebhook(answer) as hook:
        objects.add("mutatingwebhookconfigurations", mutating("m", webhook("m.x", hook, "/m")))
        objects.add("validatingwebhookconfigurations", validating("v", webhook("v.x", hook, "/v")))
        admission = WebhookAdmission(objects.list)
        _, mutate_warnings = await admission.mutate(pod_create())
        validate_warnings = await admission.validate(pod_create())
    assert mutate_warnings == ["from /m", "shared"]
    assert validate_warnings == ["from /v", "shared"]


async def test_service_reference_is_verified_against_the_service_dns_name():
    objects = Objects()
    async with (
        TestWebhook(allow, dns_names=[SERVICE_HOST]) as good,
        TestWebhook(allow, dns_names=["elsewhere.example"]) as wrong_name,
    ):
        spec = webhook("svc.x", good, "/mutate/pods", service=True)
        objects.add("mutatingwebhookconfigurations", mutating("m", spec))
        admission = WebhookAdmission(objects.list, {(SERVICE_NS, SERVICE_NAME): good.address})
        await admission.mutate(pod_create())
        call = good.calls[0]
        assert call.path == "/mutate/pods"
        assert call.query == {"timeout": "10s"}
        assert call.headers["Host"].split(":")[0] == SERVICE_HOST
        for header, value in {
            "Content-Type": "application/json",
            "Accept": "application/json, */*",
            "Accept-Encoding": "gzip",
            "User-Agent": "kube-apiserver-admission",
        }.items():
            assert call.headers[header] == value

        # Same CA trust but a certificate without the service name: TLS verification fails.
        spec["clientConfig"]["caBundle"] = wrong_name.ca_bundle
        admission.register_service(SERVICE_NS, SERVICE_NAME, wrong_name.address)
        with pytest.raises(StatusError) as failed:
            await admission.mutate(pod_create())
        assert f"x509: certificate is not valid for {SERVICE_HOST}" in failed.value.message
        assert wrong_name.calls == []

        # A caBundle that did not sign the serving certificate is not trusted either.
        spec["clientConfig"]["caBundle"] = wrong_name.ca_bundle
        admission.register_service(SERVICE_NS, SERVICE_NAME, good.address)
        with pytest.raises(StatusError) as untrusted:
            await admission.mutate(pod_create())
    assert "certificate signed by unknown authority" in untrusted.value.message


async def test_admission_review_versions_must_include_v1():
    objects = Objects()
    async with TestWebhook(allow) as hook:
        spec = webhook("old.x", hook, "/m", admissionReviewVersions=["v1beta1"])
        objects.add("mutatingwebhookconfigurations", mutating("m", spec))
        with pytest.raises(StatusError) as failed:
            await WebhookAdmission(objects.list).mutate(pod_create())
    assert "does not accept known AdmissionReview versions [v1beta1]" in failed.value.message
    assert hook.calls == []


def _fixture_request(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())["request"]


def _attrs_from_fixture(request: dict[str, Any]) -> AdmissionAttributes:
    return AdmissionAttributes(
        operation=request["operation"],
        group=request["resource"]["group"],
        version=request["resource"]["version"],
        resource=request["resource"]["resource"],
        subresource=request.get("subResource", ""),
        kind_group=request["kind"]["group"],
        kind_version=request["kind"]["version"],
        kind=request["kind"]["kind"],
        namespace=request.get("namespace", ""),
        name=request.get("name", ""),
        object=request["object"],
        old_object=request["oldObject"],
        dry_run=request["dryRun"],
        options=request["options"],
        user_info=request["userInfo"],
    )


@pytest.mark.parametrize(
    "fixture",
    [
        "pod-from-deployment.mutating.json",
        "pod-from-deployment.validating.json",
        "pvc-status-update.mutating.json",
        "pod-dry-run.mutating.json",
        "secret-update.mutating.json",
        "serviceaccount-create-by-controller.mutating.json",
    ],
)
async def test_request_body_has_the_captured_shape(fixture):
    captured = _fixture_request(fixture)
    objects = Objects()
    resource = captured["resource"]["resource"]
    if "subResource" in captured:
        resource += "/" + captured["subResource"]
    async with TestWebhook(allow) as hook:
        spec = webhook("shape.x", hook, "/shape", resources=[resource], sideEffects="None")
        objects.add("validatingwebhookconfigurations", validating("v", spec))
        await WebhookAdmission(objects.list).validate(_attrs_from_fixture(captured))
    sent = hook.calls[0].review
    assert list(sent) == ["kind", "apiVersion", "request"]
    assert (sent["kind"], sent["apiVersion"]) == ("AdmissionReview", "admission.k8s.io/v1")
    request = sent["request"]
    assert list(request) == list(captured)  # same keys, same order, none extra
    for key in captured:
        if key != "uid":
            assert request[key] == captured[key], key
    assert request["uid"] != captured["uid"]


async def test_each_call_gets_its_own_uid_and_create_has_null_old_object():
    objects = Objects()
    async with TestWebhook(allow) as hook:
        objects.add("mutatingwebhookconfigurations", mutating("m", webhook("m.x", hook, "/m")))
        objects.add("validatingwebhookconfigurations", validating("v", webhook("v.x", hook, "/v")))
        admission = WebhookAdmission(objects.list)
        generated = pod()
        del generated["metadata"]["name"]
        generated["metadata"]["generateName"] = "train-"
        attrs = pod_create(generated, name="", options={})
        await admission.mutate(attrs)
        await admission.validate(attrs)
    first, second = (call.review["request"] for call in hook.calls)
    assert first["uid"] != second["uid"]
    assert "name" not in first
    assert first["oldObject"] is None and "oldObject" in first
    assert first["options"] == {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
    assert "subResource" not in first


# --- through the emulator and the real kubernetes client -----------------------------------


@pytest.fixture
def emulated(kubeapi, kube_client):
    """The emulator with this admission chain installed, and the clients a test needs."""
    kubeapi.server.admission = WebhookAdmission(kubeapi.server.list_objects)
    core = client.CoreV1Api(kube_client)
    core.create_namespace({"metadata": {"name": "ml", "labels": {"team": "ml"}}})
    return kubeapi.server.admission, core, client.AdmissionregistrationV1Api(kube_client)


async def test_through_the_emulator_mutation_precedes_validation_and_denials_reach_the_client(
    emulated,
):
    admission, core, registration = emulated

    def answer(path: str, review: dict[str, Any]) -> dict[str, Any]:
        obj = review["request"]["object"]
        if path == "/mutate":
            # Empty maps are dropped on the way in, as by kube-apiserver: add the whole map.
            operation = {
                "op": "add",
                "path": "/metadata/annotations",
                "value": {"seen": "mutating"},
            }
            return {"allowed": True, **json_patch([operation]), "warnings": ["mutated by test"]}
        # The validating webhook sees the mutated object.
        assert obj["metadata"]["annotations"] == {"seen": "mutating"}
        if obj["metadata"]["name"] == "denied":
            return {"allowed": False, "status": {"code": 403, "message": "test denial"}}
        return {"allowed": True, "warnings": ["validated by test"]}

    async with TestWebhook(answer, dns_names=[SERVICE_HOST]) as hook:
        admission.register_service(SERVICE_NS, SERVICE_NAME, hook.address)
        registration.create_mutating_webhook_configuration(
            mutating("m", webhook("m.x", hook, "/mutate", service=True))
        )
        registration.create_validating_webhook_configuration(
            validating("v", webhook("v.x", hook, "/validate", service=True))
        )
        with_annotations = pod()
        with_annotations["metadata"]["annotations"] = {}
        response = await asyncio.to_thread(
            core.create_namespaced_pod, "ml", pod("allowed"), _preload_content=False
        )
        created = json.loads(response.data)
        warnings = (
            response.headers.get_all("Warning")
            if hasattr(response.headers, "get_all")
            else response.headers.getlist("Warning")
        )
        with pytest.raises(ApiException) as denied:
            await asyncio.to_thread(core.create_namespaced_pod, "ml", pod("denied"))
    assert hook.paths() == ["/mutate", "/validate", "/mutate", "/validate"]
    assert created["metadata"]["annotations"] == {"seen": "mutating"}
    assert any("mutated by test" in w for w in warnings)
    assert any("validated by test" in w for w in warnings)
    assert denied.value.status == 403
    status = json.loads(denied.value.body)
    assert status["message"] == 'admission webhook "v.x" denied the request: test denial'
    stored = [
        p["metadata"]["name"]
        for p in (
            await asyncio.to_thread(core.list_namespaced_pod, "ml", _preload_content=False) and []
        )
    ]
    assert stored == []


async def test_through_the_emulator_dry_run_with_side_effects_is_a_bad_request(emulated):
    _, core, registration = emulated
    async with TestWebhook(allow) as hook:
        registration.create_validating_webhook_configuration(
            validating("v", webhook("effects.x", hook, "/v", sideEffects="Unknown"))
        )
        with pytest.raises(ApiException) as rejected:
            await asyncio.to_thread(core.create_namespaced_pod, "ml", pod("dry"), dry_run="All")
        await asyncio.to_thread(core.create_namespaced_pod, "ml", pod("real"))
    assert rejected.value.status == 400
    assert json.loads(rejected.value.body)["message"] == (
        'admission webhook "effects.x" does not support dry run'
    )
    assert len(hook.calls) == 1


# --- matchConditions -------------------------------------------------------------------------

HAS_LABELS = {"name": "has-labels", "expression": "has(object.metadata.labels)"}
ERRORS = {"name": "errors", "expression": "object.metadata.missing == 'x'"}  # no such key
NEVER = {"name": "never", "expression": "false"}


@pytest.mark.parametrize(
    ("conditions", "called"),
    [([HAS_LABELS], True), ([NEVER], False), ([ERRORS, NEVER], False)],
    ids=["true", "false", "a false condition wins over an error"],
)
async def test_match_conditions_decide_whether_the_webhook_is_called(
    conditions: list[dict[str, str]], called: bool
) -> None:
    objects = Objects()
    async with TestWebhook(allow) as hook:
        objects.add(
            "validatingwebhookconfigurations",
            validating("v", webhook("cond.x", hook, "/v", matchConditions=conditions)),
        )
        await WebhookAdmission(objects.list).validate(pod_create(pod(labels={"a": "b"})))
    assert hook.paths() == (["/v"] if called else [])


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_a_match_condition_error_fails_closed_with_403_or_skips(policy: str) -> None:
    objects = Objects()
    async with TestWebhook(allow) as hook:
        spec = webhook("cond.x", hook, "/v", matchConditions=[ERRORS], failurePolicy=policy)
        objects.add("validatingwebhookconfigurations", validating("v", spec))
        admission = WebhookAdmission(objects.list)
        if policy == "Ignore":
            await admission.validate(pod_create())
        else:
            with pytest.raises(StatusError) as refused:
                await admission.validate(pod_create())
            assert refused.value.code == 403 and refused.value.reason == "Forbidden"
            assert refused.value.message.startswith('pods "train" is forbidden: ')
    assert hook.paths() == []
