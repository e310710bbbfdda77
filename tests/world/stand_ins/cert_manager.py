"""cert-manager played through the API, as its source makes it (github:cert-manager/cert-manager
v1.21.1); its controllers cannot run here. Two parts, each called when the test wants it to act:

- `issue(certificate)`: what the issuing controller writes for a Certificate, by its issuer.
  A self-signed issuer signs the certificate with its own key and sets `ca.crt` to the
  certificate itself (certificaterequests/selfsigned/selfsigned.go: "We set the CA to the returned
  certificate here since this is self-signed"). A CA issuer signs with the key of its Issuer's
  `spec.ca.secretName`; `tls.crt` is the chain without self-signed certificates, so the leaf
  alone under a self-signed root, and `ca.crt` the root (pki/parse_certificate_chain.go). The
  Secret is kubernetes.io/tls, written by server-side apply (field manager
  `cert-manager-certificates-issuing`, forced), annotated with the certificate's name, issuer and
  names (certificates/issuing/internal/secret.go) and labelled `controller.cert-manager.io/fao`.
  Each issuance makes a new private key: `privateKey.rotationPolicy` defaults to `Always` since
  v1.18. A renewal is the same call again: the same Secret rewritten in place.
- `inject()`: the CA injector. For every webhook configuration annotated
  `cert-manager.io/inject-ca-from: <namespace>/<certificate>`, the Certificate's Secret, only if
  its `cert-manager.io/certificate-name` annotation names that Certificate (sources.go), gives
  `ca.crt`, merged into every entry's `clientConfig.caBundle` (CAInjectorMerging, GA: appended,
  duplicates and expired certificates dropped) by server-side apply of the names and caBundles
  alone (field manager `cert-manager-cainjector`, forced).
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes import client
from kubernetes.dynamic import DynamicClient

GROUP = "cert-manager.io"
INJECT_ANNOTATION = "cert-manager.io/inject-ca-from"
CERTIFICATE_NAME = "cert-manager.io/certificate-name"
ISSUING_MANAGER = "cert-manager-certificates-issuing"
INJECTOR_MANAGER = "cert-manager-cainjector"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
_HOURS = {"h": 1.0, "m": 1 / 60, "s": 1 / 3600}


def _duration(text: str | None, default_hours: float) -> datetime.timedelta:
    """cert-manager's durations as the component writes them ("8760h", "43800h")."""
    if not text:
        return datetime.timedelta(hours=default_hours)
    return datetime.timedelta(hours=float(text[:-1]) * _HOURS[text[-1]])


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _load(data: str) -> bytes:
    return base64.b64decode(data)


class CertManager:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.dynamic = DynamicClient(api)

    def certificate(self, namespace: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(
            GROUP, "v1", namespace, "certificates", name
        )

    def _issuer_key(
        self, namespace: str, issuer: dict[str, Any]
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None:
        """The CA issuer's certificate and key (None: a self-signed issuer)."""
        spec = issuer["spec"]
        if "selfSigned" in spec:
            return None
        secret = self.core.read_namespaced_secret(spec["ca"]["secretName"], namespace)
        certificate = x509.load_pem_x509_certificate(_load(secret.data["tls.crt"]))
        key = serialization.load_pem_private_key(_load(secret.data["tls.key"]), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return certificate, key

    def issue(self, namespace: str, name: str) -> x509.Certificate:
        """Issue (or renew) the Certificate `namespace/name` into its Secret."""
        certificate = self.certificate(namespace, name)
        spec = certificate["spec"]
        issuer_ref = spec["issuerRef"]
        issuer = self.custom.get_namespaced_custom_object(
            GROUP, "v1", namespace, "issuers", issuer_ref["name"]
        )
        key = ec.generate_private_key(ec.SECP256R1())  # ECDSA 256, as the component asks
        now = datetime.datetime.now(datetime.UTC)
        subject = x509.Name(
            [x509.NameAttribute(NameOID.COMMON_NAME, spec["commonName"])]
            if spec.get("commonName")
            else []
        )
        signer = self._issuer_key(namespace, issuer)
        issuer_name, signing_key = (
            (subject, key) if signer is None else (signer[0].subject, signer[1])
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + _duration(spec.get("duration"), 2160))
            .add_extension(
                x509.BasicConstraints(ca=bool(spec.get("isCA")), path_length=None), critical=True
            )
        )
        if spec.get("dnsNames"):
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(n) for n in spec["dnsNames"]]),
                critical=not spec.get("commonName"),
            )
        if spec.get("isCA"):
            usage = x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=False, encipher_only=False, decipher_only=False,
            )  # fmt: skip
        else:
            usage = x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False,
                crl_sign=False, encipher_only=False, decipher_only=False,
            )  # fmt: skip
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
        issued = builder.add_extension(usage, critical=True).sign(signing_key, hashes.SHA256())
        ca = issued if signer is None else signer[0]
        private = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": spec["secretName"],
                "namespace": namespace,
                "labels": {"controller.cert-manager.io/fao": "true"},
                "annotations": {
                    CERTIFICATE_NAME: name,
                    "cert-manager.io/issuer-name": issuer_ref["name"],
                    "cert-manager.io/issuer-kind": issuer_ref.get("kind", ""),
                    "cert-manager.io/issuer-group": issuer_ref.get("group", ""),
                    "cert-manager.io/common-name": spec.get("commonName", ""),
                    "cert-manager.io/alt-names": ",".join(spec.get("dnsNames") or []),
                    "cert-manager.io/ip-sans": "",
                    "cert-manager.io/uri-sans": "",
                },
            },
            "data": {
                "tls.crt": base64.b64encode(_pem(issued)).decode(),
                "tls.key": base64.b64encode(private).decode(),
                "ca.crt": base64.b64encode(_pem(ca)).decode(),
            },
        }
        self.dynamic.server_side_apply(
            self.dynamic.resources.get(api_version="v1", kind="Secret"),
            body=secret,
            namespace=namespace,
            field_manager=ISSUING_MANAGER,
            force_conflicts=True,
        )
        return issued

    def inject(self) -> list[str]:
        """One pass of the CA injector; the webhook configurations it wrote to."""
        written = []
        for kind in WEBHOOK_KINDS:
            resource = self.dynamic.resources.get(
                api_version="admissionregistration.k8s.io/v1", kind=kind
            )
            for item in resource.get().items:
                configuration = item.to_dict()
                source = (configuration["metadata"].get("annotations") or {}).get(INJECT_ANNOTATION)
                if not source or "/" not in source:
                    continue
                ca = self._ca_of(*source.split("/", 1))
                if ca is None:
                    continue
                webhooks = [
                    {
                        "name": w["name"],
                        "clientConfig": {
                            "caBundle": _merged(w["clientConfig"].get("caBundle"), ca)
                        },
                    }
                    for w in configuration.get("webhooks") or []
                ]
                self.dynamic.server_side_apply(
                    resource,
                    body={
                        "apiVersion": "admissionregistration.k8s.io/v1",
                        "kind": kind,
                        "metadata": {"name": configuration["metadata"]["name"]},
                        "webhooks": webhooks,
                    },
                    field_manager=INJECTOR_MANAGER,
                    force_conflicts=True,
                )
                written.append(f"{kind}/{configuration['metadata']['name']}")
        return written

    def _ca_of(self, namespace: str, name: str) -> bytes | None:
        try:
            certificate = self.certificate(namespace, name)
            secret = self.core.read_namespaced_secret(certificate["spec"]["secretName"], namespace)
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise
        if (secret.metadata.annotations or {}).get(CERTIFICATE_NAME) != name:
            return None  # "refusing to target secret: ... annotation does not match"
        data = (secret.data or {}).get("ca.crt")
        return _load(data) if data else None


def _merged(bundle: str | None, ca: bytes) -> str:
    """cainjector's AppendCertificatesToBundle: the existing bundle's unexpired certificates, then
    the new one unless already there; base64 as caBundle is."""
    now = datetime.datetime.now(datetime.UTC)
    kept = [
        c
        for c in (x509.load_pem_x509_certificates(base64.b64decode(bundle)) if bundle else [])
        if c.not_valid_after_utc > now
    ]
    new = x509.load_pem_x509_certificate(ca)
    if new not in kept:
        kept.append(new)
    return base64.b64encode(b"".join(_pem(c) for c in kept)).decode()
