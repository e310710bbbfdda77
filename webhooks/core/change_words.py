"""JSON Patch operations in words, for people: what an audit-mode policy would have changed, and
what `gpu-admission audit` finds. Never a Secret's value: env from Secrets is by reference."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

_CONTAINER = re.compile(r"^/spec/(initContainers|containers|ephemeralContainers)/(\d+)(/.*)?$")


def _where(path: str, obj: Mapping[str, Any]) -> str:
    match = _CONTAINER.match(path)
    if match is None:
        return path
    lst, index, rest = match.group(1), int(match.group(2)), match.group(3) or ""
    containers = (obj.get("spec") or {}).get(lst) or []
    name = containers[index].get("name", index) if index < len(containers) else index
    field = rest.lstrip("/").split("/")[0] or "container"
    return f'{lst[:-1].replace("initC", "init c")} "{name}" {field}'


def _value(value: Any) -> str:
    if isinstance(value, Mapping) and "name" in value:
        shown = value.get("value")
        return f"{value['name']}={shown}" if isinstance(shown, str) else str(value["name"])
    if isinstance(value, list):
        return ", ".join(_value(v) for v in value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items() if isinstance(v, str))
    return str(value) if isinstance(value, str) else ""


def describe_changes(ops: Iterable[Mapping[str, Any]], obj: Mapping[str, Any]) -> str:
    """JSON Patch operations in words: where, and what (env names and values, never a Secret's
    value: env from Secrets is by reference)."""
    parts = []
    for op in ops:
        what = _value(op.get("value"))
        parts.append(
            f"{op.get('op')} {_where(str(op.get('path')), obj)}" + (f" ({what})" if what else "")
        )
    return "; ".join(dict.fromkeys(parts))
