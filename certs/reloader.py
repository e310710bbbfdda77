"""One TLS server context whose certificate changes without a restart.

The server hands `CertReloader.context` to aiohttp once. `reload` loads a new certificate into
that same context: OpenSSL copies the certificate into each connection when the connection is
created, so new handshakes get the new certificate while open and keep-alive connections keep
theirs, and no request is dropped.

`run` keeps the certificate current: when this process manages the certificates it renews them
`renew_fraction` of the way through their lifetime; either way it re-reads the store every
`poll_interval` seconds and loads what changed. Polling content, not inotify, because a mounted
Secret changes by an atomic symlink swap that file watches miss or report on the wrong path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec, rsa
from kubernetes.client.exceptions import ApiException

from certs.issue import (
    DEFAULT_RENEW_FRACTION,
    CertBundle,
    ServingSpec,
    issue_bundle,
    renew_bundle,
)
from certs.pem import (
    CertificateError,
    check_key_matches,
    dns_names,
    load_certificate,
    names_host,
)
from certs.store import CertStore, content_fingerprint
from gpu_admission.cluster.informer import describe_error
from gpu_admission.process.quiet_log import QuietLog
from gpu_admission.process.reachability import unreachable_reason

log = logging.getLogger(__name__)

# TLS 1.2 suites: forward-secret AEAD only (Mozilla "intermediate"). TLS 1.3 suites are all strong
# and OpenSSL's defaults are kept.
TLS12_CIPHERS = ":".join(
    [
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-RSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "ECDHE-RSA-CHACHA20-POLY1305",
    ]
)
DEFAULT_POLL_INTERVAL = 30.0
# Shortest wait between attempts once renewal is due, so a failing store is not hammered.
RENEW_RETRY_SECONDS = 5.0

BeforeSwap = Callable[[CertBundle], Awaitable[None]]


@dataclass(frozen=True)
class CertPaths:
    """A certificate (chain) file and its key file, for example a mounted Secret's."""

    cert: Path
    key: Path


def make_server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    context.set_alpn_protocols(["http/1.1"])
    return context


def _key_kind(cert_pem: bytes) -> str:
    public = load_certificate(cert_pem, "serving certificate").public_key()
    if isinstance(public, ec.EllipticCurvePublicKey):
        return "ECDSA"
    if isinstance(public, rsa.RSAPublicKey):
        return "RSA"
    return type(public).__name__


def _utc_now() -> datetime:
    return datetime.now(UTC)


class CertReloader:
    """Holds the server's one SSLContext and swaps the certificate inside it."""

    def __init__(self, host: str | None = None) -> None:
        """`host`: the name TLS clients check (the API server calls a Service webhook as
        `<service>.<namespace>.svc`); a loaded certificate that does not name it is logged."""
        self.host = host
        self.context = make_server_context()
        self.current: CertBundle | None = None
        self._fingerprint: str | None = None
        self._key_kind: str | None = None

    @property
    def loaded(self) -> bool:
        """A certificate is loaded: the service can complete handshakes (for /readyz)."""
        return self._fingerprint is not None

    @property
    def serial(self) -> int | None:
        return None if self.current is None else self.current.serial

    def reload(self, source: CertBundle | CertPaths) -> bool:
        """Load `source` into the context if it differs from what is loaded; True if it did.

        The pair is checked before it touches the context: OpenSSL drops the loaded key when a
        new certificate does not match it, which would break every later handshake.
        """
        if isinstance(source, CertPaths):
            cert_pem, key_pem = source.cert.read_bytes(), source.key.read_bytes()
            cert_name, key_name = str(source.cert), str(source.key)
            bundle: CertBundle | None = None
        else:
            cert_pem, key_pem = source.cert_pem, source.key_pem
            cert_name, key_name = "tls.crt", "tls.key"
            bundle = source
        fingerprint = content_fingerprint({"crt": cert_pem, "key": key_pem})
        if fingerprint == self._fingerprint:
            if bundle is not None:
                self.current = bundle  # the CA bundle may have changed around the same pair
            return False
        check_key_matches(cert_pem, key_pem, cert_name, key_name)
        kind = _key_kind(cert_pem)
        if self._key_kind is not None and kind != self._key_kind:
            # OpenSSL keeps one certificate per key kind in a context: loading an RSA one next
            # to an ECDSA one would leave the old ECDSA certificate served to most clients.
            raise CertificateError(
                f"the new serving certificate has an {kind} key but an {self._key_kind} one is "
                "being served; a running service cannot switch key types, so restart it"
            )
        with tempfile.TemporaryDirectory(prefix="gpu-admission-tls-") as directory:
            # load_cert_chain reads files only; the directory is private to this user.
            cert_file, key_file = Path(directory, "tls.crt"), Path(directory, "tls.key")
            cert_file.write_bytes(cert_pem)
            key_file.touch(mode=0o600)
            key_file.write_bytes(key_pem)
            self.context.load_cert_chain(cert_file, key_file)
        self._fingerprint, self._key_kind = fingerprint, kind
        self.current = bundle if bundle is not None else _partial_bundle(cert_pem, key_pem)
        log.info("serving certificate loaded (serial %x)", self.current.serial)
        self._check_names(cert_pem, cert_name)
        return True

    def _check_names(self, cert_pem: bytes, source: str) -> None:
        cert = load_certificate(cert_pem, source)
        if self.host is None or names_host(cert, self.host):
            return
        # A certificate without it fails every call: served anyway, as nothing else can be.
        log.error(
            "the serving certificate (serial %x) names %s but not %s, the name the API server "
            "checks when it calls this service: every webhook call will fail TLS. Issue it for "
            "%s (a cert-manager Certificate in another namespace: "
            "docs/install.md#another-namespace)",
            cert.serial_number,
            ", ".join(dns_names(cert)) or "no DNS name",
            self.host,
            self.host,
        )

    async def check_once(
        self,
        store: CertStore,
        spec: ServingSpec | None = None,
        renew_fraction: float = DEFAULT_RENEW_FRACTION,
        before_swap: BeforeSwap | None = None,
        now: datetime | None = None,
    ) -> bool:
        """Read the store, renew if managed and due, load what changed. True if it loaded."""
        bundle = await asyncio.to_thread(store.load)
        if spec is not None:
            current_time = now or _utc_now()
            if bundle is None:
                log.info("no certificates stored; issuing a CA and a serving certificate")
                issued = await asyncio.to_thread(issue_bundle, spec, current_time)
                bundle = await asyncio.to_thread(store.save, issued)
            elif current_time >= bundle.renew_at(renew_fraction):
                log.info("serving certificate is due for renewal (expires %s)", bundle.not_after)
                try:
                    renewed = await asyncio.to_thread(
                        renew_bundle, bundle, spec, renew_fraction, current_time
                    )
                except CertificateError as exc:
                    # Still valid for a third of its life: serve it and say why it was not renewed.
                    log.warning("cannot renew the serving certificate: %s", exc)
                else:
                    # Another replica may have renewed first; then its certificate comes back.
                    bundle = await asyncio.to_thread(store.save, renewed)
        if bundle is None:
            log.warning("no serving certificate in the certificate store yet; waiting for one")
            return False
        if self.current is not None and self.current == bundle:
            return False
        if before_swap is not None:
            # Publish the CA first, so the API server trusts the certificate before it is served.
            await before_swap(bundle)
        return self.reload(bundle)

    async def run(
        self,
        store: CertStore,
        spec: ServingSpec | None = None,
        renew_fraction: float = DEFAULT_RENEW_FRACTION,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        before_swap: BeforeSwap | None = None,
        stop: asyncio.Event | None = None,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        """Keep the certificate current until `stop` is set (or the task is cancelled).

        With `spec` this process manages the certificates (issues and renews them); without it
        they are managed elsewhere and only reloaded when the store's content changes.
        """
        stop = stop or asyncio.Event()
        quiet = QuietLog(log)  # a check failing every poll is said once, and its end once
        while not stop.is_set():
            try:
                await self.check_once(store, spec, renew_fraction, before_swap, clock())
            except (CertificateError, ApiException, OSError) as exc:
                # Keep serving the loaded certificate; a half-written pair or an API hiccup
                # usually resolves by the next poll.
                said = describe_error(exc) if isinstance(exc, ApiException) else str(exc)
                quiet.failed(
                    "check", f"certificate check failed, keeping the current certificate: {said}"
                )
            except Exception as exc:
                # Whatever else goes wrong, this loop must outlive it: it is what keeps the
                # certificate valid. An API server that does not answer is one short line.
                reason = unreachable_reason(exc)
                if reason is None:
                    log.exception("certificate check failed, keeping the current certificate")
                else:
                    quiet.failed(
                        "check",
                        "certificate check failed, keeping the current certificate: the "
                        f"certificate store cannot be reached ({reason})",
                    )
            else:
                quiet.recovered("check", "certificate check works again")
            delay = poll_interval
            if spec is not None and self.current is not None:
                until_renewal = (self.current.renew_at(renew_fraction) - clock()).total_seconds()
                delay = min(delay, max(until_renewal, RENEW_RETRY_SECONDS))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)


def _partial_bundle(cert_pem: bytes, key_pem: bytes) -> CertBundle:
    """A bundle for a pair loaded from paths; the CA is not known here."""
    return CertBundle(ca_cert_pem=b"", ca_key_pem=b"", cert_pem=cert_pem, key_pem=key_pem)
