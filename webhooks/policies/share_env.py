"""The env a GPU memory share becomes: per framework (the profile), merged with the user's own.

Each profile is a list of env rules, checked against the framework itself:
- `generic` (always): `GPU_MEMORY_FRACTION`, `GPU_SHARED_REPLICAS`, `GPU_MEMORY_LIMIT_MIB`.
- `pytorch`: `per_process_memory_fraction` merged into `PYTORCH_CUDA_ALLOC_CONF` (opt-in: older
  PyTorch refuses to start on an allocator key it does not know).
- `jax`: `XLA_PYTHON_CLIENT_MEM_FRACTION` alone. Every jaxlib reads it; newer ones also read
  `XLA_CLIENT_MEM_FRACTION` and refuse to start their GPU backend when both are set (they then fall
  back to the CPU: jaxlib's `generate_pjrt_gpu_plugin_options` raises "XLA_CLIENT_MEM_FRACTION is
  specified together with XLA_PYTHON_CLIENT_MEM_FRACTION"). So one name is written, and none when
  the user set either.
- `tensorflow`: `TF_FORCE_GPU_ALLOW_GROWTH=true`, so TensorFlow starts without taking the whole GPU.
  TensorFlow reads no memory cap from its environment: the app must apply `GPU_MEMORY_LIMIT_MIB`
  itself, and the pod is told so in a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_admission import names as n
from webhooks.core.patch import Patch
from webhooks.policies.containers import ContainerRef


@dataclass(frozen=True, slots=True)
class Share:
    """One shared resource's memory share, computed over its candidate nodes."""

    resource: str
    thousandths: int  # the fraction, rounded down to 3 decimals
    replicas: int
    limit_mib: int
    strategy: str = n.SHARING_TIME_SLICING  # time-slicing, mps, or both ("mps,time-slicing")
    fraction: str = field(init=False)  # as env values carry it: "0.237"

    def __post_init__(self) -> None:
        # Once per share (shares are cached), not once per env value of every pod.
        whole, part = divmod(self.thousandths, 1000)
        object.__setattr__(self, "fraction", f"{whole}.{part:03d}".rstrip("0").rstrip("."))


ValueFn = Callable[[Share], str]


@dataclass(frozen=True, slots=True)
class EnvRule:
    """One env entry a profile writes. `merge_option` makes it an option merged into the user's
    comma-separated value (PyTorch's allocator config) instead of a whole value. `alternatives`
    are other names the framework reads for the same setting: when the user set one of them,
    the rule writes nothing (the framework may refuse both at once)."""

    name: str
    value: ValueFn
    merge_option: str | None = None
    alternatives: tuple[str, ...] = ()


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
    # The name every jaxlib reads; never next to the newer one (see the module docstring).
    n.PROFILE_JAX: (
        EnvRule(
            n.XLA_PYTHON_CLIENT_MEM_FRACTION,
            lambda s: s.fraction,
            alternatives=(n.XLA_CLIENT_MEM_FRACTION,),
        ),
    ),
    # TensorFlow takes a byte limit only in code; growth at least stops it grabbing everything.
    n.PROFILE_TENSORFLOW: (EnvRule(n.TF_FORCE_GPU_ALLOW_GROWTH, lambda s: "true"),),
}


# Said at admission when the profile is applied: what its env cannot do by itself.
PROFILE_WARNINGS = {
    n.PROFILE_TENSORFLOW: (
        "tensorflow takes no GPU memory cap from env: apply GPU_MEMORY_LIMIT_MIB with "
        "tf.config.set_logical_device_configuration"
    ),
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
    warning: str | None = None  # instead of the usual "kept your ..." one


def _alternative_kept(env: list[Any], rule: EnvRule, wanted: str) -> EnvChange | None:
    """The user set another name for this setting: keep it, add nothing, and say so; when they
    also set the rule's own name, say that the framework refuses the pair."""
    names = {(e or {}).get("name") for e in env}
    alternative = next((a for a in rule.alternatives if a in names), None)
    if alternative is None:
        return None
    if rule.name in names:
        warning = f"sets {rule.name} and {alternative}: the framework refuses both; keep one"
    else:
        warning = f"kept your {alternative} (computed {wanted}); no {rule.name} added"
    return EnvChange(rule, wanted, kept=alternative, warning=warning)


def plan_env(env: list[Any], rule: EnvRule, share: Share) -> EnvChange | None:
    """None when the container already has exactly what this rule writes (reinvocation)."""
    wanted = rule.value(share)
    if rule.alternatives:
        kept = _alternative_kept(env, rule, wanted)
        if kept is not None:
            return kept
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
        if change.warning is not None:
            patch.warn(f"{ref.describe}: {change.warning}")
        elif change.kept is not None:
            patch.warn(f"{ref.describe}: kept your {change.kept}, not the computed {change.value}")
