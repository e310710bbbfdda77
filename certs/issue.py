"""Issue a private CA and the webhook's serving certificate, and renew them.

Everything here is pure: no files, no network. Keys are fresh random keys, times come from `now`.
The API server only needs the CA (the webhook configurations' caBundle) to trust the service, so
renewal keeps the CA and re-signs a new serving certificate; only a CA close to its own expiry is
replaced, and then the old CA stays in the bundle until it expires so that certificates it signed,
still served by other replicas, remain trusted.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from certs.defaults import DEFAULT_CA_VALIDITY, DEFAULT_SERVING_VALIDITY, KeyType
from certs.pem import (
    CertificateError,
    PrivateKey,
    encode_certificate,
    encode_private_key,
    load_certificate,
    load_certificates,
    load_private_key,
)

DEFAULT_RENEW_FRACTION = 2 / 3
# Certificates start a little in the past so a node whose clock lags still accepts them.
CLOCK_SKEW_BACKDATE = timedelta(minutes=5)
CA_COMMON_NAME = "gpu-admission-ca"


def generate_key(key_type: KeyType) -> PrivateKey:
    if key_type is KeyType.ECDSA_P256:
        return ec.generate_private_key(ec.SECP256R1())
    size = {KeyType.RSA_2048: 2048, KeyType.RSA_3072: 3072}[key_type]
    return rsa.generate_private_key(public_exponent=65537, key_size=size)


def api_server_host(service: str, namespace: str) -> str:
    """The name the API server checks in the certificate of a webhook it calls through a Service
    (k8s.io/apiserver/pkg/util/webhook/client.go: `serverName := name + "." + namespace +
    ".svc"`)."""
    return f"{service}.{namespace}.svc"


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names in-cluster clients may use for `<service>.<namespace>`, shortest first."""
    host = api_server_host(service, namespace)
    return [service, f"{service}.{namespace}", host, f"{host}.cluster.local"]


@dataclass(frozen=True)
class ServingSpec:
    """What the serving certificate must say, and how long certificates live."""

    service: str
    namespace: str
    dns: Sequence[str] = ()
    ips: Sequence[str] = ()
    key_type: KeyType = KeyType.ECDSA_P256
    validity: timedelta = DEFAULT_SERVING_VALIDITY
    ca_validity: timedelta = DEFAULT_CA_VALIDITY

    def __post_init__(self) -> None:
        if not self.service or not self.namespace:
            raise ValueError("a serving certificate needs both a service name and a namespace")
        for ip in self.ips:
            try:
                ipaddress.ip_address(ip)
            except ValueError as exc:
                raise ValueError(f"{ip!r} is not an IP address; pass names with --dns") from exc
        if self.validity <= CLOCK_SKEW_BACKDATE or self.ca_validity <= CLOCK_SKEW_BACKDATE:
            raise ValueError("certificate validity must be longer than a few minutes")

    @property
    def dns_names(self) -> list[str]:
        names = service_dns_names(self.service, self.namespace)
        return names + [name for name in self.dns if name not in names]


@dataclass(frozen=True)
class CertBundle:
    """A serving certificate, its key, and the CA that signed it (PEM bytes).

    `retired_ca_pem` holds CA certificates replaced by `ca_cert_pem` that have not expired yet;
    they stay in `ca_bundle_pem` (what the API server trusts) during the overlap. `ca_key_pem` is
    empty when the certificates are managed elsewhere (a mounted cert-manager Secret).
    """

    ca_cert_pem: bytes
    ca_key_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    retired_ca_pem: bytes = field(default=b"")

    @cached_property
    def certificate(self) -> x509.Certificate:
        return load_certificate(self.cert_pem, "serving certificate")

    @cached_property
    def ca_certificate(self) -> x509.Certificate:
        return load_certificate(self.ca_cert_pem, "CA certificate")

    @property
    def ca_bundle_pem(self) -> bytes:
        """Every CA the API server should trust right now: the signing CA first."""
        return self.ca_cert_pem + self.retired_ca_pem

    @property
    def not_before(self) -> datetime:
        return self.certificate.not_valid_before_utc

    @property
    def not_after(self) -> datetime:
        return self.certificate.not_valid_after_utc

    @property
    def serial(self) -> int:
        return self.certificate.serial_number

    @property
    def has_ca_key(self) -> bool:
        return bool(self.ca_key_pem)

    def renew_at(self, fraction: float = DEFAULT_RENEW_FRACTION) -> datetime:
        """When the serving certificate should be replaced: `fraction` of the way through it."""
        return _point_in_lifetime(self.certificate, fraction)

    def ca_renew_at(self, fraction: float = DEFAULT_RENEW_FRACTION) -> datetime:
        return _point_in_lifetime(self.ca_certificate, fraction)


def _point_in_lifetime(cert: x509.Certificate, fraction: float) -> datetime:
    if not 0 < fraction < 1:
        raise ValueError(f"renew fraction must be between 0 and 1, not {fraction}")
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return start + (end - start) * fraction


def _now(now: datetime | None) -> datetime:
    return datetime.now(UTC) if now is None else now.astimezone(UTC)


def issue_ca(
    key_type: KeyType = KeyType.ECDSA_P256,
    validity: timedelta = DEFAULT_CA_VALIDITY,
    now: datetime | None = None,
    common_name: str = CA_COMMON_NAME,
) -> tuple[bytes, bytes]:
    """A self-signed CA that may sign end-entity certificates only. Returns (cert, key) PEM."""
    start = _now(now) - CLOCK_SKEW_BACKDATE
    key = generate_key(key_type)
    # A timestamp in the name tells a new CA from the one it replaces in a bundle.
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, f"{common_name}@{int(start.timestamp())}"),
        ]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    return encode_certificate(cert), encode_private_key(key)


def issue_serving(
    ca_cert_pem: bytes, ca_key_pem: bytes, spec: ServingSpec, now: datetime | None = None
) -> tuple[bytes, bytes]:
    """A serving certificate for `spec`, signed by the CA. Returns (cert, key) PEM.

    It never outlives its CA: a certificate valid past its issuer's expiry fails verification
    at that point anyway, and the renewal schedule must see the real end.
    """
    ca_cert = load_certificate(ca_cert_pem, "CA certificate")
    ca_key = load_private_key(ca_key_pem, "CA key")
    start = _now(now) - CLOCK_SKEW_BACKDATE
    end = min(start + spec.validity, ca_cert.not_valid_after_utc)
    if end <= _now(now):
        raise CertificateError(
            f"the CA expired at {ca_cert.not_valid_after_utc.isoformat()}; issue a new CA"
        )
    key = generate_key(spec.key_type)
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in spec.dns_names]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in spec.ips]
    is_rsa = isinstance(key, rsa.RSAPrivateKey)
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, spec.dns_names[2])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                # RSA key exchange (TLS 1.2 without ECDHE) encrypts to the key; ECDSA cannot.
                key_encipherment=is_rsa,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return encode_certificate(cert), encode_private_key(key)


def issue_bundle(spec: ServingSpec, now: datetime | None = None) -> CertBundle:
    """A new CA and a serving certificate signed by it."""
    ca_cert_pem, ca_key_pem = issue_ca(spec.key_type, spec.ca_validity, now)
    cert_pem, key_pem = issue_serving(ca_cert_pem, ca_key_pem, spec, now)
    return CertBundle(ca_cert_pem, ca_key_pem, cert_pem, key_pem)


def ca_needs_replacing(
    bundle: CertBundle,
    spec: ServingSpec,
    fraction: float = DEFAULT_RENEW_FRACTION,
    now: datetime | None = None,
) -> bool:
    """The CA is past its own renewal point, or too close to expiry for a full-length leaf."""
    current = _now(now)
    ca = bundle.ca_certificate
    return current >= bundle.ca_renew_at(fraction) or (
        ca.not_valid_after_utc - current < spec.validity
    )


def _still_valid(pem: bytes, now: datetime) -> bytes:
    if not pem:
        return b""
    kept = [c for c in load_certificates(pem, "retired CA") if c.not_valid_after_utc > now]
    return b"".join(encode_certificate(c) for c in kept)


def renew_bundle(
    bundle: CertBundle,
    spec: ServingSpec,
    fraction: float = DEFAULT_RENEW_FRACTION,
    now: datetime | None = None,
) -> CertBundle:
    """A new serving certificate; the CA is kept unless `ca_needs_replacing`.

    A replaced CA moves to `retired_ca_pem`; retired CAs leave the bundle once expired.
    """
    if not bundle.has_ca_key:
        raise CertificateError(
            "cannot renew: the CA key is not available here (the certificates are managed "
            "elsewhere, so renew them there, or give this service a place that holds ca.key)"
        )
    current = _now(now)
    retired = _still_valid(bundle.retired_ca_pem, current)
    ca_cert_pem, ca_key_pem = bundle.ca_cert_pem, bundle.ca_key_pem
    if ca_needs_replacing(bundle, spec, fraction, current):
        retired = _still_valid(bundle.ca_cert_pem, current) + retired
        ca_cert_pem, ca_key_pem = issue_ca(spec.key_type, spec.ca_validity, current)
    cert_pem, key_pem = issue_serving(ca_cert_pem, ca_key_pem, spec, current)
    return CertBundle(ca_cert_pem, ca_key_pem, cert_pem, key_pem, retired)
