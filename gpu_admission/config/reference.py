"""The configuration reference (docs/configuration.md), generated from the configuration model.

Every key with its type, limits, default, environment variable and description (the field's
docstring), then every default as one YAML file. A test fails when the document and the model
drift apart; regenerate with:

    python -m gpu_admission.config.reference > docs/configuration.md
"""

from __future__ import annotations

import enum
import json
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from gpu_admission.config.model import ENV_PREFIX, Config

INTRODUCTION = """\
# Configuration

<!-- Generated from gpu_admission/config/model.py by
     `python -m gpu_admission.config.reference > docs/configuration.md`; do not edit. -->

One YAML file, or a folder of them (`--config`), then `GPU_ADMISSION_*` environment variables,
then flags; later sources win, each merged over the ones before mapping by mapping, so a source
only needs the keys it changes. In the cluster the programs read the folder the ConfigMap
`gpu-admission` is mounted at (`--config=/etc/gpu-admission`): `config.yaml`, the settings the
base ships, first; then each component's layer (`cert-manager.yaml`, `policy-reports.yaml`,
`audit-mode.yaml`, ...) in name order; then `settings.yaml`, your own, last
([install.md](install.md)). Every program (`serve`, `controller`, `gpu-usage`, and the commands
`review`, `audit`, `admission-policy`) reads the same configuration.

- Environment variables: `GPU_ADMISSION_` plus the key's path in capitals, `__` between nested
  keys; values are read as YAML, so lists and maps work:
  `GPU_ADMISSION_MEMORY_SHARE__HEADROOM=0.9`,
  `GPU_ADMISSION_GPU__RESOURCE_PATTERNS='[nvidia.com/gpu, nvidia.com/mig-*]'`,
  `GPU_ADMISSION_SERVER__FAILURE_MODES='{/mutate/pods: allow}'`. The variables the kubelet
  makes from Services named `gpu-admission` or `gpu-admission-*` (`GPU_ADMISSION_SERVICE_HOST`,
  `GPU_ADMISSION_PORT_443_TCP`, ...: name and value of the kubelet's shape) are passed over; any
  other `GPU_ADMISSION_*` variable must name a key, or start-up stops naming the variable
  (`GPU_ADMISSION_MEMORY_SHAR__HEADROOM: no setting 'memory_shar'; did you mean
  memory_share?`). Values are never repeated in messages.
- Flags: `--host`, `--port`, `--metrics-port`, `--log-level`, `--log-format` set the `server`
  keys of the same names, `--cert-dir` sets `certs.cert_dir`, `--kubeconfig` sets `kubeconfig`.
  A flag that is not given overrides nothing.
- Unknown keys and bad values stop start-up (exit status 2) with a message naming the key and,
  from a folder, the file that set it: `invalid configuration (/etc/gpu-admission/config.yaml,
  /etc/gpu-admission/settings.yaml): audit.intervall: Extra inputs are not permitted (set in
  /etc/gpu-admission/settings.yaml)`.
"""

_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean", Path: "path"}
_BOUNDS = (
    (annotated_types.Ge, "ge", "≥"),
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Le, "le", "≤"),
    (annotated_types.Lt, "lt", "<"),
)


def type_name(annotation: Any) -> str:
    """A reader's name for a field's type: `integer`, `list of string`, `one of a, b`..."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        named = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(named) + (" or null" if type(None) in args else "")
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin is list:
        return f"list of {type_name(args[0])}"
    if origin is dict:
        return f"map of {type_name(args[0])} to {type_name(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(f"`{m.value}`" for m in annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return _SCALARS.get(annotation, getattr(annotation, "__name__", str(annotation)))


def limits(field: FieldInfo) -> str:
    found = []
    for constraint in field.metadata:
        for kind, attribute, symbol in _BOUNDS:
            if isinstance(constraint, kind):
                found.append(f"{symbol} {getattr(constraint, attribute)}")
    return ", ".join(found)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(value: Any) -> str:
    if isinstance(value, BaseModel):
        return "(section)"
    dumped = value.value if isinstance(value, enum.Enum) else value
    if isinstance(dumped, list):
        dumped = [v.model_dump(mode="json") if isinstance(v, BaseModel) else v for v in dumped]
    if isinstance(dumped, Path):
        dumped = str(dumped)
    return f"`{json.dumps(dumped)}`"


def sections(
    model: BaseModel, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], list[list[str]]]]:
    """(section path, its rows) for `model` and each nested section, depth first."""
    rows: list[list[str]] = []
    nested: list[tuple[tuple[str, ...], BaseModel]] = []
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        key = (*path, name)
        kind = type_name(field.annotation)
        bound = limits(field)
        rows.append(
            [
                f"`{'.'.join(key)}`",
                _cell(kind + (f" ({bound})" if bound else "")),
                _default(value),
                f"`{ENV_PREFIX}{'__'.join(key).upper()}`",
                _cell(field.description or ""),
            ]
        )
        if isinstance(value, BaseModel):
            nested.append((key, value))
    yield path, rows
    for key, value in nested:
        yield from sections(value, key)


def missing_descriptions(model: BaseModel | None = None) -> list[str]:
    """Keys with no docstring: the reference would have an empty description for them."""
    return [row[0] for _, rows in sections(model or Config()) for row in rows if not row[4]]


def render() -> str:
    config = Config()
    descriptions = {
        name: _cell(field.description or "") for name, field in Config.model_fields.items()
    }
    out = [INTRODUCTION, "## Every key\n"]
    header = (
        "| key | type | default | environment variable | what it does |\n"
        "| --- | --- | --- | --- | --- |"
    )
    for path, rows in sections(config):
        out.append(f"### `{'.'.join(path)}`\n" if path else "### The top level\n")
        if len(path) == 1 and descriptions.get(path[0]):
            out.append(descriptions[path[0]] + "\n")
        out.append(header)
        out.extend("| " + " | ".join(row) + " |" for row in rows)
        out.append("")
    out.append("## Every default, as one file\n")
    out.append("A config file needs only the keys it changes; this is what it starts from.\n")
    out.append("```yaml")
    out.append(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False).rstrip())
    out.append("```\n")
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")
