"""PATCH bodies: JSON Patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch.

Strategic merge follows k8s.io/apimachinery/pkg/util/strategicpatch for the merge keys of the kinds
served here. The merge key is chosen by list field name, which is unambiguous for these kinds.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch

from .errors import StatusError, bad_request

# list field name -> merge key (patchMergeKey in the API types).
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "schedulingGates": "name",
    "resourceClaims": "name",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "conditions": "type",
    "addresses": "type",
    "ports": "containerPort",
    "ownerReferences": "uid",
    "webhooks": "name",
    "topologySpreadConstraints": "topologyKey",
}
# Lists of scalars with patchStrategy "merge": union instead of replace.
MERGED_SCALAR_LISTS = {"finalizers"}

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _invalid_patch(message: str) -> StatusError:
    return StatusError(422, "Invalid", message)


def _strategic_map(original: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any] | None:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive is not None:
        raise bad_request(f"Unknown patch type: {directive!r}")
    result = copy.deepcopy(original)
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list):
                result[field] = [item for item in result[field] if item not in value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        current = result.get(key)
        if isinstance(value, dict):
            merged = _strategic_map(current if isinstance(current, dict) else {}, value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _strategic_list(key, current if isinstance(current, list) else [], value)
        else:
            result[key] = value
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _strategic_list(field: str, original: list[Any], patch: list[Any]) -> list[Any]:
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    if field in MERGED_SCALAR_LISTS:
        result = list(original)
        result.extend(item for item in patch if item not in result)
        return result
    key = MERGE_KEYS.get(field)
    if key is None:
        return copy.deepcopy(patch)
    result = copy.deepcopy(original)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise bad_request(f"map: {item!r} does not contain declared merge key: {key}")
        index = next(
            (i for i, existing in enumerate(result) if existing.get(key) == item[key]), None
        )
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
            continue
        if index is None:
            result.append({k: v for k, v in copy.deepcopy(item).items() if v is not None})
        else:
            merged = _strategic_map(result[index], item)
            if merged is None:
                result.pop(index)
            else:
                result[index] = merged
    return result


def strategic_merge_patch(original: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    merged = _strategic_map(original, patch)
    return merged if merged is not None else {}


def apply_patch(content_type: str, original: dict[str, Any], body: bytes) -> dict[str, Any]:
    """Apply a PATCH body of the given content type to ``original``; returns a new object."""
    content_type = content_type.split(";")[0].strip().lower()
    try:
        patch = json.loads(body or b"null")
    except ValueError as exc:
        raise bad_request(f"error decoding patch: {exc}") from exc
    if content_type == JSON_PATCH:
        if not isinstance(patch, list):
            raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        try:
            return jsonpatch.apply_patch(original, patch)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise _invalid_patch(
                f"the server rejected our request due to an error in our request: {exc}"
            ) from exc
    if not isinstance(patch, dict):
        raise bad_request("json: cannot unmarshal non-object into Go value of type map")
    if content_type == MERGE_PATCH:
        return merge_patch(original, patch)
    if content_type == STRATEGIC_MERGE_PATCH:
        return strategic_merge_patch(original, patch)
    raise StatusError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_MERGE_PATCH}",
    )
