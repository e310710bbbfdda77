"""The comparison of an admission object with what the configuration implies: what the API server
defaults, adds or others write is no difference; anything else is, named by its path."""

from __future__ import annotations

from gpu_admission.admission.installed import (
    CredentialsFinding,
    InstallReport,
    ObjectFinding,
    ObjectState,
    difference,
    object_difference,
)

EXPECTED = {
    "webhooks": [
        {
            "name": "a",
            "rules": [{"operations": ["CREATE"], "resources": ["pods"]}],
            "matchConditions": [{"name": "c", "expression": "x &&\n y"}],
            "clientConfig": {"service": {"name": "s", "path": "/p"}},
        }
    ]
}


def _live(**entry: object) -> dict[str, object]:
    base = {
        "name": "a",
        "rules": [{"operations": ["CREATE"], "resources": ["pods"], "scope": "*"}],
        "matchConditions": [{"name": "c", "expression": "x && y"}],
        "clientConfig": {"service": {"name": "s", "path": "/p", "port": 443}, "caBundle": "LS0"},
        "matchPolicy": "Equivalent",
        "objectSelector": {},
        "namespaceSelector": {},
        "timeoutSeconds": 10,
    }
    return {"webhooks": [{**base, **entry}]}


def test_what_the_server_defaults_and_others_write_is_no_difference() -> None:
    assert difference(EXPECTED, _live()) is None


def test_a_value_other_than_the_default_is_a_difference() -> None:
    assert difference(EXPECTED, _live(timeoutSeconds=30)) == (
        "webhooks[0].timeoutSeconds is 30, which the configuration does not set"
    )
    assert difference(EXPECTED, _live(matchPolicy="Exact")) is not None


def test_a_changed_removed_or_added_item_is_named() -> None:
    changed = _live(matchConditions=[{"name": "c", "expression": "true"}])
    assert difference(EXPECTED, changed) == (
        'webhooks[0].matchConditions[0].expression is "true", expected "x &&\\n y"'
    )
    assert difference(EXPECTED, _live(matchConditions=[])) == (
        "webhooks[0].matchConditions has 0 item(s), expected 1: []"
    )
    removed = _live()
    del removed["webhooks"][0]["matchConditions"]  # type: ignore[index]
    assert difference(EXPECTED, removed) == (
        'webhooks[0].matchConditions is not set; expected [{"expression": "x &&\\n y", '
        '"name": "c"}]'
    )
    extra = _live()
    extra["webhooks"].append({"name": "b"})  # type: ignore[attr-defined]
    assert "has 2 item(s), expected 1" in str(difference(EXPECTED, extra))


def test_metadata_and_status_are_not_compared() -> None:
    expected = {"kind": "K", "metadata": {"name": "n"}, "spec": {"a": 1}}
    live = {"metadata": {"name": "n", "uid": "u", "labels": {"x": "y"}}, "spec": {"a": 1}}
    assert object_difference(expected, {**live, "status": {"x": 1}}) is None
    assert object_difference(expected, {**live, "spec": {"a": 2}}) == "spec.a is 2, expected 1"


def test_isolation_is_enforced_only_while_every_carrier_is_ok() -> None:
    ok = ObjectFinding("MutatingAdmissionPolicy", "v", ObjectState.OK, isolation=True)
    other = ObjectFinding("ValidatingAdmissionPolicy", "p", ObjectState.STALE)
    assert InstallReport("manifests/", (ok, other)).isolation_enforced
    gone = ObjectFinding("MutatingAdmissionPolicy", "v", ObjectState.MISSING, isolation=True)
    assert not InstallReport("manifests/", (gone, other)).isolation_enforced
    assert not InstallReport("manifests/", (other,)).isolation_enforced  # nothing carries it


def test_a_credentials_finding_says_the_count_and_the_command() -> None:
    finding = CredentialsFinding("team", "trainer", ("s3",), "example.io/routed", 2)
    assert "2 running pod(s) of it lack them" in finding.message
    assert "kubectl label namespace team example.io/routed=true --overwrite" in finding.message
