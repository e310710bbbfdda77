"""Applying a mutating webhook's JSON Patch, failing with kube-apiserver's messages.

kube-apiserver decodes the patch first (a failure there is a webhook *call* error, which the
webhook's failurePolicy may ignore) and then applies it (a failure there is an internal error
that no failurePolicy can ignore). The apply messages follow evanphx/json-patch, which
kube-apiserver uses.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import jsonpointer


class UndecodablePatch(Exception):
    """The patch bytes are not a JSON Patch document."""


class PatchDoesNotApply(Exception):
    """The patch decoded but one of its operations does not apply to the object."""


def decode_patch(raw: bytes) -> list[dict[str, Any]]:
    try:
        operations = json.loads(raw)
    except ValueError as error:
        raise UndecodablePatch(f"invalid character in patch: {error}") from None
    if not isinstance(operations, list) or not all(isinstance(op, dict) for op in operations):
        raise UndecodablePatch(
            "json: cannot unmarshal " + type(operations).__name__ + " into Go value of type "
            "jsonpatch.Patch"
        )
    return operations


def _exists(document: Any, pointer: str) -> bool:
    try:
        jsonpointer.resolve_pointer(document, pointer)
    except (jsonpointer.JsonPointerException, TypeError):
        return False
    return True


def _parent(pointer: str) -> str:
    return pointer.rsplit("/", 1)[0]


def _failure_message(document: Any, operation: dict[str, Any]) -> str:
    op = operation.get("op", "")
    path = str(operation.get("path", ""))
    missing = "missing value"
    if op == "test":
        return f"testing value {path} failed: test failed"
    if op in ("move", "copy"):
        source = operation.get("from")
        return f"{op} operation does not apply: doc is missing from path: {source}: {missing}"
    if op not in ("add", "remove", "replace"):
        return f"Unexpected kind: {op}"
    if not _exists(document, _parent(path)):
        return f'{op} operation does not apply: doc is missing path: "{path}": {missing}'
    parent = jsonpointer.resolve_pointer(document, _parent(path))
    key = path.rsplit("/", 1)[-1]
    if isinstance(parent, list):
        return f"Unable to access invalid index: {key}: invalid index referenced"
    if op == "remove":
        return f"Unable to remove nonexistent key: {key}: {missing}"
    return f"{op} operation does not apply: doc is missing key: {path}: {missing}"


def apply_patch(document: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply operations one by one so a failure names the operation that did not apply."""
    current: Any = copy.deepcopy(document)
    for operation in operations:
        try:
            current = jsonpatch.JsonPatch([operation]).apply(current, in_place=False)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError):
            raise PatchDoesNotApply(_failure_message(current, operation)) from None
    if not isinstance(current, dict):
        raise PatchDoesNotApply("couldn't get version/kind; json parse error: not an object")
    return current
