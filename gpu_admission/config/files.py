"""Where the configuration comes from on disk: one file, or a folder of layers.

A folder is how the ConfigMap reaches the programs (each key a file, `--config=/etc/gpu-admission`):
`config.yaml`, the settings the project ships, first; then each other `*.yaml`, in name order,
the layers the kustomize components add (`audit-mode.yaml`, `policy-reports.yaml`, ...); then
`settings.yaml`, the user's own, last. Each layer is merged over the ones before it mapping by
mapping: a key it names replaces that key alone, keys it does not name keep their value. Hidden
entries (a mounted ConfigMap's `..data`) are not layers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SHIPPED = "config.yaml"
USERS = "settings.yaml"


class ConfigFileError(Exception):
    """A layer that cannot be read or is not a mapping; the message names the file."""


@dataclass(frozen=True)
class Layer:
    source: str  # the file's path, as messages name it
    data: dict[str, Any]


def layer_paths(path: Path) -> list[Path]:
    """The files `path` stands for, in the order they are merged."""
    if not path.is_dir():
        return [path]
    files = sorted(p for p in path.iterdir() if p.suffix == ".yaml" and not p.name.startswith("."))
    files = [p for p in files if p.is_file()]
    if not files:
        raise ConfigFileError(f"config folder {path} holds no *.yaml file")
    first = [p for p in files if p.name == SHIPPED]
    last = [p for p in files if p.name == USERS]
    return first + [p for p in files if p.name not in (SHIPPED, USERS)] + last


def read_layer(path: Path) -> Layer:
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise ConfigFileError(f"cannot read config file {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"config file {path} is not valid YAML: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ConfigFileError(f"config file {path} must hold a mapping at the top level")
    return Layer(str(path), loaded)


def read_layers(path: Path) -> list[Layer]:
    return [read_layer(p) for p in layer_paths(path)]


def merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` over `base`, mapping by mapping."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def source_of(location: Sequence[Any], layers: Sequence[Layer]) -> str | None:
    """The last layer that names the field at `location` (pydantic's error path), or the one
    that names its nearest parent: where a person goes to mend it."""
    for depth in range(len(location), 0, -1):
        for layer in reversed(layers):
            node: Any = layer.data
            for part in location[:depth]:
                if not isinstance(node, Mapping) or part not in node:
                    break
                node = node[part]
            else:
                return layer.source
    return None
