"""Issuing and renewing the CA and serving certificate."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import (
    DNSName,
    IPAddress,
    PolicyBuilder,
    Store,
    VerificationError,
)

from certs.issue import (
    CLOCK_SKEW_BACKDATE,
    DEFAULT_CA_VALIDITY,
    DEFAULT_SERVING_VALIDITY,
    CertBundle,
    KeyType,
    ServingSpec,
    ca_needs_replacing,
    issue_bundle,
    renew_bundle,
)
from certs.pem import CertificateError

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SPEC = ServingSpec(
    service="gpu-admission",
    namespace="gpu-system",
    dns=("webhook.example.com",),
    ips=("10.0.0.7", "fd00::7"),
)


@pytest.fixture(scope="module")
def bundle() -> CertBundle:
    return issue_bundle(SPEC, NOW)


def verify(bundle: CertBundle, subject: x509.verification.Subject, at: datetime) -> None:
    """Verify the serving certificate as a TLS client would, trusting the bundle's CAs."""
    store = Store(x509.load_pem_x509_certificates(bundle.ca_bundle_pem))
    verifier = PolicyBuilder().store(store).time(at).build_server_verifier(subject)
    verifier.verify(bundle.certificate, [])


def ext(cert: x509.Certificate, kind: type[x509.ExtensionType]) -> x509.Extension:
    return cert.extensions.get_extension_for_class(kind)


def test_serving_certificate_names_the_service_every_way_plus_extras(bundle: CertBundle) -> None:
    san = ext(bundle.certificate, x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "gpu-admission",
        "gpu-admission.gpu-system",
        "gpu-admission.gpu-system.svc",
        "gpu-admission.gpu-system.svc.cluster.local",
        "webhook.example.com",
    ]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.0.0.7"),
        ipaddress.ip_address("fd00::7"),
    ]


@pytest.mark.parametrize(
    "subject",
    [
        DNSName("gpu-admission.gpu-system.svc"),
        DNSName("gpu-admission.gpu-system.svc.cluster.local"),
        DNSName("webhook.example.com"),
        IPAddress(ipaddress.ip_address("10.0.0.7")),
        IPAddress(ipaddress.ip_address("fd00::7")),
    ],
)
def test_chain_verifies_for_every_name(bundle: CertBundle, subject) -> None:
    verify(bundle, subject, NOW)


def test_chain_does_not_verify_for_other_names_or_other_cas(bundle: CertBundle) -> None:
    with pytest.raises(VerificationError):
        verify(bundle, DNSName("other.gpu-system.svc"), NOW)
    stranger = issue_bundle(SPEC, NOW)
    mixed = CertBundle(stranger.ca_cert_pem, b"", bundle.cert_pem, bundle.key_pem)
    with pytest.raises(VerificationError):
        verify(mixed, DNSName("gpu-admission.gpu-system.svc"), NOW)


def test_default_key_type_is_ecdsa_p256_without_key_encipherment(bundle: CertBundle) -> None:
    public = bundle.certificate.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert public.curve.name == "secp256r1"
    usage = ext(bundle.certificate, x509.KeyUsage)
    assert usage.critical and usage.value.digital_signature
    assert not usage.value.key_encipherment


@pytest.mark.parametrize(("key_type", "bits"), [(KeyType.RSA_2048, 2048), (KeyType.RSA_3072, 3072)])
def test_rsa_key_types(key_type: KeyType, bits: int) -> None:
    spec = ServingSpec(service="svc", namespace="ns", key_type=key_type)
    issued = issue_bundle(spec, NOW)
    public = issued.certificate.public_key()
    assert isinstance(public, rsa.RSAPublicKey)
    assert public.key_size == bits
    usage = ext(issued.certificate, x509.KeyUsage).value
    assert usage.digital_signature and usage.key_encipherment
    verify(issued, DNSName("svc.ns.svc"), NOW)


def test_serving_certificate_is_a_server_leaf_linked_to_its_ca(bundle: CertBundle) -> None:
    cert, ca = bundle.certificate, bundle.ca_certificate
    assert ext(cert, x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.SERVER_AUTH]
    )
    constraints = ext(cert, x509.BasicConstraints)
    assert constraints.critical and not constraints.value.ca
    ca_ski = ext(ca, x509.SubjectKeyIdentifier).value
    assert ext(cert, x509.AuthorityKeyIdentifier).value.key_identifier == ca_ski.digest
    assert ext(cert, x509.SubjectKeyIdentifier).value == x509.SubjectKeyIdentifier.from_public_key(
        cert.public_key()
    )


def test_ca_may_sign_leaves_only(bundle: CertBundle) -> None:
    ca = bundle.ca_certificate
    constraints = ext(ca, x509.BasicConstraints)
    assert constraints.critical
    assert constraints.value.ca and constraints.value.path_length == 0
    usage = ext(ca, x509.KeyUsage)
    assert usage.critical and usage.value.key_cert_sign and usage.value.crl_sign
    assert not usage.value.digital_signature
    assert ca.subject == ca.issuer


def test_validity_is_backdated_for_clock_skew(bundle: CertBundle) -> None:
    assert bundle.not_before == NOW - CLOCK_SKEW_BACKDATE
    assert bundle.not_after == bundle.not_before + DEFAULT_SERVING_VALIDITY
    ca = bundle.ca_certificate
    assert ca.not_valid_before_utc == NOW - CLOCK_SKEW_BACKDATE
    assert ca.not_valid_after_utc == ca.not_valid_before_utc + DEFAULT_CA_VALIDITY
    # A verifier whose clock is two minutes behind still accepts a certificate issued now.
    verify(bundle, DNSName("gpu-admission.gpu-system.svc"), NOW - timedelta(minutes=2))


def test_validity_is_configurable() -> None:
    spec = ServingSpec(
        service="svc", namespace="ns", validity=timedelta(days=30), ca_validity=timedelta(days=90)
    )
    issued = issue_bundle(spec, NOW)
    assert issued.not_after - issued.not_before == timedelta(days=30)
    ca = issued.ca_certificate
    assert ca.not_valid_after_utc - ca.not_valid_before_utc == timedelta(days=90)


def test_renew_at_is_two_thirds_through_the_lifetime(bundle: CertBundle) -> None:
    lifetime = bundle.not_after - bundle.not_before
    assert bundle.renew_at() == bundle.not_before + lifetime * 2 / 3
    assert bundle.renew_at(0.5) == bundle.not_before + lifetime / 2
    with pytest.raises(ValueError, match="between 0 and 1"):
        bundle.renew_at(1.5)


def test_renewal_keeps_the_ca_so_the_published_bundle_stays_valid(bundle: CertBundle) -> None:
    later = bundle.renew_at()
    renewed = renew_bundle(bundle, SPEC, now=later)
    assert renewed.ca_cert_pem == bundle.ca_cert_pem
    assert renewed.ca_key_pem == bundle.ca_key_pem
    assert renewed.retired_ca_pem == b""
    assert renewed.serial != bundle.serial
    assert renewed.key_pem != bundle.key_pem
    assert renewed.not_before == later - CLOCK_SKEW_BACKDATE
    # The caBundle already published (the old bundle's) trusts the renewed certificate.
    published = CertBundle(bundle.ca_bundle_pem, b"", renewed.cert_pem, renewed.key_pem)
    verify(published, DNSName("gpu-admission.gpu-system.svc"), later)


def test_ca_near_expiry_is_replaced_and_both_cas_are_trusted_during_the_overlap(
    bundle: CertBundle,
) -> None:
    ca_renewal = bundle.ca_renew_at()
    assert not ca_needs_replacing(bundle, SPEC, now=ca_renewal - timedelta(days=1))
    assert ca_needs_replacing(bundle, SPEC, now=ca_renewal)

    renewed = renew_bundle(bundle, SPEC, now=ca_renewal)
    assert renewed.ca_cert_pem != bundle.ca_cert_pem
    assert renewed.retired_ca_pem == bundle.ca_cert_pem
    assert renewed.ca_bundle_pem == renewed.ca_cert_pem + bundle.ca_cert_pem
    name = DNSName("gpu-admission.gpu-system.svc")
    verify(renewed, name, ca_renewal)
    # A replica still serving a certificate from the old CA stays trusted by the new bundle.
    old_leaf = renew_bundle(bundle, SPEC, now=ca_renewal - timedelta(days=1))
    overlap = CertBundle(renewed.ca_bundle_pem, b"", old_leaf.cert_pem, old_leaf.key_pem)
    verify(overlap, name, ca_renewal)


def test_retired_ca_leaves_the_bundle_once_expired(bundle: CertBundle) -> None:
    rotated = renew_bundle(bundle, SPEC, now=bundle.ca_renew_at())
    before_expiry = bundle.ca_certificate.not_valid_after_utc - timedelta(days=1)
    assert renew_bundle(rotated, SPEC, now=before_expiry).retired_ca_pem == bundle.ca_cert_pem
    after_expiry = bundle.ca_certificate.not_valid_after_utc + timedelta(days=1)
    assert renew_bundle(rotated, SPEC, now=after_expiry).retired_ca_pem == b""


def test_a_ca_too_short_lived_for_a_full_leaf_is_replaced() -> None:
    spec = ServingSpec(
        service="svc", namespace="ns", validity=timedelta(days=60), ca_validity=timedelta(days=90)
    )
    issued = issue_bundle(spec, NOW)
    # Day 40: before the CA's 2/3 point (day 60), but only 50 days of CA remain for a 60-day leaf.
    assert ca_needs_replacing(issued, spec, now=NOW + timedelta(days=40))
    renewed = renew_bundle(issued, spec, now=NOW + timedelta(days=40))
    assert renewed.not_after - renewed.not_before == timedelta(days=60)
    assert renewed.ca_cert_pem != issued.ca_cert_pem


def test_renewal_needs_the_ca_key(bundle: CertBundle) -> None:
    external = CertBundle(bundle.ca_cert_pem, b"", bundle.cert_pem, bundle.key_pem)
    with pytest.raises(CertificateError, match="CA key is not available"):
        renew_bundle(external, SPEC, now=NOW)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ips": ("not-an-ip",)}, "not an IP address"),
        ({"service": ""}, "service name and a namespace"),
        ({"validity": timedelta(seconds=10)}, "longer than a few minutes"),
    ],
)
def test_bad_specs_are_refused_with_a_reason(kwargs: dict, message: str) -> None:
    values = {"service": "svc", "namespace": "ns", **kwargs}
    with pytest.raises(ValueError, match=message):
        ServingSpec(**values)


def test_serving_certificate_never_outlives_its_ca() -> None:
    spec = ServingSpec(
        service="svc", namespace="ns", validity=timedelta(days=60), ca_validity=timedelta(days=30)
    )
    issued = issue_bundle(spec, NOW)
    assert issued.not_after == issued.ca_certificate.not_valid_after_utc
