"""The serving certificate of `serve`: where it is kept, who renews it, and caBundle upkeep.

Where: with cluster access and `certs.secret_name`, a kubernetes.io/tls Secret that every replica
shares; otherwise the `--cert-dir` directory (an emptyDir, or a mounted cert-manager Secret).
Who renews: this process, when the store holds the CA key or holds nothing yet (it issues a CA and
a serving certificate then); otherwise someone else (cert-manager) and this process only reloads
what changes. caBundle: published to the webhook configurations when `certs.manage_ca_bundle` is
on and the cluster is reachable.
"""

from __future__ import annotations

import asyncio
import logging

from kubernetes.client import AdmissionregistrationV1Api, ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from certs.cabundle import CABundleSyncer
from certs.issue import CertBundle, KeyType, ServingSpec, api_server_host
from certs.pem import CertificateError
from certs.reloader import DEFAULT_POLL_INTERVAL, CertReloader
from certs.store import CertStore, FileStore, SecretStore
from gpu_admission.config.model import CertConfig, ConfigError
from gpu_admission.process.reachability import API_SERVER, unreachable_reason

log = logging.getLogger(__name__)

STOP_TIMEOUT_SECONDS = 5.0
FIRST_RETRY_SECONDS = 0.5
MAX_RETRY_SECONDS = 8.0


class ServingCertificates:
    """Loads the serving certificate before the HTTPS site starts, then keeps it current."""

    name = "certificates"

    def __init__(
        self,
        config: CertConfig,
        api: ApiClient | None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        self.config = config
        self.reloader = CertReloader(api_server_host(config.service_name, config.namespace))
        self.poll_interval = poll_interval
        self.store = self._choose_store(api)
        self.syncer = (
            CABundleSyncer(AdmissionregistrationV1Api(api), config.webhook_configuration_name)
            if api is not None and config.manage_ca_bundle
            else None
        )
        self.spec: ServingSpec | None = None
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def _choose_store(self, api: ApiClient | None) -> CertStore:
        if api is not None and self.config.secret_name:
            log.info(
                "serving certificate kept in Secret %s/%s",
                self.config.namespace,
                self.config.secret_name,
            )
            return SecretStore(CoreV1Api(api), self.config.namespace, self.config.secret_name)
        if self.config.cert_dir is None:
            raise ConfigError(
                "certs.cert_dir: no place for the serving certificate; pass --cert-dir DIR "
                "(an empty directory gets a new CA and certificate)"
                + ("" if api is not None else ", or run with cluster access and certs.secret_name")
            )
        if self.config.secret_name:
            log.info("no cluster access: using --cert-dir instead of certs.secret_name")
        return FileStore(self.config.cert_dir)

    def _serving_spec(self) -> ServingSpec:
        return ServingSpec(
            service=self.config.service_name,
            namespace=self.config.namespace,
            dns=tuple(self.config.extra_dns),
            ips=tuple(self.config.extra_ips),
            key_type=KeyType(self.config.key_type),
        )

    async def load(self) -> None:
        """Load (issuing first if the store is empty) the certificate to serve. Raises
        CertificateError naming the file or Secret key when the stored pair is unusable, or
        the Secret when the API server refuses it. While the API server cannot be reached (a
        node starting before the network, an outage) it retries, said in one warning line,
        as the controller does for its Lease."""
        delay = FIRST_RETRY_SECONDS
        while True:
            try:
                await self._load_once()
            except Exception as error:
                reason = unreachable_reason(error)
                if reason is None:
                    if isinstance(error, ApiException):
                        raise CertificateError(self._refused(error)) from None
                    raise
                API_SERVER.lost(self, reason, f"the serving certificate ({self._where()})")
                await asyncio.sleep(delay)  # back-off between attempts, not synchronisation
            else:
                API_SERVER.answered(self)
                return
            delay = min(delay * 2, MAX_RETRY_SECONDS)

    def _where(self) -> str:
        if isinstance(self.store, SecretStore):
            return f"Secret {self.store.namespace}/{self.store.name}"
        return f"directory {self.config.cert_dir}"

    def _refused(self, error: ApiException) -> str:
        hint = (
            "the ServiceAccount needs get, create and update on it (manifests/base/rbac.yaml)"
            if error.status in (401, 403)
            else "check the API server's message"
        )
        return (
            f"the serving certificate's {self._where()} cannot be read or written: the API "
            f"server answered HTTP {error.status} {error.reason or ''}".rstrip()
            + f"; {hint}"
        )

    async def _load_once(self) -> None:
        stored = await asyncio.to_thread(self.store.load)
        if stored is None or stored.has_ca_key:
            self.spec = self._serving_spec()
        else:
            log.info("serving certificate is managed elsewhere (no CA key); reloading changes only")
        await self.reloader.check_once(
            self.store, self.spec, self.config.renew_fraction, before_swap=self._publish_or_warn
        )

    async def _publish_or_warn(self, bundle: CertBundle) -> None:
        # At start-up a missing permission or configuration must not keep the service down;
        # the periodic sync publishes the bundle once it can.
        if self.syncer is None:
            return
        try:
            await self.syncer.publish(bundle)
        except ApiException as exc:
            log.warning(
                "cannot publish caBundle yet (HTTP %s %s); retrying in the background",
                exc.status,
                exc.reason,
            )
        except Exception as exc:  # unreachable API server: urllib3 errors, timeouts
            log.warning("cannot publish caBundle yet (%s); retrying in the background", exc)

    async def start(self) -> None:
        self._tasks.append(
            asyncio.create_task(
                self.reloader.run(
                    self.store,
                    self.spec,
                    self.config.renew_fraction,
                    self.poll_interval,
                    before_swap=self.syncer.publish if self.syncer is not None else None,
                    stop=self._stop,
                ),
                name="certificate-renewal",
            )
        )
        if self.syncer is not None:
            self._tasks.append(
                asyncio.create_task(
                    self.syncer.run(lambda: self.reloader.current, stop=self._stop),
                    name="ca-bundle-sync",
                )
            )

    async def stop(self) -> None:
        self._stop.set()
        if not self._tasks:
            return
        _, pending = await asyncio.wait(self._tasks, timeout=STOP_TIMEOUT_SECONDS)
        for task in pending:  # stuck in a blocking API call: abandon it
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in self._tasks:
            if task.done() and not task.cancelled() and (error := task.exception()) is not None:
                log.error("%s stopped with an error", task.get_name(), exc_info=error)
        self._tasks.clear()

    def not_ready(self) -> list[str]:
        return [] if self.reloader.loaded else ["certificates"]
