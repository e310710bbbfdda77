"""Azurite, Microsoft's Azure Storage emulator (the npm package, its Blob service), on 127.0.0.1
(or the pod network's address, for loaders on the real node) for loader tests: real Shared Key
and SAS authentication, real Blob REST answers and errors.

Found at `$GPU_ADMISSION_AZURITE`, else in the project's `.venv/node` (where `make test` installs
it with npm), else on PATH. The account is declared with AZURITE_ACCOUNTS, so its key and SAS
signatures are checked as Azure checks them. Blobs are put and SAS tokens signed with Microsoft's
own `azure-storage-blob`.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from azure.storage.blob import BlobServiceClient, ContainerSasPermissions, generate_container_sas

from certs.issue import ServingSpec, issue_bundle
from tests.support.ports import free_port

ACCOUNT = "mlmodels01"
KEY = base64.b64encode(hashlib.sha512(b"azurite test account").digest()).decode()
PROJECT = Path(__file__).resolve().parents[3]
LOCAL_INSTALL = PROJECT / ".venv" / "node" / "node_modules" / ".bin" / "azurite-blob"


class AzuriteMissing(RuntimeError):
    pass


def azurite_path() -> str:
    """The azurite-blob executable; AzuriteMissing says how to install it."""
    for candidate in (os.environ.get("GPU_ADMISSION_AZURITE"), str(LOCAL_INSTALL)):
        if candidate and Path(candidate).exists():
            return candidate
    found = shutil.which("azurite-blob")
    if found:
        return found
    raise AzuriteMissing(
        "azurite-blob not found: `make test` installs it with npm into .venv/node "
        "(or set GPU_ADMISSION_AZURITE)"
    )


class Azurite:
    """`oauth`: HTTPS with a private CA (`ca_path`) and bearer tokens accepted as Azure Storage
    accepts Entra ID's (Azurite's `--oauth basic`: issuer, audience and lifetime checked)."""

    def __init__(self, oauth: bool = False, host: str = "127.0.0.1") -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="azurite-")
        self.port = free_port(host)
        scheme = "https" if oauth else "http"
        self.endpoint = f"{scheme}://{host}:{self.port}/{ACCOUNT}"
        self.ca_path: Path | None = None
        extra: list[str] = []
        if oauth:
            bundle = issue_bundle(ServingSpec("azurite", "test", ips=[host]))
            folder = Path(self._dir.name)
            (folder / "cert.pem").write_bytes(bundle.cert_pem)
            (folder / "key.pem").write_bytes(bundle.key_pem)
            self.ca_path = folder / "ca.pem"
            self.ca_path.write_bytes(bundle.ca_cert_pem)
            extra = ["--cert", str(folder / "cert.pem"), "--key", str(folder / "key.pem")]
            extra += ["--oauth", "basic"]
        log = open(Path(self._dir.name) / "azurite.log", "wb")  # noqa: SIM115 (lives with it)
        self._log = log
        self._process = subprocess.Popen(
            [
                azurite_path(),
                "--blobHost",
                host,
                "--blobPort",
                str(self.port),
                "--location",
                self._dir.name,
                "--skipApiVersionCheck",  # rclone's SDK may be newer than the emulator
                "--disableProductStyleUrl",
                *extra,
            ],
            env={**os.environ, "AZURITE_ACCOUNTS": f"{ACCOUNT}:{KEY}"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self._wait_listening()
        self.client = BlobServiceClient(
            account_url=self.endpoint,
            credential={"account_name": ACCOUNT, "account_key": KEY},
            connection_verify=str(self.ca_path) if self.ca_path else True,
        )

    def _wait_listening(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        path = Path(self._dir.name) / "azurite.log"
        while b"successfully listens" not in path.read_bytes():
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Azurite did not start: {path.read_text(errors='replace')}")
            time.sleep(0.05)

    def put(self, container: str, files: Mapping[str, bytes], prefix: str = "") -> None:
        client = self.client.get_container_client(container)
        if not client.exists():
            client.create_container()
        for name, data in files.items():
            client.upload_blob(f"{prefix}{name}", data, overwrite=True)

    def sas_token(self, container: str, key: str = KEY) -> str:
        """A read-and-list SAS token for the container, signed with `key`."""
        return generate_container_sas(
            ACCOUNT,
            container,
            account_key=key,
            permission=ContainerSasPermissions(read=True, list=True),
            expiry=datetime.now(UTC) + timedelta(hours=1),
        )

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
        self._log.close()
        self._dir.cleanup()


@contextmanager
def azurite(oauth: bool = False) -> Iterator[Azurite]:
    store = Azurite(oauth)
    try:
        yield store
    finally:
        store.stop()


@contextmanager
def azurite_or_skip(oauth: bool = False) -> Iterator[Azurite]:
    """Azurite for a test: skipped where it is not installed, except under CI, where its
    absence is a failure (CI installs it; a skipped Azure test must never read as a pass)."""
    try:
        store = Azurite(oauth)
    except AzuriteMissing as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(exc))
    try:
        yield store
    finally:
        store.stop()
