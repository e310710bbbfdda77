"""ServiceAccount tokens from the emulator: TokenRequest as kube-apiserver answers it, tokens a
provider can verify from the issuer's published keys, and the fake kubelet projecting them."""

from __future__ import annotations

import json
import ssl

import pytest
from kubernetes.client.exceptions import ApiException

from tests.world.stand_ins.jwt_check import TokenRejected, fetch_jwks, verify
from tests.world.tests.workloads import NAMESPACE, job, job_condition, wait_for

pytestmark = pytest.mark.e2e  # runs real processes or waits on real time: not in the fast tier


def context(kubeapi) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(kubeapi.ca_path))


def token_request(audiences: list[str] | None = None, seconds: int = 3600) -> dict:
    spec: dict = {"expirationSeconds": seconds}
    if audiences is not None:
        spec["audiences"] = audiences
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}


def test_a_token_verifies_against_the_issuers_published_keys(kubeapi, core):
    answer = core.create_namespaced_service_account_token(
        "default", NAMESPACE, token_request(["sts.amazonaws.com"])
    )
    jwks = fetch_jwks(kubeapi.url, context(kubeapi))
    claims = verify(answer.status.token, jwks, kubeapi.url, "sts.amazonaws.com")
    assert claims["sub"] == f"system:serviceaccount:{NAMESPACE}:default"
    assert claims["kubernetes.io"]["namespace"] == NAMESPACE
    assert claims["exp"] - claims["iat"] == 3600
    with pytest.raises(TokenRejected, match="audience"):
        verify(answer.status.token, jwks, kubeapi.url, "//iam.googleapis.com/other")
    forged = answer.status.token[:-4] + (
        "AAAA" if not answer.status.token.endswith("AAAA") else "BBBB"
    )
    with pytest.raises(TokenRejected, match="signature"):
        verify(forged, jwks, kubeapi.url, "sts.amazonaws.com")


def test_token_request_validation_and_missing_accounts(core):
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_service_account_token(
            "default", NAMESPACE, token_request(seconds=599)
        )
    assert caught.value.status == 422
    assert json.loads(caught.value.body)["message"] == (
        'TokenRequest.authentication.k8s.io "default" is invalid: spec.expirationSeconds: '
        "Invalid value: 599: may not specify a duration less than 10 minutes"
    )
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_service_account_token("nobody", NAMESPACE, token_request())
    assert caught.value.status == 404


def test_the_kubelet_projects_a_bound_token_with_its_audience(kubeapi, kubelet, core, batch):
    container = {
        "name": "main",
        "command": ["sh", "-c", "cp /var/run/secrets/tokens/sts/token /data/out/token"],
        "volumeMounts": [
            {"name": "sts", "mountPath": "/var/run/secrets/tokens/sts", "readOnly": True},
            {"name": "out", "mountPath": "/data/out"},
        ],
    }
    volumes = [
        {
            "name": "sts",
            "projected": {
                "sources": [
                    {
                        "serviceAccountToken": {
                            "audience": "sts.amazonaws.com",
                            "expirationSeconds": 86400,
                            "path": "token",
                        }
                    }
                ]
            },
        },
        {"name": "out", "persistentVolumeClaim": {"claimName": "out"}},
    ]
    batch.create_namespaced_job(NAMESPACE, job("tokens", container, pod={"volumes": volumes}))
    done = wait_for(batch.list_namespaced_job, "tokens", lambda j: job_condition(j) is not None)
    assert job_condition(done) == "Complete"
    token = (kubelet.pvc_dir(NAMESPACE, "out") / "token").read_text()
    claims = verify(
        token, fetch_jwks(kubeapi.url, context(kubeapi)), kubeapi.url, "sts.amazonaws.com"
    )
    assert claims["kubernetes.io"]["pod"]["name"].startswith("tokens-")
    assert claims["exp"] - claims["iat"] == 86400
