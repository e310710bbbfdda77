"""Keep `caBundle` current in every webhook of the service's webhook configurations.

The API server verifies the service's certificate against `caBundle`, so it must list the CA
that signed the certificate being served. Each change is a JSON Patch that first tests every
webhook's name at its index and then sets its caBundle: another writer reordering or replacing
webhooks makes the patch fail instead of setting a bundle on the wrong webhook, and fields this
code does not know are never rewritten. Nothing is written when the bundle is already current.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import AdmissionregistrationV1Api
from kubernetes.client.exceptions import ApiException

from certs.issue import CertBundle
from gpu_admission.cluster.informer import describe_error
from gpu_admission.process.quiet_log import QuietLog
from gpu_admission.process.reachability import unreachable_reason

log = logging.getLogger(__name__)


def _reason(error: BaseException) -> str | None:
    """One short line for an API error or an API server that did not answer; None for
    anything else (a bug: its traceback is worth logging)."""
    if isinstance(error, ApiException):
        return describe_error(error)
    return unreachable_reason(error)


DEFAULT_CONFIGURATION_NAME = "gpu-admission"
DEFAULT_SYNC_INTERVAL = 60.0
MISSING_RETRY_SECONDS = 1.0
MISSING_RETRY_MAX_SECONDS = 8.0
MAX_ATTEMPTS = 5
MUTATING = "MutatingWebhookConfiguration"
VALIDATING = "ValidatingWebhookConfiguration"


@dataclass
class SyncResult:
    """What a sync did, by configuration kind."""

    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.missing


def _encoded(value: Any) -> str:
    """caBundle as the API returns it (base64 text); the client may hand back bytes."""
    if value is None:
        return ""
    return value.decode("ascii") if isinstance(value, bytes) else str(value)


def bundle_patch(webhooks: list[Any], wanted: str) -> list[dict[str, Any]]:
    """JSON Patch setting caBundle on each webhook that lacks `wanted`; [] when all have it."""
    operations: list[dict[str, Any]] = []
    for index, webhook in enumerate(webhooks):
        if _encoded(webhook.client_config.ca_bundle) == wanted:
            continue
        operations.append({"op": "test", "path": f"/webhooks/{index}/name", "value": webhook.name})
        # "add" sets the member whether or not it exists yet.
        operations.append(
            {"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": wanted}
        )
    return operations


class CABundleSyncer:
    """Publishes a CA bundle to the Mutating and Validating configurations named `name`."""

    def __init__(
        self, api: AdmissionregistrationV1Api, name: str = DEFAULT_CONFIGURATION_NAME
    ) -> None:
        self.api = api
        self.name = name
        self._kinds = {
            MUTATING: (
                api.read_mutating_webhook_configuration,
                api.patch_mutating_webhook_configuration,
            ),
            VALIDATING: (
                api.read_validating_webhook_configuration,
                api.patch_validating_webhook_configuration,
            ),
        }

    def sync(self, ca_bundle_pem: bytes) -> SyncResult:
        """Make every webhook's caBundle equal `ca_bundle_pem`. Missing configurations are
        reported in the result (they may be created later); other API errors raise."""
        wanted = base64.b64encode(ca_bundle_pem).decode("ascii")
        result = SyncResult()
        for kind, (read, patch) in self._kinds.items():
            outcome = self._sync_one(kind, read, patch, wanted)
            getattr(result, outcome).append(kind)
        return result

    def _sync_one(self, kind: str, read: Callable, patch: Callable, wanted: str) -> str:
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                configuration = read(self.name)
            except ApiException as exc:
                if exc.status == 404:
                    return "missing"
                raise
            operations = bundle_patch(configuration.webhooks or [], wanted)
            if not operations:
                return "unchanged"
            try:
                patch(self.name, operations)
            except ApiException as exc:
                # 422: a test failed because the webhooks changed since the read; 404: deleted.
                if exc.status not in (404, 409, 422) or attempt == MAX_ATTEMPTS:
                    raise
                log.info("%s %s changed while updating caBundle; retrying", kind, self.name)
                continue
            log.info("caBundle updated in %s %s", kind, self.name)
            return "updated"
        raise AssertionError("unreachable")  # the loop returns or raises on its last attempt

    async def publish(self, bundle: CertBundle) -> None:
        """For CertReloader.run(before_swap=...): publish the bundle's CAs before serving it."""
        result = await self._publish(bundle)
        for kind in result.missing:
            log.warning(
                "%s %s does not exist yet; its caBundle will be set when it appears",
                kind,
                self.name,
            )

    async def _publish(self, bundle: CertBundle) -> SyncResult:
        if not bundle.ca_cert_pem:
            return SyncResult()  # certificates managed elsewhere without ca.crt: nothing to do
        return await asyncio.to_thread(self.sync, bundle.ca_bundle_pem)

    async def run(
        self,
        current_bundle: Callable[[], CertBundle | None],
        interval: float = DEFAULT_SYNC_INTERVAL,
        stop: asyncio.Event | None = None,
    ) -> None:
        """Re-publish every `interval` seconds: configurations created or re-applied later (with
        an empty caBundle) get the current one. While a configuration does not exist yet (the
        controller writes them once it leads, after this service may have started) it is looked
        for again sooner, from MISSING_RETRY_SECONDS doubling up to MISSING_RETRY_MAX_SECONDS
        (two reads each): until then the API server cannot call this service."""
        stop = stop or asyncio.Event()
        # A failure repeating every interval (an API server away, a missing permission) is said
        # once, and its end once.
        quiet = QuietLog(log)
        missing_wait = MISSING_RETRY_SECONDS
        while not stop.is_set():
            bundle = current_bundle()
            wait = interval
            if bundle is not None:
                try:
                    result = await self._publish(bundle)
                except Exception as exc:
                    reason = _reason(exc)
                    if reason is None:
                        log.exception("cannot update caBundle in %s; retrying", self.name)
                    else:
                        quiet.failed(
                            "sync",
                            f"cannot update caBundle in {self.name} ({reason}); "
                            f"retrying every {interval:g} s",
                        )
                else:
                    quiet.recovered("sync", f"caBundle in {self.name} can be updated again")
                    if result.missing:
                        quiet.failed(
                            "missing",
                            f"{' and '.join(result.missing)} {self.name} does not exist yet; "
                            "its caBundle is set when it appears",
                        )
                        wait = min(missing_wait, interval)
                        missing_wait = min(missing_wait * 2, MISSING_RETRY_MAX_SECONDS)
                    else:
                        quiet.recovered("missing", f"caBundle set in {self.name}")
                        missing_wait = MISSING_RETRY_SECONDS
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=wait)
