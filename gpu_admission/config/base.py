"""The base of every configuration section, and the durations settings are written in."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(s|m|h)")
_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


class _Model(BaseModel):
    # Each field's docstring is its description: docs/configuration.md is generated from them.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


def duration_seconds(value: Any) -> Any:
    """A duration setting as seconds: a number, or a number with s, m or h (`10m`); anything
    else is left for the field's own type to refuse."""
    if not isinstance(value, str):
        return value
    if match := _DURATION.fullmatch(value.strip()):
        return float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    try:
        return float(value)
    except ValueError:
        raise ValueError(
            f"{value!r} is not a duration: give seconds, or a number with s, m or h (10m)"
        ) from None
