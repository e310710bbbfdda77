"""The `install` configuration section: what the install itself is made of. The kustomize
components write it (each adds a layer to the ConfigMap, gpu_admission/config/files.py), so the
programs know the install they run in: the install's self-check expects the admission objects of
its layout and names its components in the command that mends it."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, field_validator

from gpu_admission.config.base import _Model

# Every component under manifests/components/, as the install's kustomization names it.
COMPONENTS = (
    "cert-manager",
    "monitoring",
    "gpu-usage",
    "policy-reports",
    "idle-gpus",
    "audit-mode",
    "without-gpu-visibility",
    "webhook-pod-mutations",
    "webhook-pod-checks",
)


class InstallLayout(StrEnum):
    """Which admission objects the install holds, by the API servers it is for."""

    AUTO = "auto"  # as the API server serves: the base on 1.36+, else the layout for older ones
    BASE = "base"  # 1.36 and later: MutatingAdmissionPolicy v1
    POD_MUTATIONS = "webhook-pod-mutations"  # 1.30 to 1.35: the pods webhook for every pod
    POD_CHECKS = "webhook-pod-checks"  # before 1.30: both pods webhooks for every pod


class InstallConfig(_Model):
    layout: InstallLayout = InstallLayout.AUTO
    """The install's layout, which the controller writes: auto, the one the API server calls
    for (what it serves); the layout components declare one (webhook-pod-checks also moves the
    workloads' stateless checks into the webhook: list it on API servers before 1.30)."""
    write_admission_objects: bool = True
    """The leading controller writes the admission policies, their bindings and the webhook
    configurations this configuration implies for the API server at hand (server-side apply,
    owned by its ClusterRole), and deletes leftovers of ours. false: it only reports what
    differs, and whoever holds that right applies `gpu-admission admission-policy` output (then
    drop the controller's create, update, patch and delete on them from its ClusterRole)."""
    components: dict[str, bool] = Field(default_factory=dict)
    """The kustomize components the install holds, each written by its own layer
    ({audit-mode: true}); names: cert-manager, monitoring, gpu-usage, policy-reports,
    audit-mode, without-gpu-visibility, webhook-pod-mutations, webhook-pod-checks."""

    @field_validator("components")
    @classmethod
    def _known(cls, value: dict[str, bool]) -> dict[str, bool]:
        unknown = sorted(set(value) - set(COMPONENTS))
        if unknown:
            raise ValueError(
                f"unknown component {', '.join(unknown)}: the components are "
                f"{', '.join(COMPONENTS)} (manifests/components/)"
            )
        return value

    def in_use(self) -> list[str]:
        """The components present, in the order the docs list them."""
        return [name for name in COMPONENTS if self.components.get(name)]
