"""A JSON Patch recorded against the object it changes.

Each operation is applied to the working object as it is recorded, so later operations (from the
same policy or the next one) see earlier ones, and the recorded list applies cleanly, in order, to
the object the API server sent. Patches are built from what changed; whole objects are never diffed.
"""

from __future__ import annotations

from typing import Any


def escape(token: str) -> str:
    """Escape one JSON Pointer reference token (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def _unescape(token: str) -> str:
    if "~" not in token:  # the common case, on the hot path
        return token
    return token.replace("~1", "/").replace("~0", "~")


def _detached(value: Any) -> Any:
    """The working object gets its own copy of containers, so later operations on it never
    change the value an earlier operation recorded. Values are JSON (dicts, lists, scalars), so
    a plain recursive copy does; it is several times faster than copy.deepcopy on the hot path."""
    if isinstance(value, dict):
        return {key: _detached(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_detached(item) for item in value]
    return value


class PatchConflict(Exception):
    """An operation that cannot apply to the working object: a bug in the policy that made it."""


class Patch:
    """Records JSON Patch operations and applies them to `obj` in place."""

    __slots__ = ("notices", "obj", "ops", "warnings")

    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj
        self.ops: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self.notices: dict[str, int] = {}  # events worth a metric, by name

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def notice(self, name: str) -> None:
        """Count an event the service exposes as a metric (a claim that could not be resolved)."""
        self.notices[name] = self.notices.get(name, 0) + 1

    # -- low level --------------------------------------------------------------------------

    def _parent(self, path: str) -> tuple[Any, str]:
        tokens = path.split("/")[1:]
        if not tokens:
            raise PatchConflict("the whole object cannot be patched")
        node: Any = self.obj
        for raw in tokens[:-1]:
            token = _unescape(raw)
            try:
                node = node[int(token)] if isinstance(node, list) else node[token]
            except (KeyError, IndexError, ValueError, TypeError) as exc:
                raise PatchConflict(f"path {path} does not exist") from exc
        return node, _unescape(tokens[-1])

    def get(self, path: str) -> Any:
        """The value at `path` in the working object."""
        parent, key = self._parent(path)
        try:
            return parent[int(key)] if isinstance(parent, list) else parent[key]
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise PatchConflict(f"path {path} does not exist") from exc

    def add(self, path: str, value: Any) -> None:
        parent, key = self._parent(path)
        recorded, value = value, _detached(value)
        if isinstance(parent, list):
            if key == "-":
                parent.append(value)
            else:
                parent.insert(int(key), value)
        elif isinstance(parent, dict):
            parent[key] = value
        else:
            raise PatchConflict(f"cannot add at {path}")
        self.ops.append({"op": "add", "path": path, "value": recorded})

    def replace(self, path: str, value: Any) -> None:
        parent, key = self._parent(path)
        recorded, value = value, _detached(value)
        try:
            if isinstance(parent, list):
                parent[int(key)] = value
            elif key in parent:
                parent[key] = value
            else:
                raise KeyError(key)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise PatchConflict(f"nothing to replace at {path}") from exc
        self.ops.append({"op": "replace", "path": path, "value": recorded})

    def remove(self, path: str) -> None:
        parent, key = self._parent(path)
        try:
            if isinstance(parent, list):
                del parent[int(key)]
            else:
                del parent[key]
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise PatchConflict(f"nothing to remove at {path}") from exc
        self.ops.append({"op": "remove", "path": path})

    # -- helpers for the shapes policies change ---------------------------------------------

    def ensure_object(self, path: str) -> dict[str, Any]:
        """Return the mapping at `path`, adding `{}` (and missing parents) if absent or null."""
        node: Any = self.obj
        built = ""
        for token in path.split("/")[1:]:
            key = _unescape(token)
            built = f"{built}/{token}"
            child = node.get(key) if isinstance(node, dict) else None
            if child is None:
                self.add(built, {})
                child = node[key]
            node = child
        return node

    def set_map_entry(self, map_path: str, key: str, value: str) -> None:
        """Set one key of a string map (labels, annotations); no operation if already so."""
        mapping = self.ensure_object(map_path)
        if mapping.get(key) == value:
            return
        path = f"{map_path}/{escape(key)}"
        if key in mapping:
            self.replace(path, value)
        else:
            self.add(path, value)

    def set_annotation(self, key: str, value: str) -> None:
        self.set_map_entry("/metadata/annotations", key, value)

    def set_label(self, key: str, value: str) -> None:
        self.set_map_entry("/metadata/labels", key, value)

    def append(self, list_path: str, value: Any) -> None:
        """Append to the list at `list_path`, creating the list if it is absent or null."""
        parent, key = self._parent(list_path)
        current = parent.get(key) if isinstance(parent, dict) else None
        if current is None:
            if isinstance(parent, dict) and key in parent:
                self.replace(list_path, [value])
            else:
                self.add(list_path, [value])
        else:
            self.add(f"{list_path}/-", value)

    def set_env(self, container_path: str, entry: dict[str, Any]) -> None:
        """Give the container exactly this env entry: replace every entry of the same name
        (the last one wins in Kubernetes, so duplicates are collapsed), or append it."""
        container = self.get(container_path)
        env = container.get("env") or []
        name = entry["name"]
        indexes = [i for i, item in enumerate(env) if item.get("name") == name]
        if indexes and all(env[i] == entry for i in indexes) and len(indexes) == 1:
            return
        for i in reversed(indexes[1:]):
            self.remove(f"{container_path}/env/{i}")
        if indexes:
            self.replace(f"{container_path}/env/{indexes[0]}", entry)
        else:
            self.append(f"{container_path}/env", entry)
