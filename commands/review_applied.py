"""The cluster as `gpu-admission review` walks its input: what `kubectl apply -f` would have
created so far counts as existing for the objects after it.

A Secret, a ServiceAccount or a PersistentVolumeClaim earlier in the input (and admitted) is
found by the objects that come after it; one later in the input is not, as on a real cluster
where the later object does not exist yet when the earlier one is admitted. A Namespace earlier
in the input with the exempt label exempts what follows in it. ResourceClaims and their templates
are read from the whole input, as before: the scheduler, not admission, waits for them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from commands.review_inputs import in_namespace
from gpu_admission.cluster.dra import ClaimInfo
from gpu_admission.cluster.view import (
    ClusterView,
    PVCInfo,
    SecretInfo,
    ServiceAccountInfo,
    pvc_info,
    secret_info,
    service_account_info,
)
from webhooks.offline.state import ClusterState


class AppliedView:
    """The base view, overlaid with the manifests applied so far and the input's claims."""

    def __init__(self, base: ClusterView, claims: Iterable[ClaimInfo] = ()) -> None:
        self._base = base
        self._claims = {(c.kind, c.namespace, c.name): c for c in claims}
        self._secrets: dict[tuple[str, str], SecretInfo] = {}
        self._service_accounts: dict[tuple[str, str], ServiceAccountInfo] = {}
        self._pvcs: dict[tuple[str, str], PVCInfo] = {}
        self._generation = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)

    def generation(self) -> int:
        # Caches keyed on the view's generation must see each applied object as a change.
        return self._base.generation() + self._generation

    def applied(self, obj: dict[str, Any]) -> None:
        """Record an admitted object as created (the kinds pods look up; others are ignored)."""
        kind = obj.get("kind")
        if kind not in ("Secret", "ServiceAccount", "PersistentVolumeClaim"):
            return
        obj = in_namespace(obj)
        meta = obj["metadata"]
        key = (meta["namespace"], str(meta.get("name") or ""))
        if kind == "Secret":
            self._secrets[key] = secret_info(obj)
        elif kind == "ServiceAccount":
            self._service_accounts[key] = service_account_info(obj)
        else:
            self._pvcs[key] = pvc_info(obj)
        self._generation += 1

    def secret(self, namespace: str, name: str) -> SecretInfo | None:
        found = self._secrets.get((namespace, name))
        return found or self._base.secret(namespace, name)

    def service_account(self, namespace: str, name: str) -> ServiceAccountInfo | None:
        found = self._service_accounts.get((namespace, name))
        return found or self._base.service_account(namespace, name)

    def pvc(self, namespace: str, name: str) -> PVCInfo | None:
        return self._pvcs.get((namespace, name)) or self._base.pvc(namespace, name)

    def resource_claim(self, namespace: str, name: str) -> ClaimInfo | None:
        found = self._claims.get(("ResourceClaim", namespace, name))
        return found or self._base.resource_claim(namespace, name)

    def resource_claim_template(self, namespace: str, name: str) -> ClaimInfo | None:
        found = self._claims.get(("ResourceClaimTemplate", namespace, name))
        return found or self._base.resource_claim_template(namespace, name)


def labelled_by(obj: dict[str, Any], label: str) -> str | None:
    """The namespace an applied Namespace object is, if it carries `label` as "true" (the
    exempt label, or the one for ServiceAccount-bound credentials)."""
    if obj.get("kind") != "Namespace":
        return None
    meta = obj.get("metadata") or {}
    if (meta.get("labels") or {}).get(label) == "true" and meta.get("name"):
        return str(meta["name"])
    return None


def applied_state(state: ClusterState, view: AppliedView) -> ClusterState:
    """The state a review walks: the overlay view, and its own copies of the labelled
    namespaces."""
    return ClusterState(
        cast(ClusterView, view),
        set(state.exempt_namespaces),
        state.resolver,
        set(state.credential_namespaces),
    )
