"""GPU memory share: tell apps on a time-sliced GPU how much of its memory is theirs.

Time-slicing shares compute but not memory: every replica can allocate the whole GPU, and the
first greedy framework starves the rest. The replica count and memory per GPU come from the
gpu-feature-discovery labels of the nodes the pod may land on; the worst case among them (most
replicas, least memory) is the safe one. The share is written as plain env values, so
`$(GPU_MEMORY_FRACTION)` also works in args, in the form each framework reads (the profile).
"""

from __future__ import annotations

import math
import re
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpu_admission import names as n
from gpu_admission.cluster.view import ClusterView, NodeInfo
from gpu_admission.config import Config, NoCandidateBehaviour
from webhooks.patch import Patch
from webhooks.policies.containers import ContainerRef, iter_containers
from webhooks.policies.gpu_resources import GpuResources
from webhooks.policies.gpu_visibility import is_mirror_pod
from webhooks.policies.node_match import Placement
from webhooks.policies.quantity import is_positive
from webhooks.policy import MutatingPolicy, Scope
from webhooks.review import AdmissionRequest, Verdict

_COUNT = re.compile(r"[0-9]{1,9}")
RESOURCE_CONTAINER_LISTS = ("initContainers", "containers")  # ephemeral ones cannot ask for any


# -- the share ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Share:
    """One shared resource's memory share, computed over its candidate nodes."""

    resource: str
    thousandths: int  # the fraction, rounded down to 3 decimals
    replicas: int
    limit_mib: int

    @property
    def fraction(self) -> str:
        whole, part = divmod(self.thousandths, 1000)
        return f"{whole}.{part:03d}".rstrip("0").rstrip(".")


@dataclass(frozen=True, slots=True)
class NoShare:
    resource: str
    reason: str  # short: goes into a warning of at most 120 characters
    advice: str  # what to do, for the longer denial message


@dataclass(frozen=True, slots=True)
class ShareResult:
    share: Share | NoShare
    notes: tuple[str, ...] = ()  # warnings about the candidates (spread, unlabelled nodes)


def _count(value: str | None) -> int | None:
    return int(value) if value is not None and _COUNT.fullmatch(value) else None


def gpu_facts(node: NodeInfo, base: str) -> tuple[int, int] | None:
    """(replicas, memory MiB) from the node's gpu-feature-discovery labels, if both are usable."""
    replicas = _count(node.labels.get(base + n.GPU_REPLICAS_LABEL_SUFFIX))
    memory = _count(node.labels.get(base + n.GPU_MEMORY_LABEL_SUFFIX))
    if not replicas or not memory:
        return None
    return replicas, memory


def compute_share(
    resource: str, base: str, candidates: Iterable[NodeInfo], headroom: Fraction
) -> ShareResult:
    """The safe share of `resource` across the candidate nodes (those offering it)."""
    offering = [node for node in candidates if is_positive(node.allocatable.get(resource))]
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
    notes = []
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
    return ShareResult(Share(resource, thousandths, replicas, limit_mib), tuple(notes))


# -- profiles: which env each framework reads ----------------------------------------------------

ValueFn = Callable[[Share], str]


@dataclass(frozen=True, slots=True)
class EnvRule:
    """One env entry a profile writes. `merge_option` makes it an option merged into the user's
    comma-separated value (PyTorch's allocator config) instead of a whole value."""

    name: str
    value: ValueFn
    merge_option: str | None = None


GENERIC_RULES = (
    EnvRule(n.GPU_MEMORY_FRACTION, lambda s: s.fraction),
    EnvRule(n.GPU_SHARED_REPLICAS, lambda s: str(s.replicas)),
    EnvRule(n.GPU_MEMORY_LIMIT_MIB, lambda s: str(s.limit_mib)),
)
BUILTIN_PROFILES: dict[str, tuple[EnvRule, ...]] = {
    n.PROFILE_GENERIC: (),
    # Opt-in: older PyTorch refuses to start on an allocator key it does not know.
    n.PROFILE_PYTORCH: (
        EnvRule(
            n.PYTORCH_CUDA_ALLOC_CONF,
            lambda s: s.fraction,
            merge_option=n.PYTORCH_MEMORY_FRACTION_OPTION,
        ),
    ),
    n.PROFILE_JAX: (
        EnvRule(n.XLA_PYTHON_CLIENT_MEM_FRACTION, lambda s: s.fraction),
        EnvRule(n.XLA_CLIENT_MEM_FRACTION, lambda s: s.fraction),
    ),
    # TensorFlow takes a byte limit only in code; growth at least stops it grabbing everything.
    n.PROFILE_TENSORFLOW: (EnvRule(n.TF_FORCE_GPU_ALLOW_GROWTH, lambda s: "true"),),
}


def _template_rule(name: str, template: str) -> EnvRule:
    return EnvRule(
        name,
        lambda s: template.format(
            fraction=s.fraction, replicas=str(s.replicas), limit_mib=str(s.limit_mib)
        ),
    )


def build_profiles(custom: Mapping[str, Mapping[str, str]]) -> dict[str, tuple[EnvRule, ...]]:
    """Built-in profiles plus the configured ones (a configured name replaces a built-in)."""
    profiles = dict(BUILTIN_PROFILES)
    for profile, env in custom.items():
        profiles[profile] = tuple(_template_rule(k, v) for k, v in env.items())
    return profiles


# -- env: merging with what the user set ---------------------------------------------------------


def option_value(conf: str, key: str) -> str | None:
    """The value of a top-level `key:value` option in a PyTorch allocator config string, which
    may hold bracketed lists (`roundup_power2_divisions:[256:1,512:2]`)."""
    depth, start = 0, 0
    for i, char in enumerate(conf + ","):
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(depth - 1, 0)
        elif char == "," and depth == 0:
            option_key, _, option_val = conf[start:i].partition(":")
            if option_key.strip() == key:
                return option_val.strip()
            start = i + 1
    return None


def with_option(conf: str, key: str, value: str) -> str:
    rest = conf.strip().rstrip(",").strip()
    return f"{rest},{key}:{value}" if rest else f"{key}:{value}"


@dataclass(frozen=True, slots=True)
class EnvChange:
    """What one rule does to one container: add, replace at an index, or keep the user's value
    (`kept` then says what was kept, for the warning)."""

    rule: EnvRule
    value: str
    replace_index: int | None = None
    kept: str | None = None


def plan_env(env: list[Any], rule: EnvRule, share: Share) -> EnvChange | None:
    """None when the container already has exactly what this rule writes (reinvocation)."""
    wanted = rule.value(share)
    index = next(
        (i for i in range(len(env) - 1, -1, -1) if (env[i] or {}).get("name") == rule.name),
        None,
    )  # Kubernetes uses the last entry of a name
    if index is None:
        if rule.merge_option is not None:
            return EnvChange(rule, f"{rule.merge_option}:{wanted}")
        return EnvChange(rule, wanted)
    entry = env[index]
    if entry.get("valueFrom") is not None:
        return EnvChange(rule, wanted, kept=f"{rule.name} (valueFrom)")
    current = entry.get("value") or ""
    if rule.merge_option is None:
        return None if current == wanted else EnvChange(rule, wanted, kept=rule.name)
    existing = option_value(current, rule.merge_option)
    if existing is None:
        return EnvChange(rule, with_option(current, rule.merge_option, wanted), index)
    if existing == wanted:
        return None
    return EnvChange(rule, wanted, kept=f"{rule.merge_option} in {rule.name}")


def apply_env(ref: ContainerRef, rules: Iterable[EnvRule], share: Share, patch: Patch) -> None:
    env = list(ref.container.get("env") or [])
    changes = [c for c in (plan_env(env, rule, share) for rule in rules) if c is not None]
    # Replacements first: their indexes are the current ones.
    for change in changes:
        if change.replace_index is not None:
            entry = {"name": change.rule.name, "value": change.value}
            patch.replace(f"{ref.path}/env/{change.replace_index}", entry)
    # New entries go first in env, so the user's own entries may use $(GPU_MEMORY_FRACTION).
    added = [
        {"name": c.rule.name, "value": c.value}
        for c in changes
        if c.replace_index is None and c.kept is None
    ]
    if added and ref.container.get("env") is None:
        if "env" in ref.container:  # env: null
            patch.replace(f"{ref.path}/env", added)
        else:
            patch.add(f"{ref.path}/env", added)
    else:
        for position, entry in enumerate(added):
            patch.add(f"{ref.path}/env/{position}", entry)
    for change in changes:
        if change.kept is not None:
            patch.warn(f"{ref.describe}: kept your {change.kept}, not the computed {change.value}")


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

    def __init__(self, base_name: Callable[[str], str], headroom: Fraction) -> None:
        self._base_name = base_name
        self._headroom = headroom
        self._view: weakref.ref[ClusterView] | None = None
        self._generation: int | None = None
        self._results: dict[tuple[str, str], ShareResult] = {}

    def get(
        self, view: ClusterView, resource: str, spec: Mapping[str, Any], placement: Placement
    ) -> ShareResult:
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
        result = self._results.get(key)
        if result is None:
            base = self._base_name(resource)
            candidates = placement.candidates(view)
            result = compute_share(resource, base, candidates, self._headroom)
            self._results[key] = result
        return result


def policies(config: Config) -> list[MutatingPolicy]:
    gpus = GpuResources.from_config(config.gpu)
    settings = config.memory_share
    headroom = Fraction(str(settings.headroom))
    profiles = build_profiles(settings.profiles)
    names = config.names
    deny_without_share = settings.on_no_candidates is NoCandidateBehaviour.DENY
    shares = ShareCache(config.gpu.base_resource_name, headroom)

    def profile_rules(request: AdmissionRequest, patch: Patch) -> tuple[EnvRule, ...]:
        chosen = (request.annotations.get(names.gpu_app) or settings.default_profile).strip()
        if chosen in profiles:
            return GENERIC_RULES + profiles[chosen]
        known = ", ".join(sorted(profiles))
        patch.warn(f'unknown {names.gpu_app} "{chosen}": applied generic only; known: {known}')
        return GENERIC_RULES

    def mutate(request: AdmissionRequest, patch: Patch, view: ClusterView) -> Verdict | None:
        pod = request.object
        if is_mirror_pod(pod):
            return None
        wanting = [
            (ref, shared)
            for ref in iter_containers(pod, RESOURCE_CONTAINER_LISTS)
            if (shared := gpus.shared_names(ref.resource_names()))
        ]
        if not wanting:
            return None
        spec = pod.get("spec") or {}
        placement = Placement.of(spec)
        results: dict[str, ShareResult] = {}
        rules = profile_rules(request, patch)
        fractions: list[tuple[str, str]] = []
        replicas: list[tuple[str, str]] = []
        for ref, shared in wanting:
            # A container with two shared resources (rare) gets the smaller share: the safe one.
            for resource in shared:
                if resource not in results:
                    result = shares.get(view, resource, spec, placement)
                    results[resource] = result
                    for note in result.notes:
                        patch.warn(note)
            outcomes = [results[r].share for r in shared]
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
        if fractions:
            patch.set_annotation(names.gpu_memory_fraction, _summary(fractions))
            patch.set_annotation(names.gpu_replicas, _summary(replicas))
        return None

    return [MutatingPolicy("gpu-memory-share", Scope("Pod"), mutate)]
