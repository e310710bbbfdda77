"""CEL text for the policies kube-apiserver runs: string literals, shell-style resource-name
patterns as RE2, and the GPU tests every generated expression shares, spelled out from the
configuration so that the API server's verdicts are the Python policies' (tests/real_api).

Kubernetes' CEL has no bindings extension, so a test over a container is text to be placed
where the container variable `c` (or another name) is in scope.
"""

from __future__ import annotations

import fnmatch

from gpu_admission.config.model import GpuConfig
from gpu_admission.names import NVIDIA_VISIBLE_DEVICES

# -- CEL text --------------------------------------------------------------------------------


def cel_string(text: str) -> str:
    """A CEL string literal."""
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def _class_end(pattern: str, start: int) -> int:
    """Where the character class opened at `start` closes, scanned as fnmatch scans it (a `!`,
    then a `]` first, are part of the class); -1 when it does not close."""
    j = start + 1
    if j < len(pattern) and pattern[j] == "!":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    end = pattern.find("]", j)
    return end


def _class_regex(token: str) -> str:
    """One `[...]` as fnmatch reads it (reversed ranges dropped, `!` negating), in RE2 terms:
    Python's own translation, whose class syntax RE2 shares, except the never-matching `(?!)`."""
    translated = fnmatch.translate(token).removeprefix("(?s:").removesuffix(")\\Z")
    return r"\b\B" if translated == "(?!)" else translated


def glob_regex(pattern: str) -> str:
    """A shell-style pattern as an anchored RE2 expression (`matches()` is RE2), matching what
    fnmatchcase matches."""
    out = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "[" and (end := _class_end(pattern, i)) >= 0:
            out.append(_class_regex(pattern[i : end + 1]))
            i = end
        elif char.isalnum() or char in "_/-":
            out.append(char)
        else:
            out.append("\\" + char)
        i += 1
    return "^" + "".join(out) + "$"


def _glob_test(var: str, pattern: str) -> str:
    """CEL true when `var` matches the shell-style pattern, as fnmatchcase does."""
    specials = set("*?[")
    if not specials & set(pattern):
        return f"{var} == {cel_string(pattern)}"
    head, star, tail = pattern.partition("*")
    if star and not specials & set(head + tail) and not tail:
        return f"{var}.startsWith({cel_string(head)})"
    return f"{var}.matches({cel_string(glob_regex(pattern))})"


def is_gpu_test(var: str, gpu: GpuConfig) -> str:
    return "(" + " || ".join(_glob_test(var, p) for p in gpu.resource_patterns) + ")"


def is_shared_test(var: str, gpu: GpuConfig) -> str:
    ends = " || ".join(f"{var}.endsWith({cel_string(s)})" for s in gpu.shared_suffixes)
    return f"({is_gpu_test(var, gpu)} && ({ends}))"


def base_name(var: str, gpu: GpuConfig) -> str:
    """`GpuConfig.base_resource_name` in CEL: the first suffix that matches is taken off."""
    text = var
    for suffix in reversed(gpu.shared_suffixes):
        cut = f"{var}.substring(0, size({var}) - {len(suffix)})"
        text = f"({var}.endsWith({cel_string(suffix)}) ? {cut} : {text})"
    return text


def requests_gpu_test(gpu: GpuConfig, companions: bool = True) -> str:
    """CEL true when the container `c` names a GPU resource in its requests or limits, or (with
    `companions`) one that asks for a GPU without counting it (`gpu.companion_resources`;
    `GpuResources.requests_gpu`)."""
    return _names_test([*gpu.resource_patterns, *(gpu.companion_resources if companions else ())])


def names_companion_test(gpu: GpuConfig) -> str:
    """CEL true when the container `c` names a companion resource (`gpu.companion_resources`) in
    its requests or limits; false where none is configured."""
    return _names_test(list(gpu.companion_resources)) if gpu.companion_resources else "false"


def _names_test(patterns: list[str]) -> str:
    named = "(" + " || ".join(_glob_test("n", p) for p in patterns) + ")"
    return (
        "has(c.resources) && ("
        f"(has(c.resources.limits) && c.resources.limits.exists(n, {named})) || "
        f"(has(c.resources.requests) && c.resources.requests.exists(n, {named})))"
    )


def scheduler_gives_test(gpu: GpuConfig) -> str:
    """CEL true when the container `c` has its NVIDIA_VISIBLE_DEVICES from a scheduler of
    `gpu.schedulers` for this pod (`gpu_admission.gpus.scheduler_gpus.scheduler_gives`)."""
    annotations = "object.metadata.annotations"
    name = cel_string(NVIDIA_VISIBLE_DEVICES)
    tests = []
    for scheduler in gpu.schedulers:
        marked = " || ".join(
            f"{cel_string(a)} in {annotations}" for a in scheduler.mark_annotations
        )
        maps = cel_string(scheduler.config_map_annotation)
        last = "l[size(l) - 1]"
        source = f"{last}.valueFrom.configMapKeyRef"
        tests.append(
            f"(object.spec.schedulerName == {cel_string(scheduler.scheduler_name)} && "
            f"!has(object.spec.nodeName) && has({annotations}) && ({marked}) && "
            f"{maps} in {annotations} && has(c.env) && "
            f"[c.env.filter(e, e.name == {name})].all(l, size(l) > 0 && "
            f"has({last}.valueFrom) && has({source}) && {source}.key == {name} && "
            f"{source}.name.startsWith({annotations}[{maps}] + '-')))"
        )
    return f"({' || '.join(tests)})" if tests else "false"
