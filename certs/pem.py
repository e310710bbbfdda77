"""PEM parsing and key/certificate matching, shared by issuing, storing and reloading."""

from __future__ import annotations

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


class CertificateError(Exception):
    """Certificates or keys that cannot be used; the message names the file or Secret key."""


def load_certificates(pem: bytes, source: str) -> list[x509.Certificate]:
    """Every certificate in `pem`, in order; `source` names where it came from for errors."""
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise CertificateError(
            f"{source} holds no readable PEM certificate ({exc}); replace it with a PEM file "
            "that starts with '-----BEGIN CERTIFICATE-----'"
        ) from exc
    return certs


def load_certificate(pem: bytes, source: str) -> x509.Certificate:
    """The first certificate in `pem` (the leaf of a chain, or the signing CA of a bundle)."""
    return load_certificates(pem, source)[0]


def load_private_key(pem: bytes, source: str) -> PrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        # The exception text never carries key material, only the parser's complaint.
        raise CertificateError(
            f"{source} holds no readable unencrypted PEM private key ({exc}); replace it with "
            "the key the certificate was issued for"
        ) from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise CertificateError(
            f"{source} holds a {type(key).__name__}; only ECDSA and RSA keys are supported"
        )
    return key


def public_key_der(cert_or_key: x509.Certificate | PrivateKey) -> bytes:
    public = cert_or_key.public_key()
    return public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def check_key_matches(cert_pem: bytes, key_pem: bytes, cert_source: str, key_source: str) -> None:
    """Raise a CertificateError naming both sources when the key is not the certificate's."""
    cert = load_certificate(cert_pem, cert_source)
    key = load_private_key(key_pem, key_source)
    if public_key_der(cert) != public_key_der(key):
        raise CertificateError(
            f"{key_source} does not belong to the certificate in {cert_source} (their public "
            "keys differ); store the key and certificate from the same issue together"
        )


def encode_certificate(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def encode_private_key(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def dns_names(cert: x509.Certificate) -> list[str]:
    """The certificate's subjectAltName DNS names (none without the extension)."""
    try:
        extension = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return extension.value.get_values_for_type(x509.DNSName)


def names_host(cert: x509.Certificate, host: str) -> bool:
    """Whether a TLS client checking `host` accepts `cert`'s names: a DNS name equal to it, or a
    wildcard for its first label only (RFC 6125 as Go's crypto/x509 applies it); the common name
    counts for nothing (Go ignores it since 1.15)."""
    host = host.lower().rstrip(".")
    for name in (n.lower().rstrip(".") for n in dns_names(cert)):
        if name == host:
            return True
        if name.startswith("*.") and "." in host and host.split(".", 1)[1] == name[2:]:
            return True
    return False
