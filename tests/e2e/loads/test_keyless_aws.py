"""Keyless AWS end to end, on the real control plane: a loader Job reads a private moto bucket
with nothing but its pod's projected ServiceAccount token (issued by the real kube-apiserver
through TokenRequest), exchanged at STS (moto, behind a gate that verifies the token against the
server's OIDC discovery and published keys, and the role's trust); a role that does not trust
the ServiceAccount fails the load, once, saying so; and no token ever shows in what people
read."""

from __future__ import annotations

import base64
import json
import logging
import re
import ssl
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from kubernetes import client

from controllers.dataset import DatasetController
from tests.e2e.datasets import (
    NS,
    create_pvc,
    events_for,
    jobs,
    make_config,
    start,
    wait_phase,
)
from tests.world.control_plane import ControlPlane
from tests.world.stand_ins.objectstores import (
    REGION,
    SETUP_KEYS,
    S3Store,
    dataset_files,
    s3_store,
    tree,
)
from tests.world.stand_ins.sts_gate import StsGate

FILES = dataset_files(files=25, large_bytes=0)
JWT = re.compile(r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.")
SUBJECT = f"system:serviceaccount:{NS}:default"
PRODUCT = ("controllers", "gpu_admission", "webhooks", "commands", "certs")


@pytest.fixture
def private_store() -> Iterator[tuple[S3Store, str, str, tuple[str, str]]]:
    """A private bucket, a role that may read it, an untrusted one, and keys for the gate."""
    with s3_store() as store:
        store.put("private-keyless", FILES)
        iam = boto3.client(
            "iam",
            endpoint_url=store.endpoint,
            aws_access_key_id=SETUP_KEYS[0],
            aws_secret_access_key=SETUP_KEYS[1],
            region_name=REGION,
        )
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
        iam.create_user(UserName=f"sts-gate-{suffix}")
        everything = {**read, "Statement": [{**read["Statement"][0], "Action": "*"}]}
        iam.put_user_policy(
            UserName=f"sts-gate-{suffix}", PolicyName="all", PolicyDocument=json.dumps(everything)
        )
        key = iam.create_access_key(UserName=f"sts-gate-{suffix}")["AccessKey"]
        store.require_authentication()
        yield store, roles[0], roles[1], (key["AccessKeyId"], key["SecretAccessKey"])


@pytest.fixture
def gate(
    real_cluster: ControlPlane,
    public_discovery: None,
    private_store: tuple[S3Store, str, str, tuple[str, str]],
) -> Iterator[StsGate]:
    store, reader, _, keys = private_store
    context = ssl.create_default_context(cafile=str(real_cluster.ca_path))
    started = StsGate(store.endpoint, real_cluster.url, context, keys, trust={reader: SUBJECT})
    yield started
    started.stop()


def keyless_secret(core: client.CoreV1Api, name: str, role: str, endpoint: str) -> None:
    data = {"AWS_ROLE_ARN": role, "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}
    core.create_namespaced_secret(
        NS,
        {
            "metadata": {"name": name},
            "type": "aws-credential",
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        },
    )


def keyless_config(store: S3Store, gate: StsGate) -> Any:
    config = make_config(store.endpoint)
    env = {**config.dataset.loader_env, "AWS_ENDPOINT_URL_STS": gate.endpoint}
    return config.model_copy(
        update={"dataset": config.dataset.model_copy(update={"loader_env": env})}
    )


def no_tokens(*texts: str) -> None:
    for text in texts:
        assert not JWT.search(text), "a token leaked"


async def test_a_loader_reads_a_private_bucket_with_only_its_projected_token(
    kube_client: client.ApiClient,
    core: client.CoreV1Api,
    kubelet: Any,
    private_store: tuple[S3Store, str, str, tuple[str, str]],
    gate: StsGate,
    controllers: list[DatasetController],
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, reader, _, _ = private_store
    caplog.set_level(logging.DEBUG)
    keyless_secret(core, "s3-role", reader, store.endpoint)
    await start(controllers, kube_client, keyless_config(store, gate))
    create_pvc(core, "keyless", "s3://private-keyless", credentials="s3-role")
    pvc = await wait_phase(core, "keyless", "Succeeded")
    assert tree(kubelet.pvc_dir(NS, "keyless")) == FILES
    # The token reached STS, verified, for the right audience and ServiceAccount: once for the
    # size check's listing and once for the copy (each an rclone process of its own).
    assumed = {"role": reader, "sub": SUBJECT, "aud": ["sts.amazonaws.com"], "outcome": "assumed"}
    assert gate.exchanges == [assumed, assumed]
    [job] = jobs(kube_client)
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec["automountServiceAccountToken"] is False
    no_tokens(
        json.dumps(pvc),
        json.dumps(events_for(core, "keyless")),
        json.dumps(job),
        # What the product logged (the test kubelet's own client logs the TokenRequest it made).
        *(r.getMessage() for r in caplog.records if r.name.split(".")[0] in PRODUCT),
    )


async def test_a_role_that_does_not_trust_the_service_account_fails_once_saying_so(
    kube_client: client.ApiClient,
    core: client.CoreV1Api,
    kubelet: Any,
    private_store: tuple[S3Store, str, str, tuple[str, str]],
    gate: StsGate,
    controllers: list[DatasetController],
) -> None:
    store, _, other, _ = private_store
    keyless_secret(core, "s3-other", other, store.endpoint)
    await start(controllers, kube_client, keyless_config(store, gate))
    create_pvc(core, "untrusted", "s3://private-keyless", credentials="s3-other")
    pvc = await wait_phase(core, "untrusted", "Failed")
    message = pvc["status"]["conditions"][0]["message"]
    assert "could not assume the role" in message, message
    assert "trust policy" in message and SUBJECT in message
    assert "not retried" in message  # permanent: one attempt
    # One loader pod (rclone itself tries a failing call up to --retries 3 times).
    assert {e["outcome"] for e in gate.exchanges} == {"not trusted"}
    [job] = jobs(kube_client)
    assert job["status"]["failed"] == 1
    no_tokens(json.dumps(pvc), json.dumps(events_for(core, "untrusted")))
