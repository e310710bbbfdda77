"""The cloud-credentials mutating policy: which Secrets a pod gets, and how."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from gpu_admission.cluster.view import ObjectRef, SecretInfo, ServiceAccountInfo, StaticClusterView
from gpu_admission.config.model import Config
from tests.webhooks.policy_helpers import load_fixture, make_request, mutate_twice
from webhooks.policies.credential_injection import (
    parse_names,
    policies,
    service_account_name,
    volume_name,
)

POLICIES = policies(Config())
(POLICY,) = POLICIES
NS = "ml"
CREDS = "gpu-admission.io/cloud-credentials"
OPT = "gpu-admission.io/inject-cloud-credentials"
SKIP = "gpu-admission.io/skip-containers"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def gcp(name: str, keys: tuple[str, ...] = ("key.json",)) -> SecretInfo:
    return SecretInfo(NS, name, "gcp-credential", frozenset(keys))


def aws(name: str, *extra: str) -> SecretInfo:
    return SecretInfo(
        NS,
        name,
        "aws-credential",
        frozenset({"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", *extra}),
    )


def sa(name: str, credentials: str | None = None) -> ServiceAccountInfo:
    return ServiceAccountInfo(NS, name, {CREDS: credentials} if credentials is not None else {})


def view(*records: SecretInfo | ServiceAccountInfo) -> StaticClusterView:
    return StaticClusterView(
        secrets=[r for r in records if isinstance(r, SecretInfo)],
        service_accounts=[r for r in records if isinstance(r, ServiceAccountInfo)],
    )


def pod(
    annotations: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    service_account: str | None = "default",
    volumes: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers or [{"name": "main", "image": "python"}]}
    if init_containers is not None:
        spec["initContainers"] = init_containers
    if service_account is not None:
        spec["serviceAccountName"] = service_account
    if volumes is not None:
        spec["volumes"] = volumes
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": NS, "annotations": annotations or {}},
        "spec": spec,
    }


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def mounts_of(container: dict[str, Any]) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in container.get("volumeMounts") or []}


def secret_ref(name: str, key: str) -> dict[str, Any]:
    return {"secretKeyRef": {"name": name, "key": key}}


def run(obj: dict[str, Any], cluster: StaticClusterView) -> tuple[list, list[str], Any, dict]:
    return mutate_twice(POLICIES, obj, cluster)


# -- the captured pod --------------------------------------------------------------------------


def test_captured_pod_gets_both_secrets() -> None:
    obj = load_fixture("pod-with-credentials-annotation.mutating.json")["request"]["object"]
    cluster = view(gcp("gcs-reader"), aws("s3-writer", "AWS_REGION"), sa("trainer", "gcs-reader"))
    ops, warnings, verdict, patched = run(obj, cluster)
    assert verdict is None and warnings == []
    (container,) = patched["spec"]["containers"]
    assert mounts_of(container) == {
        "/var/run/secrets/kubernetes.io/serviceaccount": obj["spec"]["volumes"][0]["name"],
        "/var/run/secrets/gcp/gcs-reader": "gcp-gcs-reader",
    }
    assert {"name": "gcp-gcs-reader", "secret": {"secretName": "gcs-reader"}} in patched["spec"][
        "volumes"
    ]
    mount = container["volumeMounts"][-1]
    assert mount["readOnly"] is True
    assert env_of(container) == {
        "GOOGLE_APPLICATION_CREDENTIALS": "/var/run/secrets/gcp/gcs-reader/key.json",
        "AWS_ACCESS_KEY_ID": secret_ref("s3-writer", "AWS_ACCESS_KEY_ID"),
        "AWS_SECRET_ACCESS_KEY": secret_ref("s3-writer", "AWS_SECRET_ACCESS_KEY"),
        "AWS_REGION": secret_ref("s3-writer", "AWS_REGION"),
        "AWS_DEFAULT_REGION": secret_ref("s3-writer", "AWS_REGION"),
    }
    # References only: no op carries anything but names, paths and key names.
    assert all("data" not in str(op.get("value")) for op in ops)


def test_references_of_the_captured_pod() -> None:
    request = make_request(
        load_fixture("pod-with-credentials-annotation.mutating.json")["request"]["object"]
    )
    assert list(POLICY.references(request)) == [
        ObjectRef("ServiceAccount", NS, "trainer"),
        ObjectRef("Secret", NS, "gcs-reader"),
        ObjectRef("Secret", NS, "s3-writer"),
    ]


def test_references_name_the_service_accounts_secrets_once_it_is_known() -> None:
    request = make_request(pod({CREDS: "a"}, service_account="trainer"))
    cluster = view(sa("trainer", "a, b"))
    assert list(POLICY.references(request, cluster)) == [  # type: ignore[call-arg]
        ObjectRef("ServiceAccount", NS, "trainer"),
        ObjectRef("Secret", NS, "a"),
        ObjectRef("Secret", NS, "b"),
    ]


def test_references_when_opted_out_skip_the_service_account() -> None:
    request = make_request(pod({CREDS: "a", OPT: "false"}, service_account="trainer"))
    assert list(POLICY.references(request)) == [ObjectRef("Secret", NS, "a")]


# -- who asks ----------------------------------------------------------------------------------


def test_pod_annotation_parsing() -> None:
    assert parse_names(" a ,b,, a,  c ") == ["a", "b", "c"]
    assert parse_names("") == [] and parse_names(None) == []
    _, _, verdict, patched = run(pod({CREDS: " s3 , s3 ,"}), view(aws("s3")))
    assert verdict is None
    env = patched["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env] == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]


def test_by_service_account() -> None:
    cluster = view(gcp("gcs-reader"), sa("trainer", "gcs-reader"))
    _, _, verdict, patched = run(pod(service_account="trainer"), cluster)
    assert verdict is None
    assert "GOOGLE_APPLICATION_CREDENTIALS" in env_of(patched["spec"]["containers"][0])


def test_default_service_account_when_none_is_named() -> None:
    obj = pod(service_account=None)
    assert service_account_name(obj) == "default"
    _, _, _, patched = run(obj, view(aws("s3"), sa("default", "s3")))
    assert "AWS_ACCESS_KEY_ID" in env_of(patched["spec"]["containers"][0])


def test_deprecated_service_account_field() -> None:
    obj = pod(service_account=None)
    obj["spec"]["serviceAccount"] = "trainer"
    assert service_account_name(obj) == "trainer"


def test_pod_and_service_account_naming_the_same_secret() -> None:
    cluster = view(aws("s3"), sa("default", "s3"))
    _ops, _, verdict, patched = run(pod({CREDS: "s3"}), cluster)
    assert verdict is None
    assert len(patched["spec"]["containers"][0]["env"]) == 2


def test_opt_out_drops_the_service_accounts_secrets_only() -> None:
    cluster = view(gcp("gcs"), aws("s3"), sa("default", "gcs"))
    _, _, verdict, patched = run(pod({OPT: "false"}), cluster)
    assert verdict is None and patched == pod({OPT: "false"})
    _, _, verdict, patched = run(pod({OPT: " False ", CREDS: "s3"}), cluster)
    env = env_of(patched["spec"]["containers"][0])
    assert "AWS_ACCESS_KEY_ID" in env and "GOOGLE_APPLICATION_CREDENTIALS" not in env


def test_opt_out_with_an_unclear_value_warns_and_keeps_injecting() -> None:
    cluster = view(aws("s3"), sa("default", "s3"))
    _, warnings, _, patched = run(pod({OPT: "no"}), cluster)
    assert "AWS_ACCESS_KEY_ID" in env_of(patched["spec"]["containers"][0])
    assert any('must be "true" or "false"' in w for w in warnings)


def test_nothing_asked_records_nothing() -> None:
    ops, warnings, verdict, _ = run(pod(), view(sa("default")))
    assert (ops, warnings, verdict) == ([], [], None)
    ops, _, _, _ = run(pod(), view())  # no ServiceAccount known: nothing to add
    assert ops == []


def test_scope_is_pod_create_only() -> None:
    obj = pod({CREDS: "s3"})
    assert POLICY.scope.matches(make_request(obj))
    assert not POLICY.scope.matches(make_request(obj, operation="UPDATE"))
    assert not POLICY.scope.matches(
        make_request(obj, operation="UPDATE", sub_resource="ephemeralcontainers")
    )


# -- refusals ----------------------------------------------------------------------------------


def test_missing_secret_is_denied() -> None:
    _, _, verdict, _ = run(pod({CREDS: "nope"}), view())
    assert verdict is not None and not verdict.allowed
    assert 'Secret "nope" (named by the pod annotation gpu-admission.io/cloud-credentials)' in (
        verdict.message
    )
    assert 'does not exist in namespace "ml"' in verdict.message
    assert (
        "gcp-credential, aws-credential, azure-credential or huggingface-credential"
        in verdict.message
    )


def test_missing_secret_named_by_the_service_account_is_denied() -> None:
    _, _, verdict, _ = run(pod(service_account="trainer"), view(sa("trainer", "gone")))
    assert verdict is not None and not verdict.allowed
    assert 'Secret "gone" (named by ServiceAccount "trainer") does not exist' in verdict.message


def test_wrong_type_is_denied() -> None:
    opaque = SecretInfo(NS, "plain", "Opaque", frozenset({"token"}))
    _, _, verdict, _ = run(pod({CREDS: "plain"}), view(opaque))
    assert verdict is not None and not verdict.allowed
    assert 'Secret "plain"' in verdict.message
    assert (
        "has type Opaque; cloud credentials must be of type gcp-credential, aws-credential, "
        "azure-credential or huggingface-credential" in (verdict.message)
    )


def test_two_of_a_type_is_denied() -> None:
    _, _, verdict, _ = run(pod({CREDS: "a,b"}), view(gcp("a"), gcp("b")))
    assert verdict is not None and not verdict.allowed
    assert '"a"' in verdict.message and '"b"' in verdict.message
    assert "all of type gcp-credential, which is ambiguous" in verdict.message


def test_two_of_a_type_across_pod_and_service_account_is_denied() -> None:
    cluster = view(aws("mine"), aws("team"), sa("default", "team"))
    _, _, verdict, _ = run(pod({CREDS: "mine"}), cluster)
    assert verdict is not None and not verdict.allowed
    assert '"team" (named by ServiceAccount "default")' in verdict.message
    assert "aws-credential" in verdict.message


def test_all_problems_in_one_denial() -> None:
    cluster = view(gcp("a"), gcp("b"), SecretInfo(NS, "o", "Opaque"))
    _, _, verdict, _ = run(pod({CREDS: "a,b,o,x"}), cluster)
    assert verdict is not None
    for expected in ('"o"', '"x"', "ambiguous"):
        assert expected in verdict.message


def test_credential_secret_without_its_keys_is_denied() -> None:
    _, _, verdict, _ = run(pod({CREDS: "g"}), view(gcp("g", keys=())))
    assert verdict is not None and "lacks key.json" in verdict.message
    bare = SecretInfo(NS, "s3", "aws-credential", frozenset({"AWS_ACCESS_KEY_ID"}))
    _, _, verdict, _ = run(pod({CREDS: "s3"}), view(bare))
    assert verdict is not None and "lacks AWS_SECRET_ACCESS_KEY" in verdict.message


# -- where things go ---------------------------------------------------------------------------


def test_init_containers_get_credentials_and_ephemeral_ones_are_left_alone() -> None:
    obj = pod(
        {CREDS: "g,s3"},
        init_containers=[{"name": "fetch", "image": "busybox"}],
        containers=[{"name": "a", "image": "x"}, {"name": "b", "image": "y"}],
    )
    obj["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox"}]
    _, _, _, patched = run(obj, view(gcp("g"), aws("s3", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL")))
    spec = patched["spec"]
    for container in (*spec["initContainers"], *spec["containers"]):
        env = env_of(container)
        assert env["GOOGLE_APPLICATION_CREDENTIALS"] == "/var/run/secrets/gcp/g/key.json"
        assert env["AWS_SESSION_TOKEN"] == secret_ref("s3", "AWS_SESSION_TOKEN")
        assert env["AWS_ENDPOINT_URL"] == secret_ref("s3", "AWS_ENDPOINT_URL")
        assert "AWS_DEFAULT_REGION" not in env
        assert mounts_of(container) == {"/var/run/secrets/gcp/g": "gcp-g"}
    assert spec["ephemeralContainers"] == [{"name": "debug", "image": "busybox"}]
    assert len(spec["volumes"]) == 1


def test_skipped_containers_get_nothing() -> None:
    obj = pod(
        {CREDS: "g,s3", SKIP: "istio-proxy, sidecar"},
        containers=[
            {"name": "main", "image": "x"},
            {"name": "sidecar", "image": "y"},
            {"name": "istio-proxy", "image": "z"},
        ],
    )
    _, warnings, _, patched = run(obj, view(gcp("g"), aws("s3")))
    main, sidecar, proxy = patched["spec"]["containers"]
    assert "GOOGLE_APPLICATION_CREDENTIALS" in env_of(main)
    assert sidecar == {"name": "sidecar", "image": "y"}
    assert proxy == {"name": "istio-proxy", "image": "z"}
    assert warnings == []


def test_skipping_every_container_adds_no_volume() -> None:
    obj = pod({CREDS: "g", SKIP: "main"})
    ops, _, verdict, _patched = run(obj, view(gcp("g")))
    assert verdict is None and ops == []


def test_skip_list_naming_an_unknown_container_warns() -> None:
    _, warnings, _, _ = run(pod({CREDS: "g", SKIP: "sidecar"}), view(gcp("g")))
    assert any("names sidecar, not containers of this pod" in w for w in warnings)


def test_container_with_its_own_google_application_credentials_keeps_it() -> None:
    own = {"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": "/etc/gcp/mine.json"}
    obj = pod({CREDS: "g"}, containers=[{"name": "main", "image": "x", "env": [own]}])
    _, warnings, _, patched = run(obj, view(gcp("g")))
    (container,) = patched["spec"]["containers"]
    assert container["env"] == [own]
    assert mounts_of(container) == {"/var/run/secrets/gcp/g": "gcp-g"}
    assert len(warnings) == 1
    assert 'container "main" sets its own GOOGLE_APPLICATION_CREDENTIALS; kept it' in warnings[0]


def test_aws_env_collisions_keep_the_containers_values() -> None:
    own = [
        {"name": "AWS_REGION", "value": "eu-west-1"},
        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": secret_ref("other", "id")},
        {"name": "PATH", "value": "/bin"},
    ]
    obj = pod({CREDS: "s3"}, containers=[{"name": "main", "image": "x", "env": copy.deepcopy(own)}])
    _, warnings, _, patched = run(obj, view(aws("s3", "AWS_REGION")))
    env = patched["spec"]["containers"][0]["env"]
    assert env[:3] == own
    assert env_of(patched["spec"]["containers"][0]) == {
        "AWS_REGION": "eu-west-1",
        "AWS_ACCESS_KEY_ID": secret_ref("other", "id"),
        "PATH": "/bin",
        "AWS_SECRET_ACCESS_KEY": secret_ref("s3", "AWS_SECRET_ACCESS_KEY"),
        "AWS_DEFAULT_REGION": secret_ref("s3", "AWS_REGION"),
    }
    (warning,) = warnings
    assert 'container "main" sets its own AWS_ACCESS_KEY_ID, AWS_REGION; kept them' in warning


def test_another_volume_at_the_mount_path_is_kept() -> None:
    mount = {"name": "mine", "mountPath": "/var/run/secrets/gcp/g/"}
    obj = pod(
        {CREDS: "g"},
        containers=[{"name": "main", "image": "x", "volumeMounts": [mount]}],
        volumes=[{"name": "mine", "emptyDir": {}}],
    )
    ops, warnings, _, _patched = run(obj, view(gcp("g")))
    assert ops == []
    assert any("already mounts another volume at /var/run/secrets/gcp/g" in w for w in warnings)


def test_users_own_volume_of_the_secret_is_reused() -> None:
    volume = {"name": "creds", "secret": {"secretName": "g", "defaultMode": 420}}
    obj = pod({CREDS: "g"}, volumes=[volume])
    _, _, _, patched = run(obj, view(gcp("g")))
    assert patched["spec"]["volumes"] == [volume]
    assert mounts_of(patched["spec"]["containers"][0]) == {"/var/run/secrets/gcp/g": "creds"}


def test_volume_name_collision_gets_a_hashed_name() -> None:
    taken = {"name": "gcp-g", "configMap": {"name": "settings"}}
    obj = pod({CREDS: "g"}, volumes=[taken])
    _, _, _, patched = run(obj, view(gcp("g")))
    first, ours = patched["spec"]["volumes"]
    assert first == taken
    assert ours["name"] != "gcp-g" and ours["name"].startswith("gcp-g-")
    assert DNS_LABEL.fullmatch(ours["name"])
    assert mounts_of(patched["spec"]["containers"][0])["/var/run/secrets/gcp/g"] == ours["name"]


def test_long_and_dotted_secret_names_get_valid_distinct_volume_names() -> None:
    long_a = "a" * 240 + ".team-a"
    long_b = "a" * 240 + ".team-b"
    dotted = "gcs.reader"
    names = [volume_name(n, ()) for n in (long_a, long_b, dotted)]
    for name in names:
        assert len(name) <= 63 and DNS_LABEL.fullmatch(name), name
    assert len(set(names)) == 3
    assert volume_name("gcs-reader", ()) == "gcp-gcs-reader"
    # Stable for the same inputs, and it avoids names already taken, even hashed ones.
    assert volume_name(long_a, ()) == names[0]
    assert volume_name(long_a, {names[0]}) not in {names[0]}
    # gcs.reader and gcs-reader do not share a volume.
    assert volume_name("gcs.reader", ()) != volume_name("gcs-reader", ())


def test_long_secret_name_end_to_end() -> None:
    name = "x" * 250
    _, _, verdict, patched = run(pod({CREDS: name}), view(gcp(name)))
    assert verdict is None
    (volume,) = patched["spec"]["volumes"]
    assert len(volume["name"]) <= 63 and DNS_LABEL.fullmatch(volume["name"])


@pytest.mark.parametrize("field", ["env", "volumeMounts"])
def test_null_lists_are_replaced(field: str) -> None:
    obj = pod({CREDS: "g"}, containers=[{"name": "main", "image": "x", field: None}])
    _, _, verdict, patched = run(obj, view(gcp("g")))
    assert verdict is None
    assert patched["spec"]["containers"][0][field]


def test_reinvocation_after_api_server_defaulting_records_nothing() -> None:
    cluster = view(gcp("g"), aws("s3", "AWS_REGION"))
    _, _, _, patched = run(pod({CREDS: "g,s3"}), cluster)
    defaulted = copy.deepcopy(patched)
    defaulted["spec"]["volumes"][0]["secret"]["defaultMode"] = 420
    ops, warnings, verdict, again = mutate_twice(POLICIES, defaulted, cluster)
    assert (ops, warnings, verdict) == ([], [], None)
    assert again == defaulted
