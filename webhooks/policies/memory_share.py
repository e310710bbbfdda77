"""GPU memory share: tell apps on a shared GPU how much of its memory is theirs.

Time-slicing shares compute but not memory: every replica can allocate the whole GPU, and the
first greedy framework starves the rest. A request is shared when every node it may land on
shares the resource (`gpu_sharing`: a renamed `.shared` resource, or `nvidia.com/gpu` on nodes
gpu-feature-discovery labels time-slicing or mps); the replica count and memory per GPU come
from those nodes' labels, and the worst case among them (most replicas, least memory) is the
safe one. Under MPS the device plugin's daemon already caps each client at the GPU's memory
divided by the replicas; the share written here is the same division less the headroom, so a
framework's own cap always lies under the daemon's and fails first, with the framework's own
out-of-memory error. The share is written as plain env values, so `$(GPU_MEMORY_FRACTION)` also
works in args, in the form each framework reads (the profile).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpu_admission import names as n
from gpu_admission.cluster.view import ClusterView, NodeInfo
from gpu_admission.config.model import Config, GpuConfig, NoCandidateBehaviour
from webhooks.core.patch import Patch
from webhooks.core.review import AdmissionRequest, Verdict
from webhooks.policies.containers import iter_containers
from webhooks.policies.gpu_claims import GpuDetector, GpuUse
from webhooks.policies.gpu_resources import GpuResources
from webhooks.policies.gpu_sharing import classify, label_count
from webhooks.policies.gpu_visibility import is_mirror_pod
from webhooks.policies.interface import MutatingPolicy, Scope
from webhooks.policies.node_match import Placement
from webhooks.policies.share_env import (
    GENERIC_RULES,
    PROFILE_WARNINGS,
    EnvRule,
    Share,
    apply_env,
    build_profiles,
)

RESOURCE_CONTAINER_LISTS = ("initContainers", "containers")  # ephemeral ones cannot ask for any


# -- the share ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NoShare:
    resource: str
    reason: str  # short: goes into a warning (MAX_WARNING_LENGTH)
    advice: str  # what to do, for the longer denial message


@dataclass(frozen=True, slots=True)
class ShareResult:
    share: Share | NoShare
    notes: tuple[str, ...] = ()  # warnings about the candidates (spread, unlabelled nodes)


def gpu_facts(node: NodeInfo, base: str) -> tuple[int, int] | None:
    """(replicas, memory MiB) from the node's gpu-feature-discovery labels, if both are usable."""
    replicas = label_count(node.labels.get(base + n.GPU_REPLICAS_LABEL_SUFFIX))
    memory = label_count(node.labels.get(base + n.GPU_MEMORY_LABEL_SUFFIX))
    if not replicas or not memory:
        return None
    return replicas, memory


def compute_share(
    resource: str, candidates: Iterable[NodeInfo], headroom: Fraction, gpu: GpuConfig
) -> ShareResult | None:
    """The safe share of `resource` across the candidate nodes that share it; None when the
    request is not shared (no candidate shares an unrenamed resource)."""
    sharing = classify(resource, candidates, gpu)
    renamed = gpu.is_shared_resource(resource)
    if not renamed and not sharing.shared:
        return None
    base = gpu.base_resource_name(resource)
    offering = sharing.shared
    labels = f"{base}{n.GPU_REPLICAS_LABEL_SUFFIX}/{n.GPU_MEMORY_LABEL_SUFFIX.lstrip('.')}"
    if not offering:
        return ShareResult(
            NoShare(
                resource,
                f"no node it can run on offers {resource}",
                "check spec.nodeName, nodeSelector and node affinity against the nodes that "
                f"offer {resource}",
            )
        )
    facts = [f for f in (gpu_facts(node, base) for node in offering) if f is not None]
    if not facts:
        return ShareResult(
            NoShare(
                resource,
                f"its {len(offering)} candidate node(s) lack labels {labels}",
                f"ask your platform team to check that gpu-feature-discovery labels the nodes "
                f"offering {resource}",
            )
        )
    replicas = max(r for r, _ in facts)
    memory = min(m for _, m in facts)
    thousandths = math.floor(headroom * 1000 / replicas)
    if thousandths == 0:
        return ShareResult(
            NoShare(
                resource,
                f"{replicas} replicas per GPU leave under 0.001 of its memory each",
                "ask your platform team to share the GPUs fewer ways",
            )
        )
    notes = [sharing.mixed_note()] if sharing.mixed else []
    if len(facts) < len(offering):
        notes.append(
            f"{resource}: {len(offering) - len(facts)} of {len(offering)} candidate nodes lack "
            f"labels {labels}; share computed from the others"
        )
    low_replicas = min(r for r, _ in facts)
    high_memory = max(m for _, m in facts)
    if low_replicas != replicas or high_memory != memory:
        spread = []
        if low_replicas != replicas:
            spread.append(f"replicas {low_replicas}..{replicas}")
        if high_memory != memory:
            spread.append(f"memory {memory}..{high_memory} MiB")
        notes.append(
            f"{resource}: {', '.join(spread)} across {len(facts)} nodes; using the safe worst case"
        )
    limit_mib = math.floor(memory * Fraction(thousandths, 1000))
    share = Share(resource, thousandths, replicas, limit_mib, sharing.strategy)
    return ShareResult(share, tuple(notes))


# -- the policy ----------------------------------------------------------------------------------


def _summary(values: list[tuple[str, str]]) -> str:
    """One value when every container got the same, else `name=value` pairs."""
    distinct = {v for _, v in values}
    if len(distinct) == 1:
        return distinct.pop()
    return ",".join(f"{name}={value}" for name, value in values)


class ShareCache:
    """Memoizes compute_share per (resource, placement constraints) until any node changes.

    Pods of one workload share their placement, so most admissions are a dict lookup instead of
    a scan of every node (which would cost milliseconds per pod in a large cluster)."""

    MAX_ENTRIES = 1024

    def __init__(self, gpu: GpuConfig, headroom: Fraction) -> None:
        self._gpu = gpu
        self._headroom = headroom
        self._view: weakref.ref[ClusterView] | None = None
        self._generation: int | None = None
        self._results: dict[tuple[str, str], ShareResult | None] = {}

    def get(
        self, view: ClusterView, resource: str, spec: Mapping[str, Any], placement: Placement
    ) -> ShareResult | None:
        generation = view.nodes_generation()
        same_view = self._view is not None and self._view() is view
        if (
            not same_view
            or generation != self._generation
            or len(self._results) >= self.MAX_ENTRIES
        ):
            self._results.clear()
            self._view = weakref.ref(view)
            self._generation = generation
        # repr of JSON values is exact; two orderings of one selector just miss the cache.
        affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
        key = (
            resource,
            repr(
                (
                    spec.get("nodeName"),
                    spec.get("nodeSelector"),
                    affinity.get("requiredDuringSchedulingIgnoredDuringExecution"),
                )
            ),
        )
        if key not in self._results:
            candidates = placement.candidates(view)
            self._results[key] = compute_share(resource, candidates, self._headroom, self._gpu)
        return self._results[key]


def _claim_gpus_note(
    request: AdmissionRequest, patch: Patch, view: ClusterView, detector: GpuDetector, key: str
) -> None:
    """A pod that asks for a profile but gets its GPUs through ResourceClaims: say that the
    share is not set for those (it follows time-sliced extended resources only)."""
    if key not in request.annotations or not (request.object.get("spec") or {}).get(
        "resourceClaims"
    ):
        return
    gpus = detector.pod(request.object, request.namespace, view)
    for ref in iter_containers(request.object, RESOURCE_CONTAINER_LISTS):
        if gpus.of(ref).use is GpuUse.CLAIM:
            patch.warn(
                f"{ref.describe} gets its GPU from a ResourceClaim: {key} sets no share for it"
            )


def policies(config: Config) -> list[MutatingPolicy]:
    gpus = GpuResources.from_config(config.gpu)
    detector = GpuDetector.from_config(config)
    settings = config.memory_share
    headroom = Fraction(str(settings.headroom))
    profiles = build_profiles(settings.profiles)
    names = config.names
    deny_without_share = settings.on_no_candidates is NoCandidateBehaviour.DENY
    shares = ShareCache(config.gpu, headroom)

    def profile_rules(request: AdmissionRequest, patch: Patch) -> tuple[EnvRule, ...]:
        chosen = (request.annotations.get(names.gpu_app) or settings.default_profile).strip()
        if chosen in profiles:
            if chosen in PROFILE_WARNINGS and chosen not in settings.profiles:
                patch.warn(PROFILE_WARNINGS[chosen])
            return GENERIC_RULES + profiles[chosen]
        known = ", ".join(sorted(profiles))
        patch.warn(f'unknown {names.gpu_app} "{chosen}": applied generic only; known: {known}')
        return GENERIC_RULES

    def mutate(request: AdmissionRequest, patch: Patch, view: ClusterView) -> Verdict | None:
        pod = request.object
        if is_mirror_pod(pod):
            return None
        spec = pod.get("spec") or {}
        placement: Placement | None = None
        results: dict[str, ShareResult | None] = {}
        wanting = []
        for ref in iter_containers(pod, RESOURCE_CONTAINER_LISTS):
            shared = []
            for resource in gpus.gpu_names(ref.resource_names()):
                if resource not in results:
                    placement = placement or Placement.of(spec)
                    result = shares.get(view, resource, spec, placement)
                    results[resource] = result
                    for note in result.notes if result else ():
                        patch.warn(note)
                if results[resource] is not None:
                    shared.append(resource)
            if shared:
                wanting.append((ref, shared))
        if not wanting:
            # Claims were resolved for the visibility policy, which runs on the same path.
            _claim_gpus_note(request, patch, view, detector, names.gpu_app)
            return None
        rules = profile_rules(request, patch)
        fractions: list[tuple[str, str]] = []
        replicas: list[tuple[str, str]] = []
        strategies: list[tuple[str, str]] = []
        for ref, shared in wanting:
            # A container with two shared resources (rare) gets the smaller share: the safe one.
            outcomes = [r.share for r in (results[name] for name in shared) if r is not None]
            missing = [o for o in outcomes if isinstance(o, NoShare)]
            if missing:
                first = missing[0]
                if deny_without_share:
                    return Verdict.deny(
                        f"{ref.describe} requests {first.resource}, but {first.reason}, so its "
                        f"GPU memory share cannot be set; {first.advice}"
                    )
                patch.warn(f"{ref.describe}: memory share not set: {first.reason}")
                continue
            share = min((o for o in outcomes if isinstance(o, Share)), key=lambda s: s.thousandths)
            apply_env(ref, rules, share, patch)
            fractions.append((ref.name, share.fraction))
            replicas.append((ref.name, str(share.replicas)))
            strategies.append((ref.name, share.strategy))
        if fractions:
            patch.set_annotation(names.gpu_memory_fraction, _summary(fractions))
            patch.set_annotation(names.gpu_replicas, _summary(replicas))
            patch.set_annotation(names.gpu_sharing, _summary(strategies))
        return None

    return [MutatingPolicy("gpu-memory-share", Scope("Pod"), mutate)]
