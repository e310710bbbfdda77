"""Keyless AWS on a real node, through the installed product: a loader Job reads a private moto
bucket with nothing but its pod's projected ServiceAccount token (projected by the real kubelet,
issued by the real kube-apiserver), exchanged at STS (moto, behind a gate on the pod network that
verifies the token against the server's OIDC discovery and published keys, and the role's
trust); a role that does not trust the ServiceAccount fails the load, once, saying so; and no
token ever shows in what people read, the controller's log included."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator

import pytest

from tests.install.cluster import InstallCluster
from tests.install.journeys import (
    NS,
    PREFIX,
    credential_secret,
    dataset_pvc,
    jobs_of,
    load_finished,
    loading_message,
    volume_of,
)
from tests.install.researcher.conftest import Stores
from tests.world.node import network
from tests.world.real_cluster import publicly_discoverable
from tests.world.stand_ins.objectstores import S3Store, dataset_files, tree
from tests.world.stand_ins.sts_gate import StsGate

FILES = dataset_files(files=25, large_bytes=0)
JWT = re.compile(r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.")
SUBJECT = f"system:serviceaccount:{NS}:default"
PHASE = f"{PREFIX}data-load-phase"


@pytest.fixture(scope="module")
def keyless(installed: InstallCluster, stores: Stores) -> Iterator[tuple[S3Store, str, str]]:
    """A private bucket, a role that may read it and one that does not trust the loaders, the
    gate signing on with an IAM user's keys, and OIDC discovery readable as a cloud reads it."""
    store = S3Store(host=network.HOST)
    try:
        store.put("private-keyless", FILES)
        iam = store.iam()
        trust = {"Version": "2012-10-17", "Statement": []}
        read = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        }
        roles = []
        suffix = uuid.uuid4().hex[:8]  # moto keeps one IAM backend per process
        for name in (f"dataset-reader-{suffix}", f"other-team-{suffix}"):
            arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))
            iam.put_role_policy(RoleName=name, PolicyName="read", PolicyDocument=json.dumps(read))
            roles.append(arn["Role"]["Arn"])
        gate_keys = store.valid_keys("*")  # the gate signs its calls on to moto's STS
        gate = stores.sts
        gate.moto, gate.keys = store.endpoint, gate_keys
        gate.trust = {roles[0]: SUBJECT}
        store.require_authentication()
        with publicly_discoverable(installed.api):
            yield store, roles[0], roles[1]
    finally:
        store.stop()  # and moto's authentication back as it was


def keyless_secret(cluster: InstallCluster, name: str, role: str, endpoint: str) -> None:
    keys = {"AWS_ROLE_ARN": role, "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}
    credential_secret(cluster, name, "aws-credential", keys)


def what_people_read(cluster: InstallCluster, claim: str) -> list[str]:
    """The PVC, its Events, its Jobs, and the controller's log."""
    return [
        cluster.kubectl("-n", NS, "get", "pvc", claim, "-o", "json").stdout,
        cluster.kubectl("-n", NS, "get", "events", "-o", "json").stdout,
        json.dumps([cluster.api.sanitize_for_serialization(j) for j in jobs_of(cluster, claim)]),
        cluster.kubectl(
            "-n", "gpu-admission", "logs", "deployment/gpu-admission-controller"
        ).stdout,
    ]


def no_tokens(texts: list[str]) -> None:
    for text in texts:
        assert not JWT.search(text), "a token leaked"


def test_a_loader_reads_a_private_bucket_with_only_its_projected_token(
    installed: InstallCluster, stores: Stores, keyless: tuple[S3Store, str, str]
) -> None:
    store, reader, _ = keyless
    gate: StsGate = stores.sts
    keyless_secret(installed, "s3-role", reader, store.endpoint)
    installed.apply([dataset_pvc("keyless", "s3://private-keyless", "s3-role")])
    loaded = load_finished(installed, "keyless")
    assert loaded[PHASE] == "Succeeded", loading_message(installed, "keyless")
    assert tree(volume_of(installed, "keyless")) == FILES
    # The token reached STS, verified, for the right audience and ServiceAccount: once for the
    # size check's listing and once for the copy (each an rclone process of its own).
    assumed = {"role": reader, "sub": SUBJECT, "aud": ["sts.amazonaws.com"], "outcome": "assumed"}
    assert [e for e in gate.exchanges if e["role"] == reader] == [assumed, assumed]
    [job] = jobs_of(installed, "keyless")
    assert job.spec.template.spec.automount_service_account_token is False
    no_tokens(what_people_read(installed, "keyless"))


def test_a_role_that_does_not_trust_the_service_account_fails_once_saying_so(
    installed: InstallCluster, stores: Stores, keyless: tuple[S3Store, str, str]
) -> None:
    store, _, other = keyless
    keyless_secret(installed, "s3-other", other, store.endpoint)
    installed.apply([dataset_pvc("untrusted", "s3://private-keyless", "s3-other")])
    failed = load_finished(installed, "untrusted")
    assert failed[PHASE] == "Failed", failed
    message = loading_message(installed, "untrusted")
    assert "could not assume the role" in message, message
    assert "trust policy" in message and SUBJECT in message
    assert "not retried" in message  # permanent: one attempt
    # One loader pod (rclone itself tries a failing call up to --retries 3 times).
    assert {e["outcome"] for e in stores.sts.exchanges if e["role"] == other} == {"not trusted"}
    [job] = jobs_of(installed, "untrusted")
    assert job.status.failed == 1
    no_tokens(what_people_read(installed, "untrusted"))
