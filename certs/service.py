"""The serving process's certificates, from start-up to shutdown, in one object.

    certificates = CertificateService(config.certs, core_api, admission_api)
    await certificates.start()          # load or issue, publish caBundle, load into the context
    site = web.TCPSite(..., ssl_context=certificates.context)
    ...                                 # readiness: certificates.loaded
    await certificates.stop()

Where the certificates live decides who manages them: a Secret (`secret_name`) or a directory
(`cert_dir`) that is empty or holds ca.key is managed here (issued, renewed, CA rotated); a
directory with only tls.crt/tls.key (cert-manager, a mounted Secret) is managed elsewhere and only
reloaded when it changes.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

from kubernetes.client import AdmissionregistrationV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from certs.cabundle import DEFAULT_SYNC_INTERVAL, CABundleSyncer
from certs.issue import CertBundle, ServingSpec, issue_bundle
from certs.reloader import DEFAULT_POLL_INTERVAL, BeforeSwap, CertReloader
from certs.store import CertStore, FileStore, SecretStore
from gpu_admission.config import CertConfig

log = logging.getLogger(__name__)


class CertificateService:
    def __init__(
        self,
        config: CertConfig,
        core_api: CoreV1Api | None = None,
        admission_api: AdmissionregistrationV1Api | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        sync_interval: float = DEFAULT_SYNC_INTERVAL,
    ) -> None:
        self.config = config
        self.store = _store_for(config, core_api)
        self.spec = ServingSpec(
            service=config.service_name,
            namespace=config.namespace,
            dns=tuple(config.extra_dns),
            ips=tuple(config.extra_ips),
        )
        self.reloader = CertReloader()
        self.syncer = (
            CABundleSyncer(admission_api, config.webhook_configuration_name)
            if config.manage_ca_bundle and admission_api is not None
            else None
        )
        self.poll_interval = poll_interval
        self.sync_interval = sync_interval
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def context(self) -> ssl.SSLContext:
        """The one server context; hand it to aiohttp once, it follows every reload."""
        return self.reloader.context

    @property
    def loaded(self) -> bool:
        return self.reloader.loaded

    async def start(self) -> CertBundle:
        """Load (or issue) the certificates and serve them; then keep them current in the
        background. Raises CertificateError for stored certificates that cannot be used."""
        bundle = await asyncio.to_thread(self.store.load)
        if bundle is None:
            log.info("no certificates found; issuing a CA and serving certificate")
            issued = await asyncio.to_thread(issue_bundle, self.spec)
            bundle = await asyncio.to_thread(self.store.save, issued)
        managed = bundle.has_ca_key
        if self.syncer is not None:
            try:
                await self.syncer.publish(bundle)
            except ApiException as exc:
                # Serve anyway: readiness must not hinge on RBAC for the configurations; the
                # sync loop keeps trying and says why.
                log.warning("cannot publish caBundle yet (HTTP %s %s)", exc.status, exc.reason)
            except Exception as exc:  # the API server unreachable: same reasoning
                log.warning("cannot publish caBundle yet: %s", exc)
        self.reloader.reload(bundle)
        before_swap: BeforeSwap | None = self.syncer.publish if self.syncer else None
        self._tasks.append(
            asyncio.create_task(
                self.reloader.run(
                    self.store,
                    self.spec if managed else None,
                    self.config.renew_fraction,
                    self.poll_interval,
                    before_swap,
                    self._stop,
                ),
                name="certificate-watcher",
            )
        )
        if self.syncer is not None:
            self._tasks.append(
                asyncio.create_task(
                    self.syncer.run(lambda: self.reloader.current, self.sync_interval, self._stop),
                    name="ca-bundle-sync",
                )
            )
        return bundle

    async def stop(self) -> None:
        self._stop.set()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()


def _store_for(config: CertConfig, core_api: CoreV1Api | None) -> CertStore:
    if config.secret_name:
        if core_api is None:
            raise ValueError("certs.secret_name needs a Kubernetes client to reach the Secret")
        return SecretStore(core_api, config.namespace, config.secret_name)
    if config.cert_dir is None:
        raise ValueError("set certs.cert_dir (--cert-dir) or certs.secret_name for certificates")
    return FileStore(config.cert_dir)
