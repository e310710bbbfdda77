"""A throwaway HTTPS admission webhook for tests: its own CA, scripted answers, recorded calls.

    async with TestWebhook(answer, dns_names=["hook.system.svc"]) as hook:
        hook.port, hook.ca_bundle, hook.calls  # calls: (path, query, headers, review) tuples

``answer(path, review)`` returns the AdmissionReview *response* dict (``uid`` is filled in when
missing) or a ``(status, bytes)`` pair to send a raw HTTP answer; it may be a coroutine function,
for instance to hang until a test releases it.
"""

from __future__ import annotations

import base64
import datetime as dt
import inspect
import ipaddress
import json
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

Answer = Callable[
    [str, dict[str, Any]],
    dict[str, Any] | tuple[int, bytes] | Awaitable[dict[str, Any] | tuple[int, bytes]],
]


def json_patch(operations: list[dict[str, Any]]) -> dict[str, str]:
    """The ``patch``/``patchType`` fields of a response carrying these operations."""
    raw = json.dumps(operations).encode()
    return {"patchType": "JSONPatch", "patch": base64.b64encode(raw).decode()}


@dataclass
class Call:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    review: dict[str, Any]


def _certificate(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name | None = None
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
    )


def issue_serving_pair(dns_names: Sequence[str]) -> tuple[bytes, bytes, bytes]:
    """(CA PEM, server cert PEM, server key PEM); SANs are the names plus 127.0.0.1."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        _certificate("test-webhook-ca", ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    cert = (
        _certificate("test-webhook", key, ca.subject)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    pem = serialization.Encoding.PEM
    return ca.public_bytes(pem), cert.public_bytes(pem), key_pem


class TestWebhook:
    """An aiohttp HTTPS server on 127.0.0.1 answering AdmissionReviews through ``answer``."""

    __test__ = False  # not a pytest test class

    def __init__(self, answer: Answer, dns_names: Sequence[str] = ()) -> None:
        self._answer = answer
        self._dns_names = list(dns_names)
        self.calls: list[Call] = []
        self.port = 0
        self.ca_bundle = ""
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> TestWebhook:
        ca_pem, cert_pem, key_pem = issue_serving_pair(self._dns_names)
        self.ca_bundle = base64.b64encode(ca_pem).decode()
        with tempfile.TemporaryDirectory() as directory:
            cert_path, key_path = Path(directory, "tls.crt"), Path(directory, "tls.key")
            cert_path.write_bytes(cert_pem)
            key_path.write_bytes(key_pem)
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(cert_path, key_path)
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def paths(self) -> list[str]:
        return [call.path for call in self.calls]

    async def _handle(self, request: web.Request) -> web.Response:
        review = await request.json()
        self.calls.append(Call(request.path, dict(request.query), dict(request.headers), review))
        answer = self._answer(request.path, review)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, tuple):
            status, raw = answer
            return web.Response(status=status, body=raw)
        response = {"uid": review["request"]["uid"], **answer}
        envelope = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}
        return web.json_response({**envelope, "response": response})
