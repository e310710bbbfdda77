"""Certificates and kubeconfig for the emulator: a small CA, a server cert and an admin client cert.

The key material is made once per process (EC P-256 keys are fast to make) and cached in a temp dir,
so starting many emulators in one test session costs only the kubeconfig write.
"""

from __future__ import annotations

import atexit
import datetime as dt
import ipaddress
import shutil
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ADMIN_USER = "admin"
ADMIN_GROUPS = ("system:masters",)


@dataclass(frozen=True)
class TlsMaterial:
    directory: Path
    ca_path: Path
    server_cert_path: Path
    server_key_path: Path
    client_cert_path: Path
    client_key_path: Path

    def server_ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.server_cert_path, self.server_key_path)
        # Client certificates identify the user (like kube-apiserver's x509 authenticator);
        # a request without one is served as system:anonymous.
        context.verify_mode = ssl.CERT_OPTIONAL
        context.load_verify_locations(self.ca_path)
        return context


_cached: TlsMaterial | None = None


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    sans: list[x509.GeneralName] | None = None,
    usage: list[x509.ObjectIdentifier] | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
    else:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False),
            critical=True,
        )
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def tls_material() -> TlsMaterial:
    """The process-wide CA, server and client certificates (made on first use)."""
    global _cached
    if _cached is not None:
        return _cached
    directory = Path(tempfile.mkdtemp(prefix="kubeapi-tls-"))
    atexit.register(shutil.rmtree, directory, True)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubeapi-emulator-ca")])
    ca_cert = _issue(ca_name, ca_key, ca_name, ca_key, ca=True)

    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _issue(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
        server_key,
        ca_name,
        ca_key,
        ca=False,
        sans=[
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes.default.svc"),
        ],
        usage=[ExtendedKeyUsageOID.SERVER_AUTH],
    )

    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = _issue(
        x509.Name(
            [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in ADMIN_GROUPS]
            + [x509.NameAttribute(NameOID.COMMON_NAME, ADMIN_USER)]
        ),
        client_key,
        ca_name,
        ca_key,
        ca=False,
        usage=[ExtendedKeyUsageOID.CLIENT_AUTH],
    )

    def write(name: str, data: bytes) -> Path:
        path = directory / name
        path.write_bytes(data)
        return path

    pem = serialization.Encoding.PEM
    _cached = TlsMaterial(
        directory=directory,
        ca_path=write("ca.crt", ca_cert.public_bytes(pem)),
        server_cert_path=write("server.crt", server_cert.public_bytes(pem)),
        server_key_path=write("server.key", _pem_key(server_key)),
        client_cert_path=write("admin.crt", client_cert.public_bytes(pem)),
        client_key_path=write("admin.key", _pem_key(client_key)),
    )
    return _cached


def write_kubeconfig(
    path: Path, url: str, material: TlsMaterial, namespace: str = "default"
) -> Path:
    """A kubeconfig for ``admin`` (group system:masters) against ``url``, as kubeadm writes it."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "emulator",
                "cluster": {"server": url, "certificate-authority": str(material.ca_path)},
            }
        ],
        "users": [
            {
                "name": ADMIN_USER,
                "user": {
                    "client-certificate": str(material.client_cert_path),
                    "client-key": str(material.client_key_path),
                },
            }
        ],
        "contexts": [
            {
                "name": "emulator",
                "context": {"cluster": "emulator", "user": ADMIN_USER, "namespace": namespace},
            }
        ],
        "current-context": "emulator",
        "preferences": {},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def user_from_peer_cert(peercert: dict | None) -> dict:
    """userInfo from a verified client certificate: CN is the user, O entries are groups."""
    if not peercert:
        return {"username": "system:anonymous", "groups": ["system:unauthenticated"]}
    username = ""
    groups: list[str] = []
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                username = value
            elif key == "organizationName":
                groups.append(value)
    return {"username": username, "groups": [*groups, "system:authenticated"]}
