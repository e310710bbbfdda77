"""POSTing an AdmissionReview to a webhook the way kube-apiserver's webhook client does.

``clientConfig.service`` URLs keep their in-cluster host name (``<name>.<namespace>.svc``): a
resolver maps that name to the local address a test registered, so TLS verification checks the
service DNS name against the certificate's SANs exactly as in a cluster. Failures are reported
with the Go client's wording (``Post "<url>": ...``) because users read them in API errors.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, */*",
    "Accept-Encoding": "gzip",
    "User-Agent": "kube-apiserver-admission",
}
DEFAULT_TIMEOUT_SECONDS = 10
DEFAULT_SERVICE_PORT = 443


class CallFailed(Exception):
    """The webhook could not be called or gave no usable answer (failurePolicy decides)."""


@dataclass(frozen=True)
class Target:
    url: str  # what errors and the Host header show
    host: str  # the name TLS verifies
    connect_to: tuple[str, int] | None  # where a service name really resolves to


def target_for(
    client_config: Mapping[str, Any], services: Mapping[tuple[str, str], str], timeout: int
) -> Target:
    """Where to POST for a webhook's ``clientConfig``, with kube-apiserver's ``?timeout=Ns``."""
    query = f"?timeout={timeout}s"
    if client_config.get("url"):
        url = str(client_config["url"])
        return Target(url + query, URL(url).host or "", None)
    service = client_config.get("service") or {}
    namespace, name = service.get("namespace", ""), service.get("name", "")
    port = int(service.get("port") or DEFAULT_SERVICE_PORT)
    path = service.get("path") or "/"
    host = f"{name}.{namespace}.svc"
    address = services.get((namespace, name))
    if address is None:
        raise CallFailed(f'service "{namespace}/{name}" has no endpoints registered')
    ip, _, local_port = address.rpartition(":")
    return Target(f"https://{host}:{port}{path}{query}", host, (ip, int(local_port)))


def ssl_context(ca_bundle: str | None) -> ssl.SSLContext:
    """Trust only the caBundle when given (system roots otherwise), like the apiserver."""
    if not ca_bundle:
        return ssl.create_default_context()
    try:
        pem = base64.b64decode(ca_bundle, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise CallFailed("could not get REST client: unable to load root certificates") from None
    try:
        context = ssl.create_default_context(cadata=pem)
    except ssl.SSLError:
        raise CallFailed("could not get REST client: unable to load root certificates") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class _ServiceResolver(AbstractResolver):
    """Resolves exactly one service host name to its registered local address."""

    def __init__(self, host: str, address: tuple[str, int]) -> None:
        self._host = host
        self._address = address

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host != self._host:
            raise OSError(f"lookup {host}: no such host")
        ip, local_port = self._address
        return [
            {
                "hostname": host,
                "host": ip,
                "port": local_port,
                "family": socket.AF_INET6 if ":" in ip else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
        ]

    async def close(self) -> None:
        return None


def _describe(error: BaseException, target: Target) -> str:
    if isinstance(error, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return "context deadline exceeded"
    if isinstance(error, aiohttp.ClientConnectorCertificateError):
        cert_error = error.certificate_error
        detail = getattr(cert_error, "verify_message", "") or str(cert_error)
        if "hostname" in detail.lower() or "ip address mismatch" in detail.lower():
            return (
                "tls: failed to verify certificate: x509: certificate is not valid for "
                f"{target.host}"
            )
        return "tls: failed to verify certificate: x509: certificate signed by unknown authority"
    if isinstance(error, aiohttp.ClientConnectorError):
        host, port = target.connect_to or (error.host, error.port)
        if isinstance(error.os_error, ConnectionRefusedError):
            return f"dial tcp {host}:{port}: connect: connection refused"
        return f"dial tcp {host}:{port}: {error.os_error.strerror or error.os_error}"
    return str(error) or type(error).__name__


async def post_review(
    target: Target, context: ssl.SSLContext, body: bytes, timeout_seconds: int
) -> bytes:
    """POST the review and return the response body; CallFailed with Go's wording otherwise."""
    resolver = _ServiceResolver(target.host, target.connect_to) if target.connect_to else None
    connector = aiohttp.TCPConnector(ssl=context, resolver=resolver, force_close=True)
    timeout = aiohttp.ClientTimeout(total=timeout_seconds)
    method_url = f'Post "{target.url}"'
    try:
        async with (
            aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
            session.post(target.url, data=body, headers=HEADERS) as response,
        ):
            payload = await response.read()
            status = response.status
    except (TimeoutError, aiohttp.ClientError, OSError) as error:
        raise CallFailed(
            f"failed to call webhook: {method_url}: {_describe(error, target)}"
        ) from None
    if 200 <= status < 300:
        return payload
    if status >= 500:
        text = payload.decode(errors="replace").strip()
        reason = f'an error on the server ("{text}") has prevented the request from succeeding'
    else:
        reason = (
            f"the server responded with the status code {status} but did not return more "
            "information"
        )
    raise CallFailed(f"failed to call webhook: {reason}")
