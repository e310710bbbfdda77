"""Keep a CertBundle in a directory or in a kubernetes.io/tls Secret.

Both use the Secret key names: tls.crt, tls.key (what cert-manager and `kubectl create secret tls`
write), plus ca.crt (every trusted CA, the signing one first) and ca.key. A directory may be a
mounted Secret, so the same layout works for both. Loading checks that each key belongs to its
certificate, so a half-written or mixed-up pair is refused with the file named instead of being
served.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from kubernetes.client import CoreV1Api, V1ObjectMeta, V1Secret
from kubernetes.client.exceptions import ApiException

from certs.issue import CertBundle
from certs.pem import CertificateError, check_key_matches, encode_certificate, load_certificates

log = logging.getLogger(__name__)

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"
ALL_KEYS = (CA_CERT, CA_KEY, TLS_CERT, TLS_KEY)
PRIVATE_KEYS = (CA_KEY, TLS_KEY)
TLS_SECRET_TYPE = "kubernetes.io/tls"


class CertStore(Protocol):
    def load(self) -> CertBundle | None:
        """The stored bundle, None when nothing is stored yet."""

    def save(self, bundle: CertBundle) -> CertBundle:
        """Store `bundle`; returns what is stored afterwards (another writer's, if it won)."""


def bundle_to_items(bundle: CertBundle) -> dict[str, bytes]:
    items = {
        CA_CERT: bundle.ca_bundle_pem,
        CA_KEY: bundle.ca_key_pem,
        TLS_CERT: bundle.cert_pem,
        TLS_KEY: bundle.key_pem,
    }
    return {name: value for name, value in items.items() if value}


def bundle_from_items(
    items: Mapping[str, bytes], describe: Callable[[str], str]
) -> CertBundle | None:
    """Build and check a bundle from stored items; `describe(key)` names an item in errors.

    tls.crt and tls.key are required together; ca.crt is optional (a plain TLS Secret) and ca.key
    needs ca.crt. None when neither tls item exists.
    """
    if TLS_CERT not in items and TLS_KEY not in items:
        if CA_KEY in items or CA_CERT in items:
            raise CertificateError(
                f"{describe(CA_CERT)} exists but {describe(TLS_CERT)} and {describe(TLS_KEY)} "
                "do not; restore them or remove the CA files to issue everything anew"
            )
        return None
    for required in (TLS_CERT, TLS_KEY):
        if not items.get(required):
            other = TLS_KEY if required == TLS_CERT else TLS_CERT
            raise CertificateError(
                f"{describe(required)} is missing or empty while {describe(other)} exists; "
                "store both halves of the pair"
            )
    check_key_matches(items[TLS_CERT], items[TLS_KEY], describe(TLS_CERT), describe(TLS_KEY))
    ca_certs = load_certificates(items[CA_CERT], describe(CA_CERT)) if items.get(CA_CERT) else []
    if items.get(CA_KEY):
        if not ca_certs:
            raise CertificateError(
                f"{describe(CA_KEY)} exists without {describe(CA_CERT)}; store the CA certificate"
            )
        check_key_matches(items[CA_CERT], items[CA_KEY], describe(CA_CERT), describe(CA_KEY))
    return CertBundle(
        ca_cert_pem=encode_certificate(ca_certs[0]) if ca_certs else b"",
        ca_key_pem=items.get(CA_KEY, b""),
        cert_pem=items[TLS_CERT],
        key_pem=items[TLS_KEY],
        retired_ca_pem=b"".join(encode_certificate(c) for c in ca_certs[1:]),
    )


def content_fingerprint(items: Mapping[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name in sorted(items):
        digest.update(name.encode() + b"\0" + items[name] + b"\0")
    return digest.hexdigest()


class FileStore:
    """A directory holding ca.crt, ca.key, tls.crt, tls.key; keys are readable by the owner only."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def _describe(self, name: str) -> str:
        return str(self.directory / name)

    def read_items(self) -> dict[str, bytes]:
        items: dict[str, bytes] = {}
        for name in ALL_KEYS:
            try:
                items[name] = (self.directory / name).read_bytes()
            except FileNotFoundError:
                continue
            except OSError as exc:
                message = f"cannot read {self._describe(name)}: {exc.strerror}"
                raise CertificateError(message) from exc
        return items

    def fingerprint(self) -> str:
        """Changes whenever any file's content changes (a mounted Secret's symlink swap too)."""
        return content_fingerprint(self.read_items())

    def load(self) -> CertBundle | None:
        return bundle_from_items(self.read_items(), self._describe)

    def save(self, bundle: CertBundle) -> CertBundle:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        items = bundle_to_items(bundle)
        # Keys first: a reader that sees the new tls.crt then finds its key already in place.
        for name in sorted(items, key=lambda n: n not in PRIVATE_KEYS):
            _write_atomically(self.directory / name, items[name], private=name in PRIVATE_KEYS)
        return bundle


def _write_atomically(path: Path, data: bytes, private: bool) -> None:
    """Write to a temp file in the same directory, then rename: readers see old or new, whole."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, 0o600 if private else 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _resource_version(secret: V1Secret) -> str | None:
    return secret.metadata.resource_version if secret.metadata else None


class SecretStore:
    """A kubernetes.io/tls Secret shared by every replica.

    Writes are guarded by resourceVersion. When two replicas write at once the API server takes
    the first; the other gets 409, re-reads, and adopts the stored certificate, so every replica
    serves one certificate that the published caBundle trusts.
    """

    def __init__(self, core: CoreV1Api, namespace: str, name: str) -> None:
        self.core = core
        self.namespace = namespace
        self.name = name
        self._resource_version: str | None = None

    def _describe(self, key: str) -> str:
        return f"Secret {self.namespace}/{self.name} key {key}"

    def read_items(self) -> dict[str, bytes] | None:
        """The Secret's decoded data, None if it does not exist. Remembers its resourceVersion."""
        try:
            secret = self.core.read_namespaced_secret(self.name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                self._resource_version = None
                return None
            raise
        self._resource_version = _resource_version(secret)
        return {key: base64.b64decode(value) for key, value in (secret.data or {}).items()}

    def fingerprint(self) -> str:
        return content_fingerprint(self.read_items() or {})

    def load(self) -> CertBundle | None:
        items = self.read_items()
        return None if items is None else bundle_from_items(items, self._describe)

    def _body(self, bundle: CertBundle, resource_version: str | None) -> V1Secret:
        data: dict[str, bytes | str] = {
            k: base64.b64encode(v).decode() for k, v in bundle_to_items(bundle).items()
        }
        return V1Secret(
            api_version="v1",
            kind="Secret",
            metadata=V1ObjectMeta(
                name=self.name,
                namespace=self.namespace,
                resource_version=resource_version,
                labels={"app.kubernetes.io/name": "gpu-admission"},
            ),
            type=TLS_SECRET_TYPE,
            data=data,
        )

    def save(self, bundle: CertBundle) -> CertBundle:
        if self._resource_version is None:
            return self._create(bundle)
        try:
            replaced = self.core.replace_namespaced_secret(
                self.name, self.namespace, self._body(bundle, self._resource_version)
            )
        except ApiException as exc:
            if exc.status == 404:  # deleted under us: nobody holds it, so write ours anew
                self._resource_version = None
                return self._create(bundle)
            if exc.status != 409:
                raise
            # Our resourceVersion is stale: another replica wrote first, and its write stands.
            return self._adopt_stored(bundle, exc.status)
        self._resource_version = _resource_version(replaced)
        return bundle

    def _create(self, bundle: CertBundle) -> CertBundle:
        try:
            created = self.core.create_namespaced_secret(self.namespace, self._body(bundle, None))
        except ApiException as exc:
            if exc.status != 409:
                raise
            return self._adopt_stored(bundle, exc.status)
        self._resource_version = _resource_version(created)
        return bundle

    def _adopt_stored(self, bundle: CertBundle, status: int) -> CertBundle:
        log.info(
            "Secret %s/%s was written concurrently (HTTP %s); adopting the stored certificate",
            self.namespace,
            self.name,
            status,
        )
        stored = self.load()
        if stored is None:  # deleted again right after the other write: ours is as good
            return self._create(bundle)
        return stored
